"""A small smoke of the real chaos matrix (one trial per representative cell), and proof that the
matrix can fail: the same cells against deliberately broken builds must report violations."""

from __future__ import annotations

from pathlib import Path

from chaos.cells import build_cells
from chaos.matrix import run_matrix, summarise

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


def test_a_build_that_records_replayed_responses_is_caught(tmp_path: Path) -> None:
    [result] = run_matrix(cells(["rail.after_commit_before_ack|dup_response"]), 1, 77, tmp_path,
                          progress=False, mutation="record_replayed_id")  # fmt: skip
    assert any("WRONG_ENTITY" in v for v in result.violations), result


def test_a_build_that_retries_blindly_is_caught(tmp_path: Path) -> None:
    [result] = run_matrix(cells(["rail.after_commit_before_ack|ambiguous_504"]), 1, 78, tmp_path,
                          progress=False, mutation="blind_retry")  # fmt: skip
    assert any("NEVER_TWO" in v for v in result.violations), result


def test_a_random_kill_during_a_burst_leaves_every_intent_settled(tmp_path: Path) -> None:
    from chaos.random_kills import run_random_trial

    result = run_random_trial(1, 9001, tmp_path, calls=8)
    assert result.violations == [], result
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
