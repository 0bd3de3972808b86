"""A queued payout whose mandate is withdrawn is cancelled on the rail (reconciler/withdrawal.py; issue 28 item 4):
the reasons, the record of each cancellation, and what happens when the rail will not or cannot cancel."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from interlock.mandate import Mandate, MandateStore
from ledger import lifecycle
from ledger.db import transaction
from ledger.queries import PAYOUT_TOOL
from rails.models import Payout
from rails.razorpay import RailError, RailErrorKind
from reconciler.withdrawal import GRANT_WITHDRAWN, MANDATE_EXPIRED, MANDATE_REPLACED, PayoutWithdrawal, withdrawn
from tests.ledger.helpers import put_intent
from tests.mandates import AGENT, MERCHANT, make_mandate

SIK = "W" * 32
POUT = "pout_W1"
PAYEE = "fa_W0000000000001"
NOW = 1_800_000_000_000


def payout_mandate(**changes: Any) -> Mandate:
    return make_mandate({
        "scope.grants.create_payout": {"reversibility": "irreversible", "payees": {"fund_account_ids": [PAYEE]},
                                       "queue_if_low_balance": True,
                                       "value": {"min_amount_minor": 100, "max_amount_minor": 10**6,
                                                 "currencies": ["INR"]}},
        "idempotency.create_payout": {"window_ms": 86_400_000}, "rail.account_number": "7878780080316316",
        "expires_at": 4_102_444_800_000, **changes,
    })  # fmt: skip


class Canceller:
    def __init__(self, error: RailError | None = None) -> None:
        self.calls: list[str] = []
        self.error = error

    def cancel_payout(self, payout_id: str) -> Payout:
        self.calls.append(payout_id)
        if self.error is not None:
            raise self.error
        return Payout.from_raw({"id": payout_id, "entity": "payout", "fund_account_id": PAYEE, "amount": 40_000,
                                "currency": "INR", "status": "cancelled", "fees": 0, "tax": 0,
                                "notes": {"interlock_sik": SIK}})  # fmt: skip


def queued(conn: sqlite3.Connection, admitted_under: Mandate, status: str = "queued", *, sik: str = SIK,
           entity_id: str = POUT) -> None:  # fmt: skip
    """A payout intent APPLIED under *admitted_under*, its payout waiting on the rail in *status*."""
    put_intent(conn, sik, "APPLIED", amount=40_000, tool=PAYOUT_TOOL, subject=PAYEE, now=NOW - 1000)
    with transaction(conn):
        conn.execute("UPDATE intents SET mandate_hash = ? WHERE sik = ?", (admitted_under.mandate_hash, sik))
        lifecycle.observe(conn, merchant_id=MERCHANT, sik=sik, tool=PAYOUT_TOOL, entity_id=entity_id, status=status,
                          entity={"amount": 40_000, "fees": 0, "tax": 0}, source=lifecycle.ANSWER, ref=None,
                          now=NOW - 1000, next_poll_at=NOW, actor="test")  # fmt: skip


def withdrawal(conn: sqlite3.Connection, mandate: Mandate | None, rail: Canceller) -> PayoutWithdrawal:
    store = MandateStore({AGENT: mandate} if mandate is not None else {})
    return PayoutWithdrawal(ledger=conn, rail=rail, mandates=store, owner="reconciler-test", clock=lambda: NOW)


def audited(conn: sqlite3.Connection, kind: str) -> list[dict[str, Any]]:
    return [json.loads(r[0]) for r in conn.execute("SELECT payload_json FROM audit_log WHERE kind = ?", (kind,))]


def test_why_a_mandate_no_longer_lets_a_payout_go() -> None:
    mandate = payout_mandate()
    assert withdrawn(mandate, mandate.mandate_hash, NOW) is None
    assert withdrawn(mandate, "another version", NOW) == MANDATE_REPLACED
    assert withdrawn(None, mandate.mandate_hash, NOW) == GRANT_WITHDRAWN
    without = make_mandate(drop=("scope.grants.create_payout",))
    assert withdrawn(without, mandate.mandate_hash, NOW) == GRANT_WITHDRAWN  # no create_payout grant
    expired = payout_mandate(expires_at=NOW)
    assert withdrawn(expired, expired.mandate_hash, NOW) == MANDATE_EXPIRED


def test_a_payout_under_the_mandate_in_force_is_left_alone(ledger: sqlite3.Connection) -> None:
    mandate, rail = payout_mandate(), Canceller()
    queued(ledger, mandate)
    assert withdrawal(ledger, mandate, rail).step() == 0 and rail.calls == []


def test_a_replaced_mandate_cancels_its_queued_payout_and_records_it(ledger: sqlite3.Connection) -> None:
    rail = Canceller()
    queued(ledger, payout_mandate())
    step = withdrawal(ledger, payout_mandate(purpose="a narrower purpose"), rail)
    assert step.step() == 1 and rail.calls == [POUT]
    status = lifecycle.current(ledger, MERCHANT, SIK)
    assert status is not None and (status.status, status.final, status.attention) == ("cancelled", True,
                                                                                     "PAYOUT_NOT_PAID")  # fmt: skip
    [record] = audited(ledger, "PAYOUT_CANCELLED")
    assert (record["rail_entity_id"], record["reason"]) == (POUT, MANDATE_REPLACED)
    assert step.step() == 0 and rail.calls == [POUT]  # cancelled: nothing queued is left


def test_a_payout_that_is_no_longer_queued_is_not_cancelled(ledger: sqlite3.Connection) -> None:
    rail = Canceller()
    queued(ledger, payout_mandate(), status="processing")
    assert withdrawal(ledger, None, rail).step() == 0 and rail.calls == []


def test_a_withdrawn_payout_pending_approval_or_scheduled_is_reported_once_not_sent_a_cancel(
    ledger: sqlite3.Connection,
) -> None:
    """RazorpayX cancels queued payouts only (SPEC §18): one waiting for approval or scheduled is for a person."""
    rail = Canceller()
    queued(ledger, payout_mandate(), status="pending")
    queued(ledger, payout_mandate(), status="scheduled", sik="X" * 32, entity_id="pout_X1")
    step = withdrawal(ledger, None, rail)
    assert step.step() == 0 and rail.calls == []
    records = audited(ledger, "PAYOUT_NOT_CANCELLED")
    assert [(r["rail_entity_id"], r["reason"], r["refused"]) for r in records] == [
        (POUT, GRANT_WITHDRAWN, True), ("pout_X1", GRANT_WITHDRAWN, True)]  # fmt: skip
    assert "reject it in the approval workflow" in records[0]["error"] and "dashboard" in records[1]["error"]
    assert step.step() == 0 and len(audited(ledger, "PAYOUT_NOT_CANCELLED")) == 2  # said once


def test_a_refusal_is_recorded_once_and_an_outage_is_tried_again_later(ledger: sqlite3.Connection) -> None:
    queued(ledger, payout_mandate())
    refused = Canceller(RailError(RailErrorKind.REJECTED, "Only queued payouts can be cancelled", method="POST",
                                  path="/v1/payouts/{id}/cancel", http_status=400))  # fmt: skip
    step = withdrawal(ledger, None, refused)
    assert step.step() == 0 and step.step() == 0 and refused.calls == [POUT]
    [record] = audited(ledger, "PAYOUT_NOT_CANCELLED")
    assert (record["reason"], record["refused"]) == (GRANT_WITHDRAWN, True)
    status = lifecycle.current(ledger, MERCHANT, SIK)
    assert status is not None and status.next_poll_at == NOW  # its lifecycle is read again soon

    down = Canceller(RailError(RailErrorKind.NOT_SENT, "connection refused", method="POST", path="/v1/payouts"))
    clock = [NOW]
    later = PayoutWithdrawal(ledger=ledger, rail=down, mandates=MandateStore({}), owner="t", clock=lambda: clock[0])
    assert later.step() == 0 and later.step() == 0 and down.calls == [POUT]
    clock[0] += 60_000
    assert later.step() == 0 and down.calls == [POUT, POUT]
    assert [r["refused"] for r in audited(ledger, "PAYOUT_NOT_CANCELLED")] == [True, False, False]


def test_many_payouts_queued_under_the_mandate_in_force_never_hide_a_withdrawn_one(ledger: sqlite3.Connection) -> None:
    """Found by review: a LIMIT without an order let 50 legitimate queued payouts starve the withdrawn 51st."""
    in_force, rail = payout_mandate(), Canceller()
    for n in range(120):
        queued(ledger, in_force, sik=f"A{n:031d}", entity_id=f"pout_A{n}")
    queued(ledger, payout_mandate(purpose="an earlier version"), sik="Z" * 32, entity_id="pout_Z")
    assert withdrawal(ledger, in_force, rail).step() == 1 and rail.calls == ["pout_Z"]


def test_a_rate_limited_cancel_is_tried_again_not_given_up(ledger: sqlite3.Connection) -> None:
    queued(ledger, payout_mandate())
    limited = Canceller(RailError(RailErrorKind.REJECTED, "Too many requests", method="POST",
                                  path="/v1/payouts/{id}/cancel", http_status=429))  # fmt: skip
    clock = [NOW]
    step = PayoutWithdrawal(ledger=ledger, rail=limited, mandates=MandateStore({}), owner="t", clock=lambda: clock[0])
    assert step.step() == 0 and limited.calls == [POUT]
    clock[0] += 60_000
    limited.error = None
    assert step.step() == 1 and limited.calls == [POUT, POUT]


def test_a_withdrawn_payout_approved_into_the_queue_is_then_cancelled(ledger: sqlite3.Connection) -> None:
    """Found by the simulator (seed 118 of {crowd, ambiguous_retries}): a payout reported once while `pending`
    approval was remembered as refused, so when a person approved it and it waited `queued` for a top-up, it was
    never cancelled."""
    rail = Canceller()
    queued(ledger, payout_mandate(), status="pending")
    step = withdrawal(ledger, None, rail)
    assert step.step() == 0 and rail.calls == []
    with transaction(ledger):
        lifecycle.observe(ledger, merchant_id=MERCHANT, sik=SIK, tool=PAYOUT_TOOL, entity_id=POUT, status="queued",
                          entity={"amount": 40_000, "fees": 0, "tax": 0}, source=lifecycle.WEBHOOK, ref=None,
                          now=NOW, next_poll_at=NOW, actor="test")  # fmt: skip
    assert step.step() == 1 and rail.calls == [POUT]
    [record] = audited(ledger, "PAYOUT_CANCELLED")
    assert (record["rail_entity_id"], record["reason"]) == (POUT, GRANT_WITHDRAWN)
