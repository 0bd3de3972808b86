"""The webhook chaos cells (issue 27, item 5): which cells there are, and two trials end to end with real
processes — the receiver SIGKILLed on its first delivery, a refund the bank fails and a settlement reversed after
APPLIED, the agent told a person must decide, and forged deliveries that change nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.cells import WEBHOOK_FAULTS, WEBHOOK_LIFECYCLE_MS, build_webhook_cells
from chaos.matrix import run_matrix
from interlock.failpoints import KNOWN_POINTS, POINTS, WEBHOOK_POINTS


def test_every_receiver_kill_point_meets_every_lifecycle_fault_with_the_tool_it_moves() -> None:
    cells = build_webhook_cells()
    assert sorted(c.key for c in cells) == sorted(
        f"webhook|{p}|{f}|{tool}" for p in WEBHOOK_POINTS for f, tool in WEBHOOK_FAULTS.items())
    for cell in cells:
        assert cell.faults[0]["name"] == "ambiguous_504", "the call is ambiguous: a webhook may settle it first"
        lifecycle = cell.timings.get("INTERLOCK_SANDBOX_LIFECYCLE_MS")
        assert lifecycle == (None if cell.fault == "ambiguous_504" else str(WEBHOOK_LIFECYCLE_MS))
    # The receiver's points are failpoints, but not the money call's: the kill matrix does not take them.
    assert set(WEBHOOK_POINTS) <= KNOWN_POINTS and not set(WEBHOOK_POINTS) & set(POINTS)


@pytest.mark.parametrize(("key", "told"), [
    ("webhook|webhooks.after_store_before_ack|refund_bank_failure|refund", "APPLIED/failed/ESCALATE_TO_OPERATOR"),
    ("webhook|webhooks.before_commit|settlement_reversed|settlement", "APPLIED/reversed/ESCALATE_TO_OPERATOR"),
])  # fmt: skip
def test_a_receiver_killed_mid_delivery_loses_nothing_and_the_bank_s_word_reaches_the_agent(
        tmp_path: Path, key: str, told: str) -> None:  # fmt: skip
    [cell] = [c for c in build_webhook_cells() if c.key == key]
    [result] = run_matrix([cell], 1, 2727, tmp_path, parallel=1, progress=False)
    assert result.violations == [], (result.violations, result.data_dir)
    assert result.kill_landed, f"the receiver died at {cell.point}"
    # Not definite at first: UNKNOWN, or IN_PROGRESS when a busy machine outlasts the ingress's wait for the outcome.
    assert result.first_answer in ("UNKNOWN", "IN_PROGRESS"), "the call was ambiguous"
    assert result.after_recovery == "APPLIED; 1 entity"
    assert result.webhook == {"told": told, "forged": "2 refused, 2 stored and ignored"}
