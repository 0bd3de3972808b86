"""G3 over committed ledger state (ledger.limits.check_limits, check_task_ceiling): the exact verdict, reason code
and detail an operator reads, at one minor unit under / at / over each limit, at the window's edge in ms, across
currencies, over several windows, and with the intent's own SIK never counted against itself."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from interlock.errors import MandateError
from interlock.fees import FeeRate
from interlock.mandate import Mandate
from interlock.task import EXCEEDS_TASK_CEILING
from interlock.verdicts import GateResult, allow, block
from ledger.db import transaction
from ledger.intents import finish_attempt
from ledger.limits import check_limits, check_task_ceiling
from tests.ledger.helpers import put_intent
from tests.mandates import AGENT, MERCHANT, make_mandate

DAY = 86_400_000
NOW = 1_800_000_000_000
OWN = "O" * 32
SETTLE = "create_instant_settlement"
# 1% and no tax: a fee is amount / 100 rounded up, so the budget arithmetic below reads at a glance.
RATE = FeeRate(fee_per_mille=10, tax_percent=0)


def limits(windows: list[dict[str, Any]], fee_budgets: dict[str, Any] | None = None) -> Mandate:
    return make_mandate({"limits.windows": windows, "limits.fee_budgets": fee_budgets or {}})


def check(conn: sqlite3.Connection, mandate: Mandate, amount: int, *, tool: str = "create_refund",
          currency: str = "INR", now: int = NOW, sik: str = OWN, clock_skew_ms: int = 0) -> GateResult:  # fmt: skip
    """G3 with the deployment told its clocks agree (INTERLOCK_CLOCK_SKEW_MS 0) unless given: the edges are exact."""
    return check_limits(conn, mandate, merchant_id=MERCHANT, agent_id=AGENT, sik=sik, tool=tool, amount_minor=amount,
                        currency=currency, now_ms=now, rate=RATE, clock_skew_ms=clock_skew_ms)  # fmt: skip


def test_the_last_call_a_window_allows_passes_and_the_next_is_blocked_with_its_counts(
    ledger: sqlite3.Connection,
) -> None:
    mandate = limits([{"window_ms": DAY, "max_calls": 3, "currency": "INR"}])
    put_intent(ledger, "A" * 32, "APPLIED", amount=100, now=NOW - 10)
    put_intent(ledger, "B" * 32, "HELD", amount=100, now=NOW - 10)
    put_intent(ledger, OWN, "AUTHORIZED", amount=100, now=NOW - 5)  # this call's own intent: never counted
    assert check(ledger, mandate, 100) == allow("G3_WITHIN_LIMITS")
    put_intent(ledger, "C" * 32, "UNKNOWN", amount=100, now=NOW - 1)
    assert check(ledger, mandate, 100) == block("G3_WINDOW_CALLS", window=0, window_ms=DAY, calls=3, max_calls=3)


def test_refused_and_failed_calls_and_other_agents_do_not_fill_a_window(ledger: sqlite3.Connection) -> None:
    mandate = limits([{"window_ms": DAY, "max_calls": 1, "currency": "INR"}])
    put_intent(ledger, "A" * 32, "BLOCKED", amount=100, now=NOW - 10)
    put_intent(ledger, "B" * 32, "FAILED_TERMINAL", amount=100, now=NOW - 10)
    put_intent(ledger, "C" * 32, "APPLIED", amount=100, now=NOW - 10, agent_id="agent_other")
    put_intent(ledger, "D" * 32, "APPLIED", amount=100, now=NOW - 10, merchant_id="acc_OTHER00001")
    assert check(ledger, mandate, 100) == allow("G3_WITHIN_LIMITS")


def test_a_call_counts_from_the_first_ms_of_the_window_and_not_one_ms_before(ledger: sqlite3.Connection) -> None:
    mandate = limits([{"window_ms": DAY, "max_calls": 2, "currency": "INR"}])
    put_intent(ledger, "A" * 32, "APPLIED", amount=100, now=NOW - DAY)  # one ms outside the window ending at NOW
    put_intent(ledger, "B" * 32, "APPLIED", amount=100, now=NOW - DAY + 1)  # the window's first ms
    assert check(ledger, mandate, 100) == allow("G3_WITHIN_LIMITS")  # B and this call: 2 of 2
    assert check(ledger, mandate, 100, now=NOW - 1) == block(
        "G3_WINDOW_CALLS", window=0, window_ms=DAY, calls=2, max_calls=2
    )  # A is still inside a window that ends one ms earlier
    # One ms later B has slid out too.
    assert check(ledger, mandate, 100, now=NOW + 1) == allow("G3_WITHIN_LIMITS")


def test_a_window_counts_back_the_clock_skew_further_than_its_length(ledger: sqlite3.Connection) -> None:
    """ADR 0032: authorized_at was stamped by the process that authorized the call (the rail worker, an operator's
    release, a reconciler's retry) and the window ends at this caller's clock, which may run up to
    INTERLOCK_CLOCK_SKEW_MS ahead: a call stamped up to that much before the window is counted in it."""
    mandate = limits([{"window_ms": DAY, "max_calls": 1, "currency": "INR"}])
    put_intent(ledger, "A" * 32, "APPLIED", amount=100, now=NOW - DAY - 999)  # by a clock up to 1 s behind: inside
    assert check(ledger, mandate, 100) == allow("G3_WITHIN_LIMITS")
    assert check(ledger, mandate, 100, clock_skew_ms=1_000) == block(
        "G3_WINDOW_CALLS", window=0, window_ms=DAY, calls=1, max_calls=1)
    assert check(ledger, mandate, 100, clock_skew_ms=998) == allow("G3_WITHIN_LIMITS")


def test_a_window_amount_is_reached_exactly_and_one_minor_unit_over_is_blocked(ledger: sqlite3.Connection) -> None:
    mandate = limits([{"window_ms": DAY, "max_amount_minor": 1000, "currency": "INR"}])
    put_intent(ledger, "A" * 32, "APPLIED", amount=400, now=NOW - 10)
    put_intent(ledger, "B" * 32, "RECONCILING", amount=200, now=NOW - 10)
    put_intent(ledger, "U" * 32, "APPLIED", amount=50_000, now=NOW - 10, currency="USD")  # another currency
    put_intent(ledger, OWN, "AUTHORIZED", amount=401, now=NOW - 5)
    assert check(ledger, mandate, 400) == allow("G3_WITHIN_LIMITS")
    assert check(ledger, mandate, 401) == block("G3_WINDOW_AMOUNT", window=0, window_ms=DAY, counted_minor=600,
                                                amount_minor=401, max_amount_minor=1000)  # fmt: skip


def test_a_window_in_another_currency_caps_only_that_currency(ledger: sqlite3.Connection) -> None:
    mandate = limits([{"window_ms": DAY, "max_amount_minor": 1000, "currency": "USD"}])
    put_intent(ledger, "A" * 32, "APPLIED", amount=900, now=NOW - 10, currency="USD")
    assert check(ledger, mandate, 5_000_000) == allow("G3_WITHIN_LIMITS")  # an INR call is not capped in USD
    assert check(ledger, mandate, 100, currency="USD") == allow("G3_WITHIN_LIMITS")
    assert check(ledger, mandate, 101, currency="USD") == block(
        "G3_WINDOW_AMOUNT", window=0, window_ms=DAY, counted_minor=900, amount_minor=101, max_amount_minor=1000
    )


def test_a_calls_only_window_does_not_judge_the_amount(ledger: sqlite3.Connection) -> None:
    mandate = limits([{"window_ms": DAY, "max_calls": 5, "currency": "INR"}])
    put_intent(ledger, "A" * 32, "APPLIED", amount=400_000, now=NOW - 10)
    assert check(ledger, mandate, 500_000) == allow("G3_WITHIN_LIMITS")


def test_the_block_names_the_window_that_is_full(ledger: sqlite3.Connection) -> None:
    hour = 3_600_000
    mandate = limits([
        {"window_ms": DAY, "max_calls": 10, "max_amount_minor": 100_000, "currency": "INR"},
        {"window_ms": hour, "max_calls": 2, "currency": "INR"},
        {"window_ms": hour, "max_amount_minor": 1000, "currency": "INR"},
    ])  # fmt: skip
    put_intent(ledger, "A" * 32, "APPLIED", amount=300, now=NOW - DAY + 5)  # in the day, not in the hour
    put_intent(ledger, "B" * 32, "APPLIED", amount=300, now=NOW - 10)
    assert check(ledger, mandate, 700) == allow("G3_WITHIN_LIMITS")
    assert check(ledger, mandate, 701) == block("G3_WINDOW_AMOUNT", window=2, window_ms=hour, counted_minor=300,
                                                amount_minor=701, max_amount_minor=1000)  # fmt: skip
    put_intent(ledger, "C" * 32, "APPLIED", amount=100, now=NOW - 10)
    assert check(ledger, mandate, 100) == block("G3_WINDOW_CALLS", window=1, window_ms=hour, calls=2, max_calls=2)


def _settlements(conn: sqlite3.Connection) -> None:
    """Fees counted at NOW: a charged 400 (the rail's figure, not the projection 500) and a projected 200."""
    charged = put_intent(conn, "A" * 32, "APPLIED", amount=50_000, tool=SETTLE, subject="balance", now=NOW - 10)
    with transaction(conn):
        finish_attempt(conn, charged.merchant_id, charged.sik, 1, now=NOW - 9, outcome="APPLIED", fee_minor=400)
    put_intent(conn, "B" * 32, "UNKNOWN", amount=20_000, tool=SETTLE, subject="balance", now=NOW - DAY + 1)
    put_intent(conn, "C" * 32, "APPLIED", amount=90_000, tool=SETTLE, subject="balance", now=NOW - DAY)  # slid out
    put_intent(conn, "R" * 32, "APPLIED", amount=90_000, subject="pay_R")  # a refund: no fee
    put_intent(conn, OWN, "AUTHORIZED", amount=40_001, tool=SETTLE, subject="balance", now=NOW - 5)


FEES = {"INR": {"window_ms": DAY, "max_fee_minor": 1000}}


def test_the_fee_budget_is_reached_exactly_and_one_minor_unit_of_fee_over_is_blocked(
    ledger: sqlite3.Connection,
) -> None:
    _settlements(ledger)
    mandate = limits([], FEES)
    assert check(ledger, mandate, 40_000, tool=SETTLE) == allow("G3_WITHIN_LIMITS")  # 600 + 400 = 1000
    assert check(ledger, mandate, 40_001, tool=SETTLE) == block(
        "G3_FEE_BUDGET", counted_fee_minor=600, projected_fee_minor=401, max_fee_minor=1000, window_ms=DAY
    )


def test_the_fee_budget_window_starts_one_ms_after_now_minus_its_length(ledger: sqlite3.Connection) -> None:
    _settlements(ledger)
    mandate = limits([], FEES)
    # One ms later B (projected 200) has slid out as well: 400 counted, room for a 600 fee.
    assert check(ledger, mandate, 60_000, tool=SETTLE, now=NOW + 1) == allow("G3_WITHIN_LIMITS")
    assert check(ledger, mandate, 60_001, tool=SETTLE, now=NOW + 1) == block(
        "G3_FEE_BUDGET", counted_fee_minor=400, projected_fee_minor=601, max_fee_minor=1000, window_ms=DAY
    )


def test_the_fee_budget_judges_only_settlements_in_its_own_currency(ledger: sqlite3.Connection) -> None:
    _settlements(ledger)
    assert check(ledger, limits([], FEES), 900_000) == allow("G3_WITHIN_LIMITS")  # a refund pays no fee
    usd_only = limits([], {"USD": {"window_ms": DAY, "max_fee_minor": 0}})
    assert check(ledger, usd_only, 900_000, tool=SETTLE) == allow("G3_WITHIN_LIMITS")
    assert check(ledger, usd_only, 1, tool=SETTLE, currency="USD") == block(
        "G3_FEE_BUDGET", counted_fee_minor=0, projected_fee_minor=1, max_fee_minor=0, window_ms=DAY
    )


def test_windows_are_judged_before_the_fee_budget(ledger: sqlite3.Connection) -> None:
    _settlements(ledger)
    mandate = limits([{"window_ms": DAY, "max_calls": 2, "currency": "INR"}], FEES)
    assert check(ledger, mandate, 90_000, tool=SETTLE) == block(
        "G3_WINDOW_CALLS", window=0, window_ms=DAY, calls=2, max_calls=2
    )  # A and B (the refund R is outside the window): the fee budget, also full, is not reached


TASK = "task_1"


def _task_intents(conn: sqlite3.Connection) -> None:
    put_intent(conn, "A" * 32, "APPLIED", amount=400, task_id=TASK, task_ceiling_minor=1000)
    put_intent(conn, "B" * 32, "HELD", amount=200, task_id=TASK, task_ceiling_minor=1000, subject="pay_B")
    put_intent(conn, "X" * 32, "BLOCKED", amount=300, task_id=TASK, task_ceiling_minor=1000)  # refused: not counted
    put_intent(conn, "T" * 32, "APPLIED", amount=900, task_id="task_2", task_ceiling_minor=1000)
    put_intent(conn, "Z" * 32, "APPLIED", amount=900, task_id=TASK, task_signer="another_harness")  # its own ticket
    put_intent(conn, OWN, "AUTHORIZED", amount=401, task_id=TASK, task_ceiling_minor=1000)


def ceiling(conn: sqlite3.Connection, amount: int) -> GateResult:
    return check_task_ceiling(conn, signer="ticketing", task_id=TASK, sik=OWN, amount_minor=amount,
                              ceiling_minor=1000)  # fmt: skip


def test_a_task_ceiling_is_reached_exactly_and_one_minor_unit_over_is_blocked(ledger: sqlite3.Connection) -> None:
    _task_intents(ledger)
    assert ceiling(ledger, 400) == allow("G2_WITHIN_TASK_CEILING", task_id=TASK, counted_minor=600,
                                         max_amount_minor=1000)  # fmt: skip
    assert ceiling(ledger, 401) == block(EXCEEDS_TASK_CEILING, task_id=TASK, counted_minor=600, amount_minor=401,
                                         max_amount_minor=1000)  # fmt: skip


def test_a_task_ceiling_counts_every_merchant_and_tool_under_one_signed_task(ledger: sqlite3.Connection) -> None:
    # Issue 25 item 5: the ceiling is the signed ticket's, not one merchant's or one tool's — money another
    # merchant's agent or a settlement moved under the same (signer, task_id) is counted too.
    put_intent(ledger, "A" * 32, "APPLIED", amount=400, task_id=TASK, task_ceiling_minor=1000)
    put_intent(ledger, "M" * 32, "APPLIED", amount=300, task_id=TASK, merchant_id="acc_OTHER00001",
               agent_id="agent_other", task_ceiling_minor=1000)  # fmt: skip
    put_intent(ledger, "S" * 32, "UNKNOWN", amount=200, task_id=TASK, tool=SETTLE, subject="balance")
    assert ceiling(ledger, 100) == allow("G2_WITHIN_TASK_CEILING", task_id=TASK, counted_minor=900,
                                         max_amount_minor=1000)  # fmt: skip
    assert ceiling(ledger, 101).reason_code == EXCEEDS_TASK_CEILING


def test_a_v1_intent_of_the_same_task_id_counts_against_the_signed_task(ledger: sqlite3.Connection) -> None:
    # Recorded before the signer was (task_signer NULL): counted rather than ignored — over-counting refuses.
    put_intent(ledger, "V" * 32, "APPLIED", amount=950, task_id=TASK, task_signer=None)
    assert ceiling(ledger, 51).reason_code == EXCEEDS_TASK_CEILING


PAYOUT = "create_payout"
PAYEE_A, PAYEE_B = "fa_PAYEEA00000001", "fa_PAYEEB00000001"


def check_payout(conn: sqlite3.Connection, mandate: Mandate, amount: int, payee: str) -> GateResult:
    return check_limits(conn, mandate, merchant_id=MERCHANT, agent_id=AGENT, sik=OWN, tool=PAYOUT,
                        amount_minor=amount, currency="INR", now_ms=NOW, rate=RATE, subject=payee)  # fmt: skip


def payout_limits(windows: list[dict[str, Any]], fee_budgets: dict[str, Any] | None = None) -> Mandate:
    return make_mandate({
        "limits.windows": windows, "limits.fee_budgets": fee_budgets or {},
        "scope.grants.create_payout": {"reversibility": "irreversible", "payees": {"fund_account_ids": [PAYEE_A]},
                                       "value": {"min_amount_minor": 100, "max_amount_minor": 10**6,
                                                 "currencies": ["INR"]}},
        "idempotency.create_payout": {"window_ms": DAY}, "rail.account_number": "7878780080316316",
    })  # fmt: skip


def test_a_per_payee_window_counts_each_payee_apart_and_other_tools_not_at_all(ledger: sqlite3.Connection) -> None:
    mandate = payout_limits([{"window_ms": DAY, "max_calls": 1, "max_amount_minor": 50_000, "currency": "INR",
                              "tool": PAYOUT, "per_subject": True}])  # fmt: skip
    put_intent(ledger, "A" * 32, "APPLIED", amount=40_000, tool=PAYOUT, subject=PAYEE_A, now=NOW - 10)
    put_intent(ledger, "B" * 32, "APPLIED", amount=40_000, now=NOW - 10)  # a refund: another tool's call
    assert check_payout(ledger, mandate, 40_000, PAYEE_B) == allow("G3_WITHIN_LIMITS")
    assert check_payout(ledger, mandate, 100, PAYEE_A) == block(
        "G3_WINDOW_CALLS", window=0, window_ms=DAY, calls=1, max_calls=1)  # fmt: skip
    # A refund is not counted by a payout window, whatever its size.
    assert check(ledger, mandate, 400_000) == allow("G3_WITHIN_LIMITS")


def test_a_payout_window_over_every_payee_sums_them(ledger: sqlite3.Connection) -> None:
    mandate = payout_limits([{"window_ms": DAY, "max_amount_minor": 50_000, "currency": "INR", "tool": PAYOUT}])
    put_intent(ledger, "A" * 32, "APPLIED", amount=30_000, tool=PAYOUT, subject=PAYEE_A, now=NOW - 10)
    assert check_payout(ledger, mandate, 20_000, PAYEE_B) == allow("G3_WITHIN_LIMITS")
    assert check_payout(ledger, mandate, 20_001, PAYEE_B) == block(
        "G3_WINDOW_AMOUNT", window=0, window_ms=DAY, counted_minor=30_000, amount_minor=20_001,
        max_amount_minor=50_000)  # fmt: skip


def test_payouts_and_settlements_share_the_fee_budget_a_payout_at_its_flat_fee(ledger: sqlite3.Connection) -> None:
    mandate = payout_limits([], {"INR": {"window_ms": DAY, "max_fee_minor": 1_500}})
    put_intent(ledger, "A" * 32, "APPLIED", amount=40_000, tool=PAYOUT, subject=PAYEE_A, now=NOW - 10)  # 500
    put_intent(ledger, "B" * 32, "APPLIED", amount=50_000, tool=SETTLE, subject="balance", now=NOW - 10)  # 500
    assert check_payout(ledger, mandate, 1_000_000, PAYEE_A) == allow("G3_WITHIN_LIMITS")  # flat: 500 more
    put_intent(ledger, "C" * 32, "APPLIED", amount=100, tool=PAYOUT, subject=PAYEE_A, now=NOW - 10)
    assert check_payout(ledger, mandate, 100, PAYEE_A) == block(
        "G3_FEE_BUDGET", counted_fee_minor=1_500, projected_fee_minor=500, max_fee_minor=1_500,
        window_ms=DAY)  # fmt: skip


def test_a_per_subject_window_names_its_tool() -> None:
    with pytest.raises(MandateError, match="per_subject needs the tool"):
        limits([{"window_ms": DAY, "max_calls": 1, "per_subject": True}])
    with pytest.raises(MandateError, match="fetch_payment moves no money"):
        limits([{"window_ms": DAY, "max_calls": 1, "tool": "fetch_payment"}])
