"""G2 counts money that may still move — HELD included — against what the rail reports: a payment's
refundable amount, and the merchant's balance for settlements (issue 13, item 7)."""

from __future__ import annotations

import sqlite3

import pytest

from gate_workers.gates import g2_value
from gate_workers.resolve import resolve
from interlock.messages import Proposal, Verdict
from rails.models import Balance, Payment
from tests.gate_workers.factories import context, payment, settlement_action
from tests.ledger.helpers import put_intent
from tests.mandates import AGENT, MERCHANT, make_mandate

SETTLE = "create_instant_settlement"


def other_settlement(ledger: sqlite3.Connection, state: str, amount: int, sik: str = "S" * 32, **kw: object) -> None:
    put_intent(ledger, sik, state, amount=amount, subject="balance", tool=SETTLE, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("state", ["AUTHORIZED", "IN_FLIGHT", "UNKNOWN", "RECONCILING", "HELD"])
def test_settlements_that_may_still_move_count_against_the_balance(ledger: sqlite3.Connection, state: str) -> None:
    other_settlement(ledger, state, 100_000)
    assert g2_value.check(settlement_action(200_000, balance=300_000), context(ledger)).verdict is Verdict.ALLOW
    result = g2_value.check(settlement_action(200_001, balance=300_000), context(ledger))
    assert (result.verdict, result.reason_code) == (Verdict.BLOCK, "G2_EXCEEDS_BALANCE")
    assert (result.detail["in_motion_minor"], result.detail["available_minor"]) == (100_000, 200_000)


@pytest.mark.parametrize("state", ["APPLIED", "FAILED_TERMINAL", "BLOCKED"])
def test_an_applied_settlement_is_already_out_of_the_balance_the_rail_reports(
    ledger: sqlite3.Connection, state: str
) -> None:
    other_settlement(ledger, state, 200_000)
    assert g2_value.check(settlement_action(250_000, balance=250_000), context(ledger)).verdict is Verdict.ALLOW


def test_a_settlement_is_not_counted_against_itself_nor_refunds_or_other_currencies(
    ledger: sqlite3.Connection,
) -> None:
    action = settlement_action(250_000, balance=250_000)
    assert action.sik is not None
    other_settlement(ledger, "UNKNOWN", 250_000, sik=action.sik)  # its own retry
    put_intent(ledger, "R" * 32, "IN_FLIGHT", amount=400_000)  # a refund: the payment's money, not the balance
    other_settlement(ledger, "HELD", 400_000, sik="U" * 32, currency="USD")
    assert g2_value.check(action, context(ledger)).verdict is Verdict.ALLOW


class Rail:
    def fetch_payment(self, payment_id: str) -> Payment:
        return payment(200_000, pid=payment_id)

    def fetch_balance(self) -> Balance:
        raise AssertionError("a refund reads no balance")


def test_a_full_refund_leaves_out_what_is_held_on_the_payment(ledger: sqlite3.Connection) -> None:
    put_intent(ledger, "H" * 32, "HELD", amount=150_000)
    proposal = Proposal(request_id="r1", agent_id=AGENT, merchant_id=MERCHANT, tool="create_refund",
                        arguments={"payment_id": "pay_T0001"}, received_at_ms=1)  # fmt: skip
    action = resolve(proposal, Rail(), ledger, make_mandate(), 1)
    assert action.amount_minor == 50_000
