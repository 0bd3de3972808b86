"""Approving a hold re-runs G2 against a fresh rail read (issue 13, item 7): money that moved or was held
since the call was held may leave no room for it, and then nothing is released."""

from __future__ import annotations

import socket
import sqlite3

import pytest

from interlock.errors import OperatorRefused
from ledger.states import State
from ops import holds
from rails.razorpay import RazorpayClient
from tests.ops.conftest import HELD_AMOUNT, Operated, ops_context_for


def refund_outside_interlock(operated: Operated, payment_id: str, amount: int) -> None:
    """Someone refunds on the rail directly (the dashboard, another system): no stamp of ours."""
    rail = operated.engine.rail
    with RazorpayClient(rail.url, rail.key_id, rail.key_secret, timeout_ms=5000) as client:
        client.create_refund(payment_id, amount, notes=None, receipt=None, idempotency_key=None)


def test_a_hold_that_no_longer_fits_the_payment_is_not_released(operated: Operated) -> None:
    pid, sik = operated.held()  # 3,500.00 of a 5,000.00 payment
    refund_outside_interlock(operated, pid, 200_000)
    with pytest.raises(OperatorRefused, match=r"G2_EXCEEDS_REFUNDABLE: the held 3,500.00 INR no longer fits .*"
                                              r"refunded 2,000.00 INR .* = 3,000.00 INR left"):  # fmt: skip
        operated.approve(sik, reason="checked")
    assert operated.engine.intent(sik).state is State.HELD  # type: ignore[union-attr]
    assert operated.engine.rail.count_stamped(sik) == 0


def test_other_held_calls_on_the_payment_count_at_the_gate_and_at_approval(operated: Operated) -> None:
    pid, first = operated.held(payment_amount=700_000)
    # G2 at the gate: the first hold's 3,500.00 is counted, so only 3,500.00 is left for anything else.
    over = operated.engine.outcome(operated.engine.propose({"payment_id": pid, "amount": HELD_AMOUNT + 1}))
    assert (over.state, over.reason_code) == ("BLOCKED", "G2_EXCEEDS_REFUNDABLE")
    second = operated.engine.outcome(operated.engine.propose({"payment_id": pid, "amount": HELD_AMOUNT,
                                                              "interlock_distinct_reason": "second duplicate charge"}))
    assert second.state == "HELD" and second.sik not in (None, first)
    refund_outside_interlock(operated, pid, 1)
    # 7,000.00 - 0.01 refunded - 3,500.00 held by the second call leaves 3,499.99: the first no longer fits.
    with pytest.raises(OperatorRefused, match=r"other intents in motion or held 3,500.00 INR = 3,499.99 INR left"):
        operated.approve(first, reason="checked")
    holds.reject(operated.ops, second.sik, approver=operated.approver(), reason="the same charge")  # type: ignore[arg-type]
    # With the second call refused, the first fits again; it is not counted against itself.
    operated.approve(first, reason="checked again")
    operated.engine.settle(first, {"APPLIED"})
    assert operated.engine.rail.count_stamped(first) == 1


def test_a_held_settlement_is_judged_against_the_balance_now(operated: Operated) -> None:
    operated.engine.rail.set_balance(900_000)
    held = operated.engine.outcome(operated.engine.propose({"amount": HELD_AMOUNT}, tool="create_instant_settlement"))
    assert held.state == "HELD" and held.sik is not None
    operated.engine.rail.set_balance(300_000)
    with pytest.raises(OperatorRefused, match=r"G2_EXCEEDS_BALANCE: .*balance 3,000.00 INR"):
        operated.approve(held.sik, reason="checked")
    assert operated.engine.intent(held.sik).state is State.HELD  # type: ignore[union-attr]


def test_an_approval_when_the_rail_cannot_be_read_releases_nothing(
    operated: Operated, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, sik = operated.held()
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    blind = ops_context_for(operated.engine, monkeypatch, INTERLOCK_RAIL_URL=f"http://127.0.0.1:{port}")
    with pytest.raises(OperatorRefused, match="could not re-read the payment .* on the rail to re-run G2"):
        operated.approve(sik, reason="checked", ops=blind)
    assert operated.engine.intent(sik).state is State.HELD  # type: ignore[union-attr]


def test_a_release_counts_what_was_applied_after_its_ledger_mark_however_it_was_stamped(
    ledger: sqlite3.Connection,
) -> None:
    """Finding F9 at a hold's release: the release marks the ledger's applied order before it reads the rail, and
    counts every intent applied after the mark — a refund the rail answered while the approver's read was on its
    way may be missing from that read, whatever clock stamped it."""
    from ledger.queries import applied_mark
    from rails.models import Payment
    from tests.ledger.helpers import put_intent

    def payment(refunded: int) -> Payment:
        return Payment(id="pay_T0001", amount=500_000, currency="INR", status="captured", amount_refunded=refunded)

    held = put_intent(ledger, "H" * 32, "HELD", amount=300_000)
    before = applied_mark(ledger)
    put_intent(ledger, "A" * 32, "APPLIED", amount=250_000, now=-3_600_000)  # stamped an hour back
    after = applied_mark(ledger)
    merchants = (held.merchant_id,)

    def problem(refunded: int, mark: int | None) -> str | None:
        return holds._value_problem(ledger, held, holds._RailView(payment=payment(refunded), applied_mark=mark),
                                    merchants)  # fmt: skip

    # Marked before it, read without it: 5,000.00 - 2,500.00 applied since = 2,500.00 left, not 3,000.00.
    assert problem(0, None) is None  # what an unmarked release would have done
    refused = problem(0, before)
    assert refused is not None and refused.startswith("G2_EXCEEDS_REFUNDABLE")
    # Marked after it: the read shows what was refunded, which is not counted again (3,000.00 left fits 3,000.00).
    assert problem(200_000, after) is None
    assert problem(200_000, before) is not None
