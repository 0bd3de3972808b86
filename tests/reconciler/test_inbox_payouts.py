"""RazorpayX payout events in the webhook inbox (SPEC §18; ADR 0027, 0028): the payout under `payload.payout`, stamped
notes.interlock_sik or reference_id "ilk_"+SIK, is evidence for its payout intent only, and only where the event
names the intent's rail account (ADR 0021). The bodies are built by the sandbox's own code, so what is pinned here is
what the sandbox sends."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from ledger import intents, sightings, webhook_inbox
from ledger.queries import PAYOUT_TOOL
from ledger.states import State
from reconciler.inbox import InboxReader, stamped_entity
from sandbox import payout_states
from sandbox.payouts import payout_entity
from sandbox.webhooks import envelope
from tests.ledger.helpers import put_intent

M = "acc_DEMO000001"
SIK = "Q" * 32
PAYEE = "fa_Q0000000001"


def payout(status: str = "processing", *, sik: str = SIK, stamp: str = "both", amount: int = 48_000) -> dict[str, Any]:
    """A payout as the sandbox makes and moves it (sandbox/payouts.py, sandbox/payout_states.py)."""
    notes = {"interlock_sik": sik} if stamp in ("both", "notes") else {}
    body = {"fund_account_id": PAYEE, "amount": amount, "currency": "INR", "mode": "IMPS", "purpose": "vendor bill",
            "notes": notes, "reference_id": "ilk_" + sik if stamp in ("both", "reference_id") else "vendor-17"}
    entity = payout_entity(body, created_ms=1_700_000_000_000)  # queued
    entity["id"] = "pout_Q1"
    path = {"queued": [], "processing": ["processing"], "processed": ["processing", "processed"],
            "failed": ["processing", "failed"], "reversed": ["processing", "processed", "reversed"],
            "cancelled": ["cancelled"]}[status]  # fmt: skip
    for step in path:
        entity = payout_states.moved(entity, step)
    return entity


def deliver(inbox: sqlite3.Connection, event_id: str, entity: dict[str, Any], *, account: str | None = M) -> None:
    event = payout_states.event(entity["status"])
    body = envelope(event, "payout", entity, account_id=account or "", at_s=1_700_000_000)
    webhook_inbox.store(inbox, event_id=event_id, body=body, event=event, account_id=account,
                        created_at=1_700_000_000, now=10)  # fmt: skip


def reader(ledger: sqlite3.Connection, inbox: sqlite3.Connection, *, account: str | None = M) -> InboxReader:
    return InboxReader(ledger=ledger, inbox=inbox, reader="shard:0", owner="reconciler-test",
                       account_of=lambda intent: account, clock=lambda: 50)  # fmt: skip


@pytest.mark.parametrize("stamp", ["both", "notes", "reference_id"])
def test_a_payout_event_carries_its_payout_and_the_sik_of_either_stamp(stamp) -> None:
    entity = payout("processed", stamp=stamp)
    body = envelope("payout.processed", "payout", entity, account_id=M, at_s=1)
    assert json.loads(body)["contains"] == ["payout"]
    seen = stamped_entity(body)
    assert seen is not None
    assert (seen.tool, seen.entity_id, seen.status, seen.siks) == (PAYOUT_TOOL, "pout_Q1", "processed", (SIK,))


def test_a_payout_without_our_stamp_or_under_another_key_is_not_evidence() -> None:
    plain = payout(stamp="none")
    assert stamped_entity(envelope("payout.processed", "payout", plain, account_id=M, at_s=1)) is None
    assert stamped_entity(envelope("payout.processed", "refund", payout(), account_id=M, at_s=1)) is None, \
        "a payout entity is read only where Razorpay puts it"  # fmt: skip


def test_a_payout_event_is_a_sighting_of_an_applied_payout_and_changes_nothing_else(ledger, inbox) -> None:
    put_intent(ledger, SIK, "APPLIED", amount=48_000, tool=PAYOUT_TOOL, subject=PAYEE)
    deliver(inbox, "evt_f", payout("failed"))
    r = reader(ledger, inbox)
    assert r.read() == 0 and r.counts["sighted"] == 1
    [seen] = sightings.for_intent(ledger, M, SIK)
    assert (seen.ref, seen.event, seen.entity_id, seen.status) == ("evt_f", "payout.failed", "pout_Q1", "failed")
    assert intents.require_intent(ledger, M, SIK).state is State.APPLIED, "a failed payout is still APPLIED"
    assert webhook_inbox.counts(inbox)["unprocessed"] == 0


def test_a_payout_event_naming_another_account_is_not_evidence(ledger, inbox) -> None:
    put_intent(ledger, SIK, "UNKNOWN", amount=48_000, tool=PAYOUT_TOOL, subject=PAYEE)
    deliver(inbox, "evt_1", payout(), account="acc_SOMEONEELSE")
    deliver(inbox, "evt_2", payout(), account=None)
    r = reader(ledger, inbox)
    assert r.read() == 0 and r.counts["other_account"] == 2
    assert sightings.for_intent(ledger, M, SIK) == []
    assert intents.require_intent(ledger, M, SIK).state is State.UNKNOWN


def test_a_payout_stamp_on_a_refund_intent_is_not_evidence_nor_the_reverse(ledger, inbox) -> None:
    put_intent(ledger, SIK, "UNKNOWN", amount=48_000)  # a refund intent with the payout's SIK
    deliver(inbox, "evt_1", payout())
    r = reader(ledger, inbox)
    assert r.read() == 0 and r.counts["other_tool"] == 1
    assert intents.require_intent(ledger, M, SIK).state is State.UNKNOWN


@pytest.mark.parametrize("stamp", ["notes", "reference_id"])
def test_a_stamped_payout_on_the_intents_terms_settles_an_unknown_payout_applied(ledger, inbox, stamp) -> None:
    put_intent(ledger, SIK, "UNKNOWN", amount=48_000, tool=PAYOUT_TOOL, subject=PAYEE)
    deliver(inbox, "evt_1", payout(stamp=stamp))
    assert reader(ledger, inbox).read() == 1
    intent = intents.require_intent(ledger, M, SIK)
    assert (intent.state, intent.rail_entity_id) == (State.APPLIED, "pout_Q1")
