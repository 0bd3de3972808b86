"""Following applied money to its final status (reconciler/lifecycle.py): from the call's own answer, by webhook,
by a poll with a backoff, and by the backfill when the webhook stream falls silent. A unit test: the rail is a
dict of entities (the real stack's follower is exercised in tests/engine/test_lifecycle_stack.py)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from ledger import intents, lifecycle, webhook_inbox
from ledger.db import transaction
from ledger.states import Event
from rails.models import Refund, Settlement
from rails.razorpay import RailError, RailErrorKind
from reconciler.inbox import InboxReader
from reconciler.lifecycle import WITH_WEBHOOKS_FIRST_POLL_MS, LifecycleFollower
from tests.ledger.helpers import put_intent
from tests.reconciler.recon_world import Clock

M = "acc_DEMO000001"
SIK = "F" * 32
RID = "rfnd_F1"


class Rail:
    def __init__(self) -> None:
        self.entities: dict[str, dict[str, Any]] = {}
        self.fetches: list[str] = []
        self.down = False

    def fetch_refund(self, refund_id: str) -> Refund:
        return Refund.from_raw(self._get(refund_id))

    def fetch_instant_settlement(self, settlement_id: str) -> Settlement:
        return Settlement.from_raw(self._get(settlement_id))

    def _get(self, entity_id: str) -> dict[str, Any]:
        self.fetches.append(entity_id)
        if self.down:
            raise RailError(RailErrorKind.AMBIGUOUS, "connect timeout", method="GET", path="/v1/refunds/{id}")
        return self.entities[entity_id]


def refund(status: str, *, sik: str = SIK, rid: str = RID) -> dict[str, Any]:
    return {"id": rid, "entity": "refund", "amount": 5000, "currency": "INR", "payment_id": "pay_T0001",
            "status": status, "notes": {"interlock_sik": sik}, "receipt": None}  # fmt: skip


def applied(conn: sqlite3.Connection, answer: dict[str, Any] | None, *, now: int, sik: str = SIK,
            rid: str = RID) -> None:  # fmt: skip
    """A refund APPLIED by its attempt's answer, stamped *now* by the actor that recorded it."""
    put_intent(conn, sik, "IN_FLIGHT", amount=5000, now=now)
    with transaction(conn):
        intents.finish_attempt(conn, M, sik, 1, now=now, outcome="APPLIED", rail_entity_id=rid, http_status=200,
                               response=answer)  # fmt: skip
        intents.transition(conn, M, sik, Event.RAIL_APPLIED, now=now, set_fields={"rail_entity_id": rid})


def follower(ledger: sqlite3.Connection, rail: Rail, clock: Clock, **kw: Any) -> LifecycleFollower:
    return LifecycleFollower(ledger=ledger, rail=rail, owner="reconciler-test", first_poll_ms=2000, clock=clock, **kw)


def reader_telling(f: LifecycleFollower, ledger: sqlite3.Connection, inbox: sqlite3.Connection,
                   clock: Clock) -> InboxReader:  # fmt: skip
    """The inbox reader, telling the follower of each sighting as the reconciler wires them."""
    return InboxReader(ledger=ledger, inbox=inbox, reader="shard:0", owner="reconciler-test", clock=clock,
                       on_sighting=lambda m, s, seen, ref: f.sighted(m, s, entity_id=seen.entity_id,
                                                                     status=seen.status, entity=seen.entity,
                                                                     ref=ref))  # fmt: skip


def test_the_answers_pending_is_followed_by_polls_until_processed(ledger, clock) -> None:
    rail = Rail()
    applied(ledger, refund("pending"), now=clock.ms)
    f = follower(ledger, rail, clock)
    assert f.step() == 1 and rail.fetches == [], "the answer's own status is the start: no fetch for it"
    row = lifecycle.current(ledger, M, SIK)
    assert row is not None and (row.status, row.source, row.next_poll_at) == ("pending", "answer", clock.ms + 2000)
    rail.entities[RID] = refund("pending")
    clock.ms += 2000
    assert f.step() == 0 and rail.fetches == [RID]
    row = lifecycle.current(ledger, M, SIK)
    assert row is not None and (row.polls, row.next_poll_at) == (1, clock.ms + 2000)
    clock.ms += 1999
    f.step()
    assert rail.fetches == [RID], "not before its backoff"
    rail.entities[RID] = refund("processed")
    clock.ms += 1
    assert f.step() == 1
    row = lifecycle.current(ledger, M, SIK)
    assert row is not None and (row.status, row.final, row.source, row.next_poll_at) == \
        ("processed", True, "poll", None)  # fmt: skip
    clock.ms += 10**8
    f.step()
    assert rail.fetches == [RID, RID], "a final entity is not fetched again"


def test_an_intent_applied_on_a_lists_word_is_fetched_at_once(ledger, clock) -> None:
    rail = Rail()
    rail.entities[RID] = refund("processed")
    applied(ledger, None, now=clock.ms)
    assert follower(ledger, rail, clock).step() == 1 and rail.fetches == [RID]
    row = lifecycle.current(ledger, M, SIK)
    assert row is not None and (row.status, row.source) == ("processed", "poll")


def test_a_refund_applied_after_another_but_stamped_earlier_is_followed(ledger, clock) -> None:
    """Every APPLIED intent of a followed tool is followed, whatever its updated_at: the actors that make intents
    APPLIED stamp them on their own clocks (the rail worker on its, the reconciler on its), so an intent committed
    after one already followed may carry an earlier stamp. It is found by what the ledger owes (a rail_status row,
    from the transaction that applied it), never by a high-water mark over other processes' clocks."""
    rail = Rail()
    a, b = "A" * 32, "B" * 32
    clock.ms += 5_000
    applied(ledger, refund("pending", sik=a, rid="rfnd_A"), now=clock.ms, sik=a, rid="rfnd_A")  # the reconciler's
    f = follower(ledger, rail, clock)
    assert f.step() == 1
    clock.ms += 500
    applied(ledger, refund("pending", sik=b, rid="rfnd_B"), now=clock.ms - 2_000, sik=b,
            rid="rfnd_B")  # committed after, by a rail worker whose clock reads 2 s behind  # fmt: skip
    rail.entities["rfnd_B"] = refund("failed", sik=b, rid="rfnd_B")
    rail.entities["rfnd_A"] = refund("pending", sik=a, rid="rfnd_A")
    assert f.step() == 1
    row = lifecycle.current(ledger, M, b)
    assert row is not None and (row.status, row.source) == ("pending", "answer"), "followed from its answer"
    clock.ms += 2_000
    f.step()
    row = lifecycle.current(ledger, M, b)
    assert row is not None and (row.status, row.attention) == ("failed", lifecycle.REFUND_FAILED)
    assert [r.sik for r in lifecycle.needs_attention(ledger)] == [b]


def test_intents_whose_first_fetch_keeps_failing_do_not_keep_later_ones_from_being_followed(
        ledger, clock, monkeypatch) -> None:  # fmt: skip
    """The intents not followed yet are read a page a step: a page of intents waiting to fetch again (the rail
    could not be read) does not hide the ones after it."""
    monkeypatch.setattr("reconciler.lifecycle.UNTRACKED_PER_STEP", 2)
    rail = Rail()
    rail.down = True
    for n in range(3):  # applied on a list's word: no answer to start from, so each is fetched
        applied(ledger, None, now=clock.ms, sik=f"{n}" * 32, rid=f"rfnd_{n}")
    f = follower(ledger, rail, clock)
    f.step()
    f.step()
    assert rail.fetches == ["rfnd_0", "rfnd_1", "rfnd_2"], "the third on the second step, the first two waiting"
    rail.down = False
    rail.entities.update({f"rfnd_{n}": refund("processed", sik=f"{n}" * 32, rid=f"rfnd_{n}") for n in range(3)})
    clock.ms += 5_000
    f.step()
    f.step()
    assert [lifecycle.current(ledger, M, f"{n}" * 32) is not None for n in range(3)] == [True, True, True]
    assert lifecycle.untracked(ledger) == []


def test_a_rail_that_cannot_be_read_is_asked_again_later_not_in_a_loop(ledger, clock) -> None:
    rail = Rail()
    rail.down = True
    applied(ledger, None, now=clock.ms)
    f = follower(ledger, rail, clock)
    f.step()
    f.step()
    assert rail.fetches == [RID] and f.counts["fetch_failed"] == 1
    rail.down, rail.entities[RID] = False, refund("failed")
    clock.ms += 5000
    assert f.step() == 1
    row = lifecycle.current(ledger, M, SIK)
    assert row is not None and row.attention == lifecycle.REFUND_FAILED
    assert f.counts["attention:REFUND_FAILED"] == 1


def test_a_webhook_moves_a_followed_refund_and_the_poll_waits_for_it(ledger, clock, tmp_path) -> None:
    rail = Rail()
    inbox = webhook_inbox.open_inbox(tmp_path / "webhooks.sqlite3")
    applied(ledger, refund("pending"), now=clock.ms)
    f = follower(ledger, rail, clock, webhooks=True)
    reader = reader_telling(f, ledger, inbox, clock)
    f.step()
    row = lifecycle.current(ledger, M, SIK)
    assert row is not None and row.next_poll_at == clock.ms + WITH_WEBHOOKS_FIRST_POLL_MS
    body = json.dumps({"entity": "event", "account_id": M, "event": "refund.processed", "contains": ["refund"],
                       "payload": {"refund": {"entity": refund("processed")}}, "created_at": 1}).encode()  # fmt: skip
    webhook_inbox.store(inbox, event_id="evt_p", body=body, event="refund.processed", account_id=M, created_at=1,
                        now=clock.ms)  # fmt: skip
    reader.read()
    row = lifecycle.current(ledger, M, SIK)
    assert row is not None and (row.status, row.source, row.final) == ("processed", "webhook", True)
    assert rail.fetches == []


def test_a_silent_webhook_stream_makes_every_entity_not_final_fetched(ledger, clock) -> None:
    rail = Rail()
    rail.entities[RID] = refund("pending")
    heard: list[int | None] = [clock.ms - 1]  # the last webhook arrived before this money call
    applied(ledger, refund("pending"), now=clock.ms)
    f = follower(ledger, rail, clock, webhooks=True, silence_ms=600_000, last_webhook_at=lambda: heard[0])
    f.step()
    with transaction(ledger):  # a backoff grown to hours, as for a refund pending for days
        lifecycle.schedule(ledger, M, SIK, next_poll_at=clock.ms + 36_000_000, polled=False)
    clock.ms += 599_999
    f.step()
    assert rail.fetches == [] and f.counts["backfills"] == 0
    clock.ms += 1
    f.step()
    assert rail.fetches == [RID] and f.counts["backfills"] == 1, "the backfill fetches before the backoff"


def test_a_webhook_after_the_money_call_means_the_stream_is_alive(ledger, clock) -> None:
    rail = Rail()
    rail.entities[RID] = refund("pending")
    heard: list[int | None] = [None]
    applied(ledger, refund("pending"), now=clock.ms)
    f = follower(ledger, rail, clock, webhooks=True, silence_ms=600_000, last_webhook_at=lambda: heard[0])
    f.step()
    heard[0] = clock.ms + 10
    clock.ms += 700_000
    f.step()
    assert f.counts["backfills"] == 0


def _razorpay_event(event: str, status: str) -> bytes:
    """A refund event as Razorpay sends it (SPEC §17): the refund and its payment, both in the payload."""
    payment = {"id": "pay_T0001", "entity": "payment", "amount": 189900, "currency": "INR", "status": "captured",
               "captured": True, "amount_refunded": 5000, "notes": {"order": "o_1"}}  # fmt: skip
    return json.dumps({"entity": "event", "account_id": M, "event": event, "contains": ["refund", "payment"],
                       "payload": {"refund": {"entity": refund(status)}, "payment": {"entity": payment}},
                       "created_at": 1}).encode()  # fmt: skip


def test_razorpay_s_refund_events_with_their_payment_move_the_refund_and_speed_changed_moves_nothing(
        ledger, clock, tmp_path) -> None:  # fmt: skip
    # SPEC §17: refund.created, refund.speed_changed, refund.processed, refund.failed; pending -> processed or failed.
    rail = Rail()
    inbox = webhook_inbox.open_inbox(tmp_path / "webhooks.sqlite3")
    applied(ledger, refund("pending"), now=clock.ms)
    f = follower(ledger, rail, clock, webhooks=True)
    reader = reader_telling(f, ledger, inbox, clock)
    f.step()
    for event_id, event, status in (("evt_c", "refund.created", "pending"), ("evt_s", "refund.speed_changed",
                                                                             "pending")):  # fmt: skip
        webhook_inbox.store(inbox, event_id=event_id, body=_razorpay_event(event, status), event=event,
                            account_id=M, created_at=1, now=clock.ms)  # fmt: skip
    reader.read()
    row = lifecycle.current(ledger, M, SIK)
    assert row is not None and (row.status, row.final, row.attention) == ("pending", False, None)
    assert [h["status"] for h in lifecycle.history(ledger, M, SIK)] == ["pending"], "the same status adds nothing"
    webhook_inbox.store(inbox, event_id="evt_p", body=_razorpay_event("refund.processed", "processed"),
                        event="refund.processed", account_id=M, created_at=1, now=clock.ms)  # fmt: skip
    reader.read()
    row = lifecycle.current(ledger, M, SIK)
    assert row is not None and (row.status, row.final, row.entity_id) == ("processed", True, RID)
    assert webhook_inbox.counts(inbox)["unprocessed"] == 0, "every event, the payment's included, was read"
    assert rail.fetches == []


def test_a_larger_reversal_of_an_acknowledged_settlement_is_logged_and_counted_again(ledger, clock, caplog) -> None:
    """An acknowledgement covers the observation it was given for: the follower raises a reversal that grows after
    it afresh — an ATTENTION line and a count, as for the first — and not a settlement settling more of the rest."""
    sik, sid = "S" * 32, "setlod_S1"

    def settlement(status: str, settled: int, reversed_: int, pending: int) -> dict[str, Any]:
        return {"id": sid, "entity": "settlement.ondemand", "amount_requested": 5_000_000, "amount_settled": settled,
                "amount_pending": pending, "amount_reversed": reversed_, "fees": 1000, "tax": 180, "currency": "INR",
                "status": status, "notes": {"interlock_sik": sik}}  # fmt: skip

    put_intent(ledger, sik, "IN_FLIGHT", amount=5_000_000, tool="create_instant_settlement", subject="balance",
               now=clock.ms)  # fmt: skip
    with transaction(ledger):
        intents.finish_attempt(ledger, M, sik, 1, now=clock.ms, outcome="APPLIED", rail_entity_id=sid,
                               http_status=200, response=settlement("initiated", 0, 0, 5_000_000))  # fmt: skip
        intents.transition(ledger, M, sik, Event.RAIL_APPLIED, now=clock.ms, set_fields={"rail_entity_id": sid})
    rail = Rail()
    f = follower(ledger, rail, clock)
    f.step()

    def fetched_as(entity: dict[str, Any]) -> None:
        rail.entities[sid] = entity
        clock.ms += 3_600_000
        f.step()

    with caplog.at_level("ERROR"):
        fetched_as(settlement("partially_processed", 2_000_000, 100_000, 2_900_000))
        assert f.counts["attention:SETTLEMENT_REVERSED"] == 1
        with transaction(ledger):
            lifecycle.acknowledge(ledger, merchant_id=M, sik=sik, attention=lifecycle.SETTLEMENT_REVERSED,
                                  operator="asha", note="Rs 1,000 came back; re-settled by hand", credential=None,
                                  now=clock.ms)  # fmt: skip
        fetched_as(settlement("partially_processed", 2_500_000, 100_000, 2_400_000))
        assert f.counts["attention:SETTLEMENT_REVERSED"] == 1 and lifecycle.needs_attention(ledger) == []
        fetched_as(settlement("reversed", 0, 4_900_000, 0))
    assert f.counts["attention:SETTLEMENT_REVERSED"] == 2
    assert [r.getMessage().split(":")[0] for r in caplog.records if "ATTENTION" in r.getMessage()] == \
        ["ATTENTION SETTLEMENT_REVERSED", "ATTENTION SETTLEMENT_REVERSED"]  # fmt: skip
    [waiting] = lifecycle.needs_attention(ledger)
    assert (waiting.status, waiting.amounts["amount_reversed"]) == ("reversed", 4_900_000)
