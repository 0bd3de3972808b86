"""G3's whole result for what it counts: nothing for an action with no resolved key, amount or currency (G1/G2
have already refused it), and never the call's own intent — a retry re-checked after its admit is not counted
against itself, in the call window nor in the fee budget."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from typing import Any

import pytest

from gate_workers.gates import g3_limits
from interlock.messages import Verdict
from interlock.verdicts import GateResult
from tests.gate_workers.factories import NOW, context, refund_action, settlement_action
from tests.ledger.helpers import put_intent
from tests.mandates import make_mandate

A, B = Verdict.ALLOW, Verdict.BLOCK
DAY = 86_400_000
NOT_APPLICABLE = GateResult(A, "G3_NOT_APPLICABLE", {})
WITHIN = GateResult(A, "G3_WITHIN_LIMITS", {})


@pytest.mark.parametrize("missing", ["sik", "amount_minor", "currency"])
def test_an_action_missing_its_key_amount_or_currency_is_not_counted(ledger: sqlite3.Connection, missing: str) -> None:
    unset: dict[str, Any] = {missing: None}
    action = replace(refund_action(), **unset)
    assert g3_limits.check(action, context(ledger)) == NOT_APPLICABLE


def test_without_a_mandate_there_is_nothing_to_count_against(ledger: sqlite3.Connection) -> None:
    assert g3_limits.check(refund_action(), replace(context(ledger), mandate=None)) == NOT_APPLICABLE


def test_a_retry_is_not_counted_against_its_own_window_slot(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate({"limits.windows": [{"window_ms": DAY, "currency": "INR", "max_calls": 1}]})
    action = refund_action()
    assert action.sik is not None
    put_intent(ledger, action.sik, "AUTHORIZED", amount=50_000, now=NOW - 10)
    assert g3_limits.check(action, context(ledger, mandate)) == WITHIN
    other = refund_action(50_001)
    assert g3_limits.check(other, context(ledger, mandate)) == GateResult(
        B, "G3_WINDOW_CALLS", {"window": 0, "window_ms": DAY, "calls": 1, "max_calls": 1}
    )


def test_a_retried_settlement_is_not_counted_against_its_own_fee_budget(ledger: sqlite3.Connection) -> None:
    # 4000 paise projects a fee of 15 (0.3% + 18% tax): one fits the budget of 20, two do not.
    budget = {"INR": {"window_ms": DAY, "max_fee_minor": 20}}
    mandate = make_mandate({"limits.windows": [], "limits.fee_budgets": budget})
    action = settlement_action(4_000)
    assert action.sik is not None
    put_intent(ledger, action.sik, "AUTHORIZED", amount=4_000, now=NOW - 10, subject="balance",
               tool="create_instant_settlement")  # fmt: skip
    assert g3_limits.check(action, context(ledger, mandate)) == WITHIN
    assert g3_limits.check(settlement_action(4_001), context(ledger, mandate)) == GateResult(
        B, "G3_FEE_BUDGET", {"counted_fee_minor": 15, "projected_fee_minor": 16, "max_fee_minor": 20, "window_ms": DAY}
    )
