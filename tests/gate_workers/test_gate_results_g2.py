"""G2's whole result at each boundary of value: the rail's referent (captured, refundable, balance), the mandate's
per-call range and hold threshold (one minor unit under, at and over), its currency and grant, and a task's ceiling
on the sum — every detail key an operator reads, compared with ==."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from typing import Any

import pytest

from gate_workers.context import ResolvedAction
from gate_workers.gates import g2_value
from interlock.messages import Verdict
from interlock.task import Task, VerifiedTask, new_task
from interlock.verdicts import GateResult
from tests.gate_workers.factories import NOW, context, payment, refund_action, settlement_action
from tests.ledger.helpers import put_intent
from tests.mandates import AGENT, MERCHANT, make_mandate

A, H, B = Verdict.ALLOW, Verdict.HOLD, Verdict.BLOCK
BIG = payment(amount=900_000)  # room for the mandate's range (100 .. 500000) to be the limit that binds
NO_HOLD = {"approval.hold_above_minor": None}


def within(amount: int, currency: str = "INR") -> GateResult:
    return GateResult(A, "G2_WITHIN_VALUE", {"amount_minor": amount, "currency": currency})


def test_a_resolution_error_blocks_with_its_reason_and_detail(ledger: sqlite3.Connection) -> None:
    action = replace(refund_action(resolution_error="G2_PAYMENT_NOT_FOUND"), resolution_detail={"payment_id": "pay_X"})
    assert g2_value.check(action, context(ledger)) == GateResult(B, "G2_PAYMENT_NOT_FOUND", {"payment_id": "pay_X"})


@pytest.mark.parametrize("missing", ["currency", "sik"])
def test_an_action_resolved_without_its_currency_or_sik_is_refused_loudly_not_judged(
    ledger: sqlite3.Connection, missing: str
) -> None:
    unset: dict[str, Any] = {missing: None}
    with pytest.raises(AssertionError):
        g2_value.check(replace(refund_action(), **unset), context(ledger))


@pytest.mark.parametrize(("status", "captured"), [("authorized", True), ("captured", False), ("authorized", False)])
def test_a_payment_the_rail_does_not_show_as_captured_cannot_be_refunded(
    ledger: sqlite3.Connection, status: str, captured: bool
) -> None:
    action = refund_action(pay=payment(status=status, captured=captured))
    assert g2_value.check(action, context(ledger)) == GateResult(
        B, "G2_NOT_CAPTURED", {"payment_id": "pay_T0001", "status": status}
    )


def test_a_partly_refunded_payment_can_be_refunded_up_to_what_is_left(ledger: sqlite3.Connection) -> None:
    pay = payment(amount=189_900, refunded=100_000, status="refunded")
    assert g2_value.check(refund_action(89_900, pay=pay), context(ledger)) == within(89_900)


def test_a_refund_one_unit_over_what_is_left_names_every_term_of_the_ceiling(ledger: sqlite3.Connection) -> None:
    put_intent(ledger, "O" * 32, "IN_FLIGHT", amount=30_000)
    pay = payment(amount=189_900, refunded=100_000)
    assert g2_value.check(refund_action(59_900, pay=pay), context(ledger)) == within(59_900)
    result = g2_value.check(refund_action(59_901, pay=pay), context(ledger))
    assert result == GateResult(B, "G2_EXCEEDS_REFUNDABLE", {
        "amount_minor": 59_901, "refundable_minor": 59_900, "captured_minor": 189_900, "refunded_minor": 100_000,
        "in_motion_minor": 30_000})  # fmt: skip


@pytest.mark.parametrize(("refunded", "in_motion"), [(189_900, 0), (100_000, 89_900), (100_000, 150_000)])
def test_nothing_left_to_refund_reports_zero_refundable_never_a_negative_or_a_unit(
    ledger: sqlite3.Connection, refunded: int, in_motion: int
) -> None:
    if in_motion:
        put_intent(ledger, "O" * 32, "UNKNOWN", amount=in_motion)
    result = g2_value.check(refund_action(100, pay=payment(refunded=refunded)), context(ledger))
    assert result == GateResult(B, "G2_EXCEEDS_REFUNDABLE", {
        "amount_minor": 100, "refundable_minor": 0, "captured_minor": 189_900, "refunded_minor": refunded,
        "in_motion_minor": in_motion})  # fmt: skip


def test_a_settlement_one_unit_over_the_available_balance_names_balance_and_money_in_motion(
    ledger: sqlite3.Connection,
) -> None:
    put_intent(ledger, "S" * 32, "AUTHORIZED", amount=40_000, subject="balance", tool="create_instant_settlement")
    assert g2_value.check(settlement_action(60_000, balance=100_000), context(ledger)) == within(60_000)
    result = g2_value.check(settlement_action(60_001, balance=100_000), context(ledger))
    assert result == GateResult(
        B,
        "G2_EXCEEDS_BALANCE",
        {"amount_minor": 60_001, "balance_minor": 100_000, "in_motion_minor": 40_000, "available_minor": 60_000},
    )


@pytest.mark.parametrize(("balance", "in_motion"), [(0, 0), (40_000, 40_000), (40_000, 50_000)])
def test_no_available_balance_reports_zero_available_never_a_negative_or_a_unit(
    ledger: sqlite3.Connection, balance: int, in_motion: int
) -> None:
    if in_motion:
        put_intent(ledger, "S" * 32, "HELD", amount=in_motion, subject="balance", tool="create_instant_settlement")
    result = g2_value.check(settlement_action(100, balance=balance), context(ledger))
    assert result == GateResult(
        B,
        "G2_EXCEEDS_BALANCE",
        {"amount_minor": 100, "balance_minor": balance, "in_motion_minor": in_motion, "available_minor": 0},
    )


def test_the_mandate_maximum_is_allowed_and_one_unit_over_it_is_blocked(ledger: sqlite3.Connection) -> None:
    ctx = context(ledger, make_mandate(NO_HOLD))
    assert g2_value.check(refund_action(500_000, pay=BIG), ctx) == within(500_000)
    assert g2_value.check(refund_action(500_001, pay=BIG), ctx) == GateResult(
        B, "G2_ABOVE_MAX", {"amount_minor": 500_001, "max_amount_minor": 500_000}
    )


def test_the_mandate_minimum_is_allowed_and_one_unit_under_it_is_blocked(ledger: sqlite3.Connection) -> None:
    assert g2_value.check(refund_action(100), context(ledger)) == within(100)
    assert g2_value.check(refund_action(99), context(ledger)) == GateResult(
        B, "G2_BELOW_MIN", {"amount_minor": 99, "min_amount_minor": 100}
    )


def test_the_hold_threshold_itself_is_allowed_and_one_unit_over_it_holds_for_the_approvers(
    ledger: sqlite3.Connection,
) -> None:
    assert g2_value.check(refund_action(300_000, pay=BIG), context(ledger)) == within(300_000)
    assert g2_value.check(refund_action(300_001, pay=BIG), context(ledger)) == GateResult(
        H, "G2_ABOVE_HOLD_THRESHOLD", {"amount_minor": 300_001, "hold_above_minor": 300_000,
                                       "approvers": ["ops_lead@example.com"]})  # fmt: skip


def test_a_currency_the_grant_does_not_list_is_blocked_naming_the_allowed_ones(ledger: sqlite3.Connection) -> None:
    result = g2_value.check(refund_action(50_000, pay=payment(currency="USD")), context(ledger))
    assert result == GateResult(B, "G2_CURRENCY_MISMATCH", {"currency": "USD", "allowed": ["INR"]})


def test_a_tool_the_mandate_does_not_grant_has_no_value_range(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate(drop=("scope.grants.create_refund",))
    result = g2_value.check(refund_action(), context(ledger, mandate))
    assert result == GateResult(B, "G2_NO_VALUE_GRANT", {"tool": "create_refund"})


def test_a_read_only_grant_has_no_value_range(ledger: sqlite3.Connection) -> None:
    result = g2_value.check(refund_action(tool="fetch_payment"), context(ledger))
    assert result == GateResult(B, "G2_NO_VALUE_GRANT", {"tool": "fetch_payment"})


def test_without_a_mandate_there_is_no_value_range(ledger: sqlite3.Connection) -> None:
    result = g2_value.check(refund_action(), replace(context(ledger), mandate=None))
    assert result == GateResult(B, "G2_NO_VALUE_GRANT", {"tool": "create_refund"})


def _bound(action: ResolvedAction, ceiling: int) -> ResolvedAction:
    task = Task.model_validate(new_task("ticket-1", NOW + 3_600_000, "create_refund", merchant_id=MERCHANT,
                                        agent_ids=[AGENT], max_amount_minor=ceiling))
    return replace(action, task=VerifiedTask(task=task, digest="d" * 64, signer="ticketing"))


def test_a_task_ceiling_caps_the_sum_under_the_task_before_the_mandate_range(ledger: sqlite3.Connection) -> None:
    put_intent(ledger, "T" * 32, "APPLIED", amount=30_000, task_id="ticket-1", task_ceiling_minor=80_000)
    assert g2_value.check(_bound(refund_action(50_000), 80_000), context(ledger)) == within(50_000)
    result = g2_value.check(_bound(refund_action(50_001), 80_000), context(ledger))
    assert result == GateResult(
        B,
        "G2_EXCEEDS_TASK_CEILING",
        {"task_id": "ticket-1", "counted_minor": 30_000, "amount_minor": 50_001, "max_amount_minor": 80_000},
    )
