"""What G2 takes from the ledger beside a rail read (ledger/queries.py): the money it counts as in motion, and our
own payouts whose debit the ledger has not seen, which the payout read fetches by id (findings F11 and F12)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ledger import lifecycle
from ledger.db import open_ledger, transaction
from ledger.queries import (
    PAYOUT_TOOL,
    money_committed_for_subject,
    money_committed_for_tool,
    payouts_not_known_debited,
)
from tests.ledger.helpers import put_intent

M, OTHER = "acc_DEMO000001", "acc_OTHER00001"
UNDEBITED = ("scheduled", "pending", "queued")
FEE = 590


@pytest.fixture
def ledger(tmp_path: Path) -> sqlite3.Connection:
    return open_ledger(tmp_path / "ledger.sqlite3")


def _applied_payout(conn: sqlite3.Connection, tag: str, *, merchant_id: str = M,
                    seen: str | None = None) -> str:  # fmt: skip
    """An APPLIED payout of ours on the rail as pout_<tag>, and the status the lifecycle follower last read (None:
    it has not read one yet)."""
    sik, entity_id = tag * 32, f"pout_{tag}"
    put_intent(conn, sik, "APPLIED", amount=10_000, tool=PAYOUT_TOOL, subject=f"fa_{tag}", merchant_id=merchant_id)
    with transaction(conn):
        conn.execute("UPDATE intents SET rail_entity_id = ? WHERE merchant_id = ? AND sik = ?",
                     (entity_id, merchant_id, sik))  # fmt: skip
        if seen is not None:
            entity = {"id": entity_id, "entity": "payout", "status": seen, "amount": 10_000, "currency": "INR"}
            lifecycle.observe(conn, merchant_id=merchant_id, sik=sik, tool=PAYOUT_TOOL, entity_id=entity_id,
                              status=seen, entity=entity, source=lifecycle.POLL, ref=None, now=5, next_poll_at=15,
                              actor="test")  # fmt: skip
    return entity_id


def test_our_payouts_not_seen_debited_are_the_ones_a_payout_read_fetches(ledger: sqlite3.Connection) -> None:
    """Not yet followed, or last seen scheduled, pending or queued: the balance may not show them, a list may not
    either. Seen processing or after, it is in the balance (or back in it, or never left); a refund is no payout;
    another rail account's merchant is not this balance."""
    fetched = {_applied_payout(ledger, "A"), _applied_payout(ledger, "B", seen="pending"),
               _applied_payout(ledger, "C", seen="queued"), _applied_payout(ledger, "D", seen="scheduled")}  # fmt: skip
    for tag, status in (("E", "processing"), ("F", "processed"), ("G", "reversed"), ("H", "cancelled"),
                        ("I", "rejected")):  # fmt: skip
        _applied_payout(ledger, tag, seen=status)
    _applied_payout(ledger, "J", merchant_id=OTHER)
    put_intent(ledger, "R" * 32, "APPLIED", amount=500)  # a refund
    assert set(payouts_not_known_debited(ledger, M, undebited=UNDEBITED, limit=100)) == fetched
    assert set(payouts_not_known_debited(ledger, (M, OTHER), undebited=UNDEBITED, limit=100)) == fetched | {"pout_J"}
    # One more than the caller will fetch tells it the follower is behind; the query stops there.
    assert len(payouts_not_known_debited(ledger, M, undebited=UNDEBITED, limit=2)) == 2


def test_a_quarantined_payout_counts_as_money_in_motion_until_a_person_resolves_it(ledger: sqlite3.Connection) -> None:
    """F12: a payout found on the rail stamped on other terms after another payout's gate read the balance. The rail
    may have debited it (the read did not show that), and only a person can say: G2 counts it, with its fee, as it
    counts one whose answer was lost."""
    put_intent(ledger, "Q" * 32, "QUARANTINED", amount=139_698, tool=PAYOUT_TOOL, subject="fa_Q")
    put_intent(ledger, "U" * 32, "UNKNOWN", amount=1_000, tool=PAYOUT_TOOL, subject="fa_U")
    counted = money_committed_for_tool(ledger, M, PAYOUT_TOOL, exclude_sik="", currency="INR", per_call_minor=FEE)
    assert counted == 139_698 + FEE + 1_000 + FEE


def test_a_quarantined_refund_counts_against_its_payment(ledger: sqlite3.Connection) -> None:
    put_intent(ledger, "Q" * 32, "QUARANTINED", amount=7_000, subject="pay_T0001")
    put_intent(ledger, "B" * 32, "BLOCKED", amount=9_000, subject="pay_T0001")
    assert money_committed_for_subject(ledger, M, "pay_T0001", exclude_sik="") == 7_000
