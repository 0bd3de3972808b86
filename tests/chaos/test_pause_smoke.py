"""One pause trial end to end with real processes: the rail worker is SIGSTOPped with an instant settlement's
IN_FLIGHT row committed and its request not yet sent; a standby takes the lease once it has run out, the
reconciler finds nothing on the rail and re-authorizes, the standby sends the retry — and the stopped worker
is woken right then, while that retry is in flight. A settlement has no idempotency key on the rail, so the
send-side fence is all that stands between that wake-up and a second payout (issue 13: before the fence,
this trial paid the settlement twice)."""

from __future__ import annotations

from pathlib import Path

from chaos.cells import build_pause_cells
from chaos.matrix import run_matrix

CELL = "pause|rail.after_wal_before_call|ambiguous_504|settlement|early"


def test_a_settlement_worker_woken_during_the_standbys_retry_pays_nothing_twice(tmp_path: Path) -> None:
    [cell] = [c for c in build_pause_cells() if c.key == CELL]
    [result] = run_matrix([cell], 1, 4646, tmp_path, parallel=1, progress=False)
    assert result.violations == [], (result.violations, result.pause, result.data_dir)
    assert result.kill_landed, "the worker stopped at its failpoint"
    assert result.pause["epochs"] == "1->2", "a standby took the lease while it was stopped"
    assert result.pause["stalled_ms"] > result.pause["lease_left_ms"], "it slept past the end of its lease"
    assert not result.pause["woke_with"].endswith("#1"), "it was woken after the standby's retry had started"
    assert result.pause["exit_code"] is not None, "once awake without its lease, it stopped"
    assert result.pause["born_after_wake"] <= 1 and result.pause["writes_after_wake"] == 0
    assert result.after_retry == "APPLIED; 1 entity", result.after_retry
