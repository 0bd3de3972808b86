"""One machine-loss trial a money tool, end to end (issue 29): a shard under a burst of refunds, instant settlements
or payouts loses its whole machine — every process SIGKILLed, its ledger and Redis deleted — and is restored on
another from a Litestream replica that lags on purpose. The calls the lost tail paid are on the rail only; the agents
repeat every call on the new machine, and each call still has exactly one entity on the rail, the answer any agent
was given before the loss still holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.cells import TOOLS
from chaos.machine_loss import CALLS, machine_loss_cell, summarise
from chaos.matrix import run_matrix


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_a_shard_restored_from_a_lagging_replica_pays_every_call_exactly_once(tool: str, tmp_path: Path) -> None:
    [result] = run_matrix([machine_loss_cell(TOOLS[tool])], 1, 2929, tmp_path, parallel=1, progress=False)
    assert result.violations == [], (result.violations, result.burst, result.data_dir)
    assert result.kill_landed and result.burst["entities_at_loss"] >= 10, result.burst
    assert result.after_retry == f"APPLIED ×{CALLS}; {CALLS} entities", result.after_retry
    assert result.burst["rpo_ms"] >= 0 and result.burst["restore_s"] > 0
    # Whatever the replica had not shipped is read back from the rail, never paid again.
    assert result.burst["recovered"] is not None and result.burst["retry_answers"] == f"APPLIED ×{CALLS}"
    line = summarise([result], command="test", seed=2929, wall_s=1, commit="test")
    assert "machine loss: 1 trials (replica on file), 0 double pays, 0 answers contradicted" in line
    assert f"  - {TOOLS[tool]}: machine loss: 1 trials" in line


def test_the_same_with_the_replica_on_an_s3_api_server(tmp_path: Path) -> None:
    """Issue 48 item 6: Litestream ships to an S3 API (moto's server mode on loopback), set as an operator sets it —
    keys in the environment, the endpoint in the replica URL — and `interlock shards restore` reads it back."""
    [result] = run_matrix([machine_loss_cell(TOOLS["refund"], "s3")], 1, 4848, tmp_path, parallel=1, progress=False)
    assert result.violations == [], (result.violations, result.burst, result.data_dir)
    assert result.kill_landed and result.after_retry == f"APPLIED ×{CALLS}; {CALLS} entities", result.after_retry
    assert result.cell == "machine_loss|lagging_replica_s3|refund"
    line = summarise([result], command="test", seed=4848, wall_s=1, commit="test")
    assert "machine loss: 1 trials (replica on s3), 0 double pays" in line and "  - replica on s3: " in line
