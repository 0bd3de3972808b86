"""A small smoke of the real chaos matrix (one trial per representative cell). That the matrix can fail is
shown in test_mutants.py: deliberately broken copies of the tree must be caught."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from chaos.cells import build_cells
from chaos.matrix import run_matrix, summarise
from deploy.stack import Stack

SMOKE = [
    "ingress.after_enqueue|none",
    "gate.after_resolve|none",
    "rail.after_wal_before_call|none",
    "rail.during_call|slow",
    "reconciler.mid_pagination|deep_page",
    "redis.during_call|slow",
]


def cells(keys: list[str]):  # type: ignore[no-untyped-def]
    by_key = {c.key: c for c in build_cells()[0]}
    return [by_key[k] for k in keys]


def test_representative_cells_pass_with_every_kill_landed(tmp_path: Path) -> None:
    results = run_matrix(cells(SMOKE), 1, 4242, tmp_path, parallel=2, progress=False)
    assert len(results) == len(SMOKE)
    for r in results:
        assert r.violations == [], (r.cell, r.violations, r.data_dir)
        assert r.kill_landed, r.cell
        assert r.after_retry.startswith("APPLIED; 1 entit"), (r.cell, r.after_retry)
    report = summarise(results, [], command="test", seed=4242, wall_s=1.0, commit="test")
    assert "trials with a violation: 0" in report


def test_a_random_kill_during_a_burst_leaves_every_intent_settled(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from chaos import random_kills

    kill: dict[str, object] = {}
    real_burst = random_kills._burst

    async def burst(url: str, plan: list[tuple[str, str, int]], stack: Stack, victim: str, delay: float) -> None:
        # Watch the one kill of the trial: the victim must be running when it is aimed at, and die of it.
        target: Any = stack.redis if victim == "redis" else stack.actors[victim]
        aimed = target.kill

        def observed() -> None:
            if kill:  # only the trial's kill, not a later stop of the same actor
                return aimed()
            kill.update(victim=victim, alive=target.process is not None and target.process.poll() is None)
            aimed()
            kill["returncode"] = target.process.poll()

        monkeypatch.setattr(target, "kill", observed)
        await real_burst(url, plan, stack, victim, delay)

    monkeypatch.setattr(random_kills, "_burst", burst)
    result = random_kills.run_random_trial(1, 9001, tmp_path, calls=8)
    assert result.violations == [], result
    assert kill.get("alive") is True, f"the kill was aimed at a {result.victim} that was not running: {kill}"
    assert kill["returncode"] == -signal.SIGKILL, f"the {result.victim} did not die of the kill: {kill}"
    assert result.intents >= 1
    assert result.entities <= result.intents, "never more rail entities than intents"


def test_the_smoke_also_passes_in_proxy_mode(tmp_path: Path) -> None:
    """Issue 8: the same chaos machinery through the sandbox's MCP front as the rail."""
    keys = ["rail.after_wal_before_call|none", "reconciler.after_finding_before_commit|ambiguous_504"]
    results = run_matrix(cells(keys), 1, 4343, tmp_path, parallel=2, progress=False, proxy=True)
    for r in results:
        assert r.cell.endswith("|proxy")
        assert r.violations == [] and r.kill_landed, (r.cell, r.violations, r.data_dir)
        assert r.after_retry.startswith("APPLIED; 1 entit"), (r.cell, r.after_retry)
