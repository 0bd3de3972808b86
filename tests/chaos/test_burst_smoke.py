"""One burst trial end to end with real processes (issue 14): forty distinct instant settlements at once,
the rail worker SIGKILLed with at least 32 of them out at the rail. A settlement has no idempotency key, so
recovery must find every one by its stamp — an IN_FLIGHT row given up on too early, or re-sent instead of
reconciled, is a second payout."""

from __future__ import annotations

from pathlib import Path

from chaos.cells import build_burst_cells
from chaos.matrix import run_matrix

CELL = "burst|rail.during_call|none|settlement"


def test_a_rail_worker_killed_with_32_settlements_in_flight_pays_each_exactly_once(tmp_path: Path) -> None:
    [cell] = [c for c in build_burst_cells() if c.key == CELL]
    [result] = run_matrix([cell], 1, 5151, tmp_path, parallel=1, progress=False)
    assert result.violations == [], (result.violations, result.burst, result.data_dir)
    assert result.kill_landed, "the rail worker died at rail.during_call"
    assert result.burst["said"] >= 32, "it fired on a call that found 32 in flight"
    assert result.burst["unfinished"] >= 32, "the ledger held at least 32 unrecorded attempts when it died"
    assert result.burst["rail_pending"] >= 1, "and the rail was still working on calls it had sent"
    assert result.after_retry == "APPLIED ×40; 40 entities", result.after_retry
