"""Redis SIGKILLed under load (issue 17), at a reduced size: agents repeating each call until it is definite
get every refund applied exactly once. Real processes; the full size runs from `make chaos`."""

from __future__ import annotations

from pathlib import Path

from chaos.redis_load import run_redis_load


def test_redis_killed_twice_under_load_pays_each_refund_once(tmp_path: Path) -> None:
    result = run_redis_load(80, 8, tmp_path, mode="kill", outages=2, seed=11)
    assert result.violations == [], result.violations
    assert len(result.outages) == 2, "both kills landed while the agents were still calling"
    assert (result.intents, result.entities, result.answers["APPLIED"]) == (80, 80, 80)
    assert all(o.recovered_s is not None for o in result.outages), result.outages
