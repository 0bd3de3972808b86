"""The webhook inbox as a second source of truth (ADR 0027): a stamped entity on the intent's terms settles it
APPLIED, other terms QUARANTINE it, and nothing an event says or does not say makes anything "not applied"."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from interlock.sik import receipt_for
from ledger import audit, intents, sightings, webhook_inbox
from ledger.db import open_ledger, transaction
from ledger.states import Event, State
from reconciler.inbox import InboxReader, stamped_entity
from tests.ledger.helpers import put_intent

M = "acc_DEMO000001"
SIK = "W" * 32
PAY = "pay_T0001"


def refund(*, sik: str = SIK, amount: int = 5000, payment: str = PAY, status: str = "processed",
           rid: str = "rfnd_W1", stamp: str = "notes") -> dict[str, Any]:  # fmt: skip
    entity: dict[str, Any] = {"id": rid, "entity": "refund", "amount": amount, "currency": "INR",
                              "payment_id": payment, "status": status, "notes": [], "receipt": None}  # fmt: skip
    if stamp == "notes":
        entity["notes"] = {"interlock_sik": sik}
    elif stamp == "receipt":
        entity["receipt"] = receipt_for(sik)
    return entity


def deliver(inbox: sqlite3.Connection, event_id: str, entity: dict[str, Any], *, event: str = "refund.processed",
            account: str | None = M, key: str = "refund") -> None:  # fmt: skip
    body = json.dumps({"entity": "event", "account_id": account, "event": event, "contains": [key],
                       "payload": {key: {"entity": entity}}, "created_at": 1_700_000_000}).encode()  # fmt: skip
    webhook_inbox.store(inbox, event_id=event_id, body=body, event=event, account_id=account,
                        created_at=1_700_000_000, now=10)  # fmt: skip


def reader(ledger: sqlite3.Connection, inbox: sqlite3.Connection, *, account: str | None = M,
           name: str = "shard:0") -> InboxReader:  # fmt: skip
    return InboxReader(ledger=ledger, inbox=inbox, reader=name, owner="reconciler-test",
                       account_of=lambda intent: account, clock=lambda: 50)  # fmt: skip


def events_of(ledger: sqlite3.Connection, sik: str = SIK) -> list[str]:
    return [json.loads(r[0])["event"] for r in ledger.execute(
        "SELECT payload_json FROM audit_log WHERE kind = 'TRANSITION' ORDER BY seq") if json.loads(r[0])["sik"] == sik]


def test_a_stamped_refund_on_the_intents_terms_settles_an_unknown_intent_applied(ledger, inbox) -> None:
    put_intent(ledger, SIK, "UNKNOWN", amount=5000)
    deliver(inbox, "evt_1", refund())
    assert reader(ledger, inbox).read() == 1
    intent = intents.require_intent(ledger, M, SIK)
    assert (intent.state, intent.rail_entity_id) == (State.APPLIED, "rfnd_W1")
    assert events_of(ledger)[-1] == "WEBHOOK_APPLIED"
    [seen] = sightings.for_intent(ledger, M, SIK)
    assert (seen.ref, seen.event, seen.status, seen.entity["amount"]) == ("evt_1", "refund.processed", "processed",
                                                                          5000)  # fmt: skip
    assert audit.verify_chain(ledger) is None
    kinds = [r[0] for r in ledger.execute("SELECT kind FROM audit_log ORDER BY seq")]
    assert kinds[-2:] == ["RAIL_SIGHTING", "TRANSITION"]
    assert webhook_inbox.counts(inbox)["unprocessed"] == 0


@pytest.mark.parametrize("state", ["RECONCILING", "CONFIRMED_NOT_APPLIED", "FAILED_TERMINAL"])
def test_presence_outvotes_an_earlier_absent_or_refused(ledger, inbox, state) -> None:
    put_intent(ledger, SIK, "UNKNOWN", amount=5000)
    if state == "RECONCILING":
        with transaction(ledger):
            intents.begin_reconcile(ledger, M, SIK, now=2, owner="r", lease_expires_at=10_000)
    elif state == "CONFIRMED_NOT_APPLIED":
        with transaction(ledger):
            intents.begin_reconcile(ledger, M, SIK, now=2, owner="r", lease_expires_at=10_000)
            intents.transition(ledger, M, SIK, Event.RECONCILE_CONFIRMED_ABSENT, now=3)
    else:
        put_intent(ledger, "F" * 32, "FAILED_TERMINAL", amount=5000)
    sik = "F" * 32 if state == "FAILED_TERMINAL" else SIK
    deliver(inbox, "evt_1", refund(sik=sik, stamp="receipt"))
    assert reader(ledger, inbox).read() == 1
    assert intents.require_intent(ledger, M, sik).state is State.APPLIED


def test_a_webhook_seen_while_the_attempt_is_out_settles_it_once_the_answer_is_lost(ledger, inbox) -> None:
    put_intent(ledger, SIK, "IN_FLIGHT", amount=5000)
    deliver(inbox, "evt_1", refund())
    r = reader(ledger, inbox)
    assert r.read() == 0
    assert intents.require_intent(ledger, M, SIK).state is State.IN_FLIGHT, "the attempt's own answer is pending"
    assert r.read() == 0
    with transaction(ledger):
        intents.transition(ledger, M, SIK, Event.RAIL_AMBIGUOUS, now=20)
    assert r.read() == 1
    assert intents.require_intent(ledger, M, SIK).state is State.APPLIED


def test_a_restarted_reader_still_settles_what_it_saw_before(ledger, inbox) -> None:
    put_intent(ledger, SIK, "IN_FLIGHT", amount=5000)
    deliver(inbox, "evt_1", refund())
    assert reader(ledger, inbox).read() == 0  # kept as a sighting; this reader's memory is then lost
    with transaction(ledger):
        intents.transition(ledger, M, SIK, Event.RAIL_AMBIGUOUS, now=20)
    assert reader(ledger, inbox).read() == 1
    assert intents.require_intent(ledger, M, SIK).state is State.APPLIED


def test_a_retry_authorized_on_a_lagging_list_is_settled_before_it_is_sent(ledger) -> None:
    put_intent(ledger, SIK, "IN_FLIGHT", amount=5000)
    with transaction(ledger):
        sightings.record(ledger, merchant_id=M, sik=SIK, source="webhook", ref="evt_1", event="refund.created",
                         entity_id="rfnd_W1", status="pending", entity=refund(status="pending"), now=5)  # fmt: skip
        intents.transition(ledger, M, SIK, Event.RAIL_AMBIGUOUS, now=6)
        intents.begin_reconcile(ledger, M, SIK, now=7, owner="r", lease_expires_at=10_000)
        intents.transition(ledger, M, SIK, Event.RECONCILE_CONFIRMED_ABSENT, now=8)
        from interlock.verdicts import allow

        intents.transition(ledger, M, SIK, Event.RETRY_AUTHORIZED, now=9, reasserted=allow("TEST"))
        assert intents.require_intent(ledger, M, SIK).state is State.AUTHORIZED
        # What the rail worker asks before it sends (rail_worker/execute._begin).
        settled = intents.settle_from_evidence(ledger, M, SIK, now=10, actor="rail-worker")
    assert settled is not None and settled.state is State.APPLIED


def test_no_sighting_counts_before_a_first_attempt(ledger) -> None:
    put_intent(ledger, SIK, "AUTHORIZED", amount=5000)
    with transaction(ledger):
        sightings.record(ledger, merchant_id=M, sik=SIK, source="webhook", ref="evt_1", event="refund.created",
                         entity_id="rfnd_W1", status="pending", entity=refund(), now=5)  # fmt: skip
        assert intents.settle_from_evidence(ledger, M, SIK, now=6, actor="rail-worker") is None
    assert intents.require_intent(ledger, M, SIK).state is State.AUTHORIZED


@pytest.mark.parametrize("change", [{"amount": 4999}, {"payment": "pay_OTHER"}])
def test_a_stamped_entity_on_other_terms_is_quarantined_not_applied(ledger, inbox, change) -> None:
    put_intent(ledger, SIK, "UNKNOWN", amount=5000)
    deliver(inbox, "evt_1", refund(**change))
    assert reader(ledger, inbox).read() == 1
    intent = intents.require_intent(ledger, M, SIK)
    assert (intent.state, intent.reason_code) == (State.QUARANTINED, "RAIL_TERMS_MISMATCH")


def test_an_event_naming_another_account_is_not_evidence(ledger, inbox) -> None:
    put_intent(ledger, SIK, "UNKNOWN", amount=5000)
    deliver(inbox, "evt_1", refund(), account="acc_SOMEONEELSE")
    deliver(inbox, "evt_2", refund(), account=None)
    r = reader(ledger, inbox)
    assert r.read() == 0
    assert intents.require_intent(ledger, M, SIK).state is State.UNKNOWN
    assert sightings.for_intent(ledger, M, SIK) == []
    assert r.counts["other_account"] == 2


def test_without_a_configured_account_the_account_is_not_checked(ledger, inbox) -> None:
    put_intent(ledger, SIK, "UNKNOWN", amount=5000)
    deliver(inbox, "evt_1", refund(), account="acc_WHATEVER")
    assert reader(ledger, inbox, account=None).read() == 1
    assert intents.require_intent(ledger, M, SIK).state is State.APPLIED


def test_a_refund_stamp_on_a_settlement_intent_is_not_evidence(ledger, inbox) -> None:
    put_intent(ledger, SIK, "UNKNOWN", amount=5000, tool="create_instant_settlement", subject="balance")
    deliver(inbox, "evt_1", refund())
    r = reader(ledger, inbox)
    assert r.read() == 0
    assert intents.require_intent(ledger, M, SIK).state is State.UNKNOWN
    assert r.counts["other_tool"] == 1


def test_a_stamped_instant_settlement_settles_its_intent(ledger, inbox) -> None:
    put_intent(ledger, SIK, "UNKNOWN", amount=70_000, tool="create_instant_settlement", subject="balance")
    entity = {"id": "setlod_W1", "entity": "settlement.ondemand", "amount_requested": 70_000, "amount_settled": 0,
              "amount_pending": 70_000, "amount_reversed": 0, "fees": 0, "tax": 0, "currency": "INR",
              "status": "initiated", "notes": {"interlock_sik": SIK}}  # fmt: skip
    deliver(inbox, "evt_1", entity, event="settlement.ondemand.initiated", key="settlement.ondemand")
    assert reader(ledger, inbox).read() == 1
    assert intents.require_intent(ledger, M, SIK).state is State.APPLIED


def test_the_same_refund_delivered_under_two_event_ids_is_one_refund(ledger, inbox) -> None:
    put_intent(ledger, SIK, "UNKNOWN", amount=5000)
    deliver(inbox, "evt_1", refund(status="pending"), event="refund.created")
    deliver(inbox, "evt_2", refund())
    deliver(inbox, "evt_2", refund())  # a redelivery: the inbox counts it, the reader sees one event
    assert reader(ledger, inbox).read() == 1
    assert events_of(ledger).count("WEBHOOK_APPLIED") == 1
    assert [s.ref for s in sightings.for_intent(ledger, M, SIK)] == ["evt_1", "evt_2"]


def test_events_for_no_intent_here_are_left_for_the_shard_that_holds_them(ledger, inbox, tmp_path) -> None:
    deliver(inbox, "evt_other", refund(sik="O" * 32))
    deliver(inbox, "evt_plain", refund(stamp="none"))
    assert reader(ledger, inbox).read() == 0
    processed = dict(inbox.execute("SELECT event_id, processed_at IS NOT NULL FROM webhook_events"))
    assert processed == {"evt_other": 0, "evt_plain": 1}, "an unstamped entity is no one's; a stamped one is a shard's"
    other = open_ledger(tmp_path / "shard-1.sqlite3")
    put_intent(other, "O" * 32, "UNKNOWN", amount=5000)
    assert reader(other, inbox, name="shard:1").read() == 1
    assert intents.require_intent(other, M, "O" * 32).state is State.APPLIED
    assert webhook_inbox.counts(inbox)["unprocessed"] == 0


def test_a_read_resumes_after_its_cursor(ledger, inbox) -> None:
    put_intent(ledger, SIK, "UNKNOWN", amount=5000)
    r = reader(ledger, inbox)
    assert r.read() == 0
    deliver(inbox, "evt_1", refund())
    assert r.read() == 1
    assert webhook_inbox.unread(inbox, "shard:0") == []


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"payload": []}', b'{"payload": {"refund": {"entity": 7}}}',
                                  b'{"payload": {"refund": {"entity": {"entity": "refund", "id": "rfnd_1"}}}}'])
def test_bodies_that_carry_no_stamped_entity_are_not_evidence(body) -> None:
    assert stamped_entity(body) is None


def test_an_applied_intent_is_not_changed_by_any_later_event(ledger, inbox) -> None:
    put_intent(ledger, SIK, "APPLIED", amount=5000)
    deliver(inbox, "evt_1", refund(amount=1, status="failed"), event="refund.failed")
    assert reader(ledger, inbox).read() == 0
    assert intents.require_intent(ledger, M, SIK).state is State.APPLIED


def test_an_entity_with_a_float_amount_is_judged_not_a_crash(ledger, inbox) -> None:
    put_intent(ledger, SIK, "UNKNOWN", amount=5000)
    deliver(inbox, "evt_1", refund(amount=5000.0))  # type: ignore[arg-type]
    assert reader(ledger, inbox).read() == 1
    intent = intents.require_intent(ledger, M, SIK)
    assert (intent.state, intent.reason_code) == (State.QUARANTINED, "RAIL_TERMS_MISMATCH"), "a float is no amount"


def test_an_event_the_reader_cannot_handle_does_not_stop_the_ones_after_it(ledger, inbox, monkeypatch) -> None:
    put_intent(ledger, SIK, "UNKNOWN", amount=5000)
    put_intent(ledger, "V" * 32, "UNKNOWN", amount=5000)
    deliver(inbox, "evt_bad", refund(sik="V" * 32))
    deliver(inbox, "evt_good", refund())
    real = intents.settle_from_evidence

    def broken_for_one(conn, merchant_id, sik, **kw):
        if sik == "V" * 32:
            raise RuntimeError("a defect in the reader")
        return real(conn, merchant_id, sik, **kw)

    monkeypatch.setattr(intents, "settle_from_evidence", broken_for_one)
    r = reader(ledger, inbox)
    assert r.read() == 1 and r.counts["failed"] == 1
    assert intents.require_intent(ledger, M, SIK).state is State.APPLIED
    assert intents.require_intent(ledger, M, "V" * 32).state is State.UNKNOWN
    assert sightings.for_intent(ledger, M, "V" * 32) == [], "its transaction rolled back whole"
    processed = dict(inbox.execute("SELECT event_id, processed_at IS NOT NULL FROM webhook_events"))
    assert processed == {"evt_bad": 0, "evt_good": 1}
    assert webhook_inbox.unread(inbox, "shard:0") == [], "the cursor moved past both"


def test_a_storage_failure_leaves_the_event_to_be_read_again(ledger, inbox, monkeypatch) -> None:
    put_intent(ledger, SIK, "UNKNOWN", amount=5000)
    deliver(inbox, "evt_1", refund())
    real = sightings.record

    def busy(*args, **kwargs):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(sightings, "record", busy)
    r = reader(ledger, inbox)
    with pytest.raises(sqlite3.OperationalError):
        r.read()
    assert [d.event_id for d in webhook_inbox.unread(inbox, "shard:0")] == ["evt_1"]
    monkeypatch.setattr(sightings, "record", real)
    assert r.read() == 1
    assert intents.require_intent(ledger, M, SIK).state is State.APPLIED
