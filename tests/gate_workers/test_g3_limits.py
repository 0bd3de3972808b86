"""G3 window edges: exactly at the limit, one over, and the window sliding out; fee budget projection."""

from __future__ import annotations

import sqlite3

from gate_workers.gates import g3_limits
from interlock.fees import DEFAULT_FEE_RATE
from interlock.messages import Verdict
from ledger.db import transaction
from ledger.intents import finish_attempt
from tests.gate_workers.factories import context, refund_action, settlement_action
from tests.ledger.helpers import put_intent
from tests.mandates import make_mandate

DAY = 86_400_000
NOW = 1_800_000_000_000


def window(**kw: object) -> dict:
    return {"limits.windows": [{"window_ms": DAY, "currency": "INR", **kw}], "limits.fee_budgets": {}}


def test_calls_exactly_at_the_limit_pass_and_one_over_blocks(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate(window(max_calls=3))
    put_intent(ledger, "A" * 32, "APPLIED", amount=100, now=NOW - 10)
    put_intent(ledger, "B" * 32, "UNKNOWN", amount=100, now=NOW - 10)
    ctx = context(ledger, mandate, now=NOW)
    assert g3_limits.check(refund_action(100), ctx).verdict is Verdict.ALLOW  # the third call
    put_intent(ledger, "C" * 32, "AUTHORIZED", amount=100, now=NOW - 5)
    result = g3_limits.check(refund_action(100), ctx)
    assert (result.verdict, result.reason_code) == (Verdict.BLOCK, "G3_WINDOW_CALLS")


def test_amount_exactly_at_the_cap_passes_and_one_paisa_over_blocks(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate(window(max_amount_minor=200000))
    put_intent(ledger, "A" * 32, "APPLIED", amount=150000, subject="pay_X", now=NOW - 10)
    ctx = context(ledger, mandate, now=NOW)
    assert g3_limits.check(refund_action(50000), ctx).verdict is Verdict.ALLOW
    result = g3_limits.check(refund_action(50001), ctx)
    assert (result.verdict, result.reason_code) == (Verdict.BLOCK, "G3_WINDOW_AMOUNT")
    assert result.detail["counted_minor"] == 150000


def test_calls_slide_out_of_the_window(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate(window(max_calls=1))
    put_intent(ledger, "A" * 32, "APPLIED", amount=100, now=NOW - DAY + 1)  # still inside at NOW

    def verdict(now: int) -> Verdict:  # the clocks agree (INTERLOCK_CLOCK_SKEW_MS 0): the edge is exact
        return g3_limits.check(refund_action(100), context(ledger, mandate, now=now, clock_skew_ms=0)).verdict

    assert verdict(NOW) is Verdict.BLOCK
    # One millisecond later it has slid out.
    assert verdict(NOW + 1) is Verdict.ALLOW
    # With clocks up to 5 s apart it is counted 5 s longer (ADR 0032).
    assert g3_limits.check(refund_action(100), context(ledger, mandate, now=NOW + 5_000)).verdict is Verdict.BLOCK


def test_blocked_and_failed_intents_do_not_count(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate(window(max_calls=1))
    put_intent(ledger, "A" * 32, "BLOCKED", amount=100, now=NOW - 10)
    put_intent(ledger, "B" * 32, "FAILED_TERMINAL", amount=100, now=NOW - 10)
    assert g3_limits.check(refund_action(100), context(ledger, mandate, now=NOW)).verdict is Verdict.ALLOW


def test_fee_budget_counts_charged_and_projected_fees(ledger: sqlite3.Connection) -> None:
    fee_of_100k = DEFAULT_FEE_RATE.project(100000)
    assert fee_of_100k == 354  # 0.3% = 300, plus 18% tax = 54
    mandate = make_mandate({"limits.windows": [], "limits.fee_budgets": {"INR": {"window_ms": DAY,
                                                                                "max_fee_minor": 1000}}})
    applied = put_intent(ledger, "A" * 32, "APPLIED", amount=100000, tool="create_instant_settlement",
                         subject="balance", now=NOW - 10)
    with transaction(ledger):  # the rail charged 400 for it: the charge, not the projection, counts
        finish_attempt(ledger, applied.merchant_id, applied.sik, 1, now=NOW - 9, outcome="APPLIED", fee_minor=400)
    put_intent(ledger, "B" * 32, "UNKNOWN", amount=50000, tool="create_instant_settlement", subject="balance",
               now=NOW - 5)  # projected 177
    ctx = context(ledger, mandate, now=NOW)
    room = 1000 - 400 - DEFAULT_FEE_RATE.project(50000)
    assert DEFAULT_FEE_RATE.project(100000) <= room
    assert g3_limits.check(settlement_action(100000), ctx).verdict is Verdict.ALLOW
    result = g3_limits.check(settlement_action(200000), ctx)
    assert (result.verdict, result.reason_code) == (Verdict.BLOCK, "G3_FEE_BUDGET")
    assert result.detail["counted_fee_minor"] == 400 + DEFAULT_FEE_RATE.project(50000)
