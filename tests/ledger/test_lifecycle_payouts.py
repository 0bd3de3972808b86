"""A RazorpayX payout's lifecycle after APPLIED (ledger/lifecycle.py; SPEC §18): its webhooks arrive in no promised
order, so nothing is taken after `processed` or `reversed` but the bank's reversal of a processed payout; one payout
seen twice in a status is one observation; a payout the payee did not get is raised for a person."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from interlock.errors import OperatorRefused
from ledger import lifecycle
from ledger.db import open_ledger, transaction
from ledger.queries import PAYOUT_TOOL
from ledger.states import State
from tests.ledger.helpers import put_intent

M = "acc_DEMO000001"
SIK = "P" * 32
POUT = "pout_P1"
FEES, TAX = 590, 90


@pytest.fixture
def ledger(tmp_path: Path) -> sqlite3.Connection:
    conn = open_ledger(tmp_path / "ledger.sqlite3")
    put_intent(conn, SIK, "APPLIED", amount=48_000, tool=PAYOUT_TOOL, subject="fa_P0000000001")
    return conn


def see(conn: sqlite3.Connection, status: str, *, entity_id: str = POUT, ref: str | None = None,
        now: int = 100) -> lifecycle.RailStatus | None:  # fmt: skip
    entity = {"id": entity_id, "entity": "payout", "status": status, "amount": 48_000, "fees": FEES, "tax": TAX,
              "currency": "INR", "utr": "UTR1", "fund_account_id": "fa_P0000000001"}  # fmt: skip
    with transaction(conn):
        return lifecycle.observe(conn, merchant_id=M, sik=SIK, tool=PAYOUT_TOOL, entity_id=entity_id, status=status,
                                 entity=entity, source=lifecycle.WEBHOOK, ref=ref, now=now, next_poll_at=now + 10,
                                 actor="test")  # fmt: skip


def taken(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    return [(h["status"], h["taken"]) for h in lifecycle.history(conn, M, SIK)]


def test_payouts_are_followed_and_their_final_statuses_are_razorpayx_s() -> None:
    assert lifecycle.follows(PAYOUT_TOOL)
    final = {s for s in ("pending", "queued", "scheduled", "processing", "processed", "reversed", "cancelled",
                         "rejected", "failed") if lifecycle.is_final(PAYOUT_TOOL, s)}  # fmt: skip
    assert final == {"processed", "reversed", "cancelled", "rejected", "failed"}
    assert not lifecycle.is_final(PAYOUT_TOOL, "initiated"), "payout.initiated's entity says processing"


def test_a_payout_keeps_its_amount_fees_and_tax() -> None:
    entity = {"amount": 48_000, "fees": FEES, "tax": TAX, "utr": "UTR1", "amount_reversed": 7}
    assert lifecycle.amounts_of(PAYOUT_TOOL, entity) == {"amount": 48_000, "fees": FEES, "tax": TAX}


# (the statuses as they arrive) -> (the status kept, its attention, each observation as taken)
ORDERS = [
    (["pending", "queued", "processing", "processed"], "processed", None,
     ["moved", "moved", "moved", "moved"]),
    (["processed", "processing"], "processed", None, ["moved", "stale"]),
    (["processed", "queued", "pending"], "processed", None, ["moved", "stale", "stale"]),
    (["processing", "queued"], "processing", None, ["moved", "stale"]),
    (["processing", "processed", "reversed"], "reversed", lifecycle.PAYOUT_REVERSED, ["moved", "moved", "moved"]),
    (["processing", "reversed"], "reversed", lifecycle.PAYOUT_REVERSED, ["moved", "moved"]),
    (["reversed", "processed", "processing"], "reversed", lifecycle.PAYOUT_REVERSED, ["moved", "stale", "stale"]),
    (["processing", "failed"], "failed", lifecycle.PAYOUT_FAILED, ["moved", "moved"]),
    (["processed", "failed"], "processed", lifecycle.CONFLICTING_FINAL, ["moved", "conflict"]),
    (["failed", "processed"], "failed", lifecycle.CONFLICTING_FINAL, ["moved", "conflict"]),
    (["failed", "reversed"], "failed", lifecycle.CONFLICTING_FINAL, ["moved", "conflict"]),
    (["reversed", "failed"], "reversed", lifecycle.CONFLICTING_FINAL, ["moved", "conflict"]),
    (["processed", "cancelled"], "processed", lifecycle.CONFLICTING_FINAL, ["moved", "conflict"]),
    (["queued", "cancelled"], "cancelled", lifecycle.PAYOUT_NOT_PAID, ["moved", "moved"]),
    (["pending", "rejected"], "rejected", lifecycle.PAYOUT_NOT_PAID, ["moved", "moved"]),
    (["scheduled", "processing", "processed"], "processed", None, ["moved", "moved", "moved"]),
]  # fmt: skip


@pytest.mark.parametrize(("arrivals", "kept", "attention", "judged"), ORDERS,
                         ids=["-".join(order[0]) for order in ORDERS])  # fmt: skip
def test_payout_webhooks_in_any_order(ledger, arrivals, kept, attention, judged) -> None:
    for n, status in enumerate(arrivals):
        see(ledger, status, ref=f"evt_{n}", now=100 + n)
    row = lifecycle.current(ledger, M, SIK)
    assert row is not None and (row.status, row.attention) == (kept, attention)
    assert row.final == lifecycle.is_final(PAYOUT_TOOL, kept)
    assert taken(ledger) == list(zip(arrivals, judged, strict=True))
    state = ledger.execute("SELECT state FROM intents WHERE sik = ?", (SIK,)).fetchone()[0]
    assert state == State.APPLIED.value, "the lifecycle is not a state of the money machine (I4)"


def test_a_processed_payout_reversed_by_the_bank_is_taken_raised_and_not_fetched_again(ledger) -> None:
    """Processed is final, but the bank may still reverse it: the poller keeps fetching it (webhooks first, polls
    as the safety net, WATCHED_FOR_MS); once reversed, nothing follows and it is not fetched again."""
    done = see(ledger, "processed", ref="evt_p", now=100)
    assert done is not None and (done.final, done.next_poll_at, done.attention) == (True, 110, None)
    assert [r.sik for r in lifecycle.due(ledger, 110)] == [SIK]
    back = see(ledger, "reversed", ref="evt_r", now=200)
    assert back is not None and (back.status, back.final, back.attention) == ("reversed", True,
                                                                              lifecycle.PAYOUT_REVERSED)  # fmt: skip
    assert (back.next_poll_at, back.updated_at, back.amounts) == (None, 200, {"amount": 48_000, "fees": FEES,
                                                                              "tax": TAX})  # fmt: skip
    assert [r.sik for r in lifecycle.needs_attention(ledger)] == [SIK]
    assert lifecycle.due(ledger, 10**9) == []


def test_one_payout_in_one_status_is_one_observation_whatever_brings_it(ledger) -> None:
    # SPEC §18: deduplicate on payout id + status (payout.initiated and a poll both say processing).
    see(ledger, "processing", ref="evt_i")
    assert see(ledger, "processing", ref="evt_i2", now=150) is None
    see(ledger, "processed", ref="evt_p", now=200)
    assert see(ledger, "processed", ref="evt_p2", now=300) is None
    assert taken(ledger) == [("processing", "moved"), ("processed", "moved")]
    other = see(ledger, "processed", entity_id="pout_OTHER", ref="evt_x", now=400)
    assert other is not None and (other.entity_id, other.attention) == (POUT, lifecycle.SECOND_ENTITY), \
        "another payout id in the same status is another payout"  # fmt: skip


def test_a_payout_attention_is_acknowledged_by_name_and_a_later_one_waits_again(ledger) -> None:
    see(ledger, "failed", ref="evt_f")
    with transaction(ledger):
        with pytest.raises(OperatorRefused, match="its attention is PAYOUT_FAILED, not PAYOUT_REVERSED"):
            lifecycle.acknowledge(ledger, merchant_id=M, sik=SIK, attention=lifecycle.PAYOUT_REVERSED, operator="asha",
                                  note="x", credential=None, now=150)  # fmt: skip
    with transaction(ledger):
        lifecycle.acknowledge(ledger, merchant_id=M, sik=SIK, attention=lifecycle.PAYOUT_FAILED, operator="asha",
                              note="vendor told; paid by NEFT, ticket T-31", credential=None, now=160)  # fmt: skip
    assert lifecycle.needs_attention(ledger) == []
    assert dict(lifecycle.attention_counts(ledger, acknowledged=True)) == {lifecycle.PAYOUT_FAILED: 1}
    see(ledger, "processed", ref="evt_late", now=200)  # the bank's word contradicts itself after the acknowledgement
    [waiting] = lifecycle.needs_attention(ledger)
    assert (waiting.status, waiting.attention) == ("failed", lifecycle.CONFLICTING_FINAL)


def test_a_processed_payout_is_watched_for_its_reversal_only_for_a_while(ledger) -> None:
    """A processed payout is fetched again until WATCHED_FOR_MS after it was processed; a fetch planned past that is
    not planned at all."""
    see(ledger, "processed", ref="evt_p", now=100)
    with transaction(ledger):
        lifecycle.schedule(ledger, M, SIK, next_poll_at=100 + lifecycle.WATCHED_FOR_MS, polled=True)
    assert lifecycle.current(ledger, M, SIK).next_poll_at == 100 + lifecycle.WATCHED_FOR_MS  # type: ignore[union-attr]
    with transaction(ledger):
        lifecycle.schedule(ledger, M, SIK, next_poll_at=101 + lifecycle.WATCHED_FOR_MS, polled=True)
    assert lifecycle.current(ledger, M, SIK).next_poll_at is None  # type: ignore[union-attr]
    assert lifecycle.due(ledger, 10**15) == []
