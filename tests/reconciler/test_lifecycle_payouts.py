"""Following an APPLIED RazorpayX payout to the bank's final word (reconciler/lifecycle.py; SPEC §18): by its
`payout.*` webhooks, in whatever order they come, and by the poller's `GET /v1/payouts/{id}` — against a dict of
entities first, then against a real sandbox process, with the payout made by the REST client under our stamps."""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from interlock.sik import receipt_for, stamp_notes
from ledger import intents, lifecycle, sightings, webhook_inbox
from ledger.db import open_ledger, transaction
from ledger.queries import PAYOUT_TOOL
from ledger.states import Event
from rails.models import Payout, Refund, Settlement
from rails.razorpay import RazorpayClient
from reconciler.inbox import InboxReader
from reconciler.lifecycle import LifecycleFollower
from sandbox.rail import DEFAULT_ACCOUNT_NUMBER
from sandbox.testing import SandboxProcess, start_sandbox
from tests.ledger.helpers import put_intent
from tests.reconciler.recon_world import Clock

M = "acc_DEMO000001"
SIK = "U" * 32
POUT = "pout_U1"
PAYEE = "fa_U0000000001"
AMOUNT = 48_000


class Rail:
    """Refunds, settlements and payouts by id; every fetch recorded."""

    def __init__(self) -> None:
        self.entities: dict[str, dict[str, Any]] = {}
        self.fetches: list[str] = []

    def fetch_refund(self, refund_id: str) -> Refund:
        return Refund.from_raw(self._get(refund_id))

    def fetch_instant_settlement(self, settlement_id: str) -> Settlement:
        return Settlement.from_raw(self._get(settlement_id))

    def fetch_payout(self, payout_id: str) -> Payout:
        return Payout.from_raw(self._get(payout_id))

    def _get(self, entity_id: str) -> dict[str, Any]:
        self.fetches.append(entity_id)
        return self.entities[entity_id]


class RefundsOnly:
    """A rail that serves no payouts (an MCP upstream without payout tools)."""

    def fetch_refund(self, refund_id: str) -> Refund:
        raise AssertionError("not asked")

    def fetch_instant_settlement(self, settlement_id: str) -> Settlement:
        raise AssertionError("not asked")


def payout(status: str, *, pid: str = POUT, sik: str = SIK) -> dict[str, Any]:
    return {"id": pid, "entity": "payout", "fund_account_id": PAYEE, "amount": AMOUNT, "currency": "INR",
            "fees": 590, "tax": 90, "status": status, "mode": "IMPS", "purpose": "vendor bill",
            "reference_id": receipt_for(sik), "notes": {"interlock_sik": sik}}  # fmt: skip


def applied(conn: sqlite3.Connection, answer: dict[str, Any] | None, *, now: int, sik: str = SIK,
            pid: str = POUT) -> None:  # fmt: skip
    """A payout intent APPLIED by its attempt's answer, as the rail worker leaves it (tests/ledger/helpers.put_intent
    drives it through the real transitions; its defaults are a refund's, so the payout's tool and payee are given)."""
    put_intent(conn, sik, "IN_FLIGHT", amount=AMOUNT, tool=PAYOUT_TOOL, subject=PAYEE, now=now)
    with transaction(conn):
        intents.finish_attempt(conn, M, sik, 1, now=now, outcome="APPLIED", rail_entity_id=pid, http_status=200,
                               response=answer)  # fmt: skip
        intents.transition(conn, M, sik, Event.RAIL_APPLIED, now=now, set_fields={"rail_entity_id": pid})


def follower(ledger: sqlite3.Connection, rail: Any, clock: Clock, **kw: Any) -> LifecycleFollower:
    return LifecycleFollower(ledger=ledger, rail=rail, owner="reconciler-test", first_poll_ms=2000, clock=clock, **kw)


def reader_telling(f: LifecycleFollower, ledger: sqlite3.Connection, inbox: sqlite3.Connection,
                   clock: Clock) -> InboxReader:  # fmt: skip
    return InboxReader(ledger=ledger, inbox=inbox, reader="shard:0", owner="reconciler-test", clock=clock,
                       account_of=lambda intent: M,
                       on_sighting=lambda m, s, seen, ref: f.sighted(m, s, entity_id=seen.entity_id,
                                                                     status=seen.status, entity=seen.entity,
                                                                     ref=ref))  # fmt: skip


def deliver(inbox: sqlite3.Connection, event_id: str, event: str, entity: dict[str, Any]) -> None:
    body = json.dumps({"entity": "event", "account_id": M, "event": event, "contains": ["payout"],
                       "payload": {"payout": {"entity": entity}}, "created_at": 1}).encode()  # fmt: skip
    webhook_inbox.store(inbox, event_id=event_id, body=body, event=event, account_id=M, created_at=1, now=10)


def processed_by_webhook(ledger: sqlite3.Connection, inbox: sqlite3.Connection, clock: Clock,
                         rail: Rail) -> tuple[LifecycleFollower, InboxReader]:  # fmt: skip
    """A payout answered processing, followed by webhook to processed (final) — the start of a reversal's story."""
    applied(ledger, payout("processing"), now=clock.ms)
    f = follower(ledger, rail, clock, webhooks=True)
    reader = reader_telling(f, ledger, inbox, clock)
    deliver(inbox, "evt_p", "payout.processed", payout("processed"))
    reader.read()
    assert followed(ledger) == ("processed", True, None)
    return f, reader


def followed(ledger: sqlite3.Connection, sik: str = SIK) -> tuple[str, bool, str | None]:
    row = lifecycle.current(ledger, M, sik)
    assert row is not None
    return row.status, row.final, row.attention


def test_a_payout_answered_processing_is_followed_by_webhook_and_a_late_initiated_changes_nothing(
        ledger, inbox, clock) -> None:  # fmt: skip
    rail = Rail()
    applied(ledger, payout("processing"), now=clock.ms)
    f = follower(ledger, rail, clock, webhooks=True)
    reader = reader_telling(f, ledger, inbox, clock)
    f.step()
    assert followed(ledger) == ("processing", False, None)
    deliver(inbox, "evt_p", "payout.processed", payout("processed"))
    deliver(inbox, "evt_i", "payout.initiated", payout("processing"))  # overtaken on the way
    reader.read()
    assert followed(ledger) == ("processed", True, None)
    assert [(h["status"], h["source"], h["taken"]) for h in lifecycle.history(ledger, M, SIK)] == \
        [("processing", "answer", "moved"), ("processed", "webhook", "moved"), ("processing", "webhook", "stale")]
    assert rail.fetches == []


def test_a_processed_payout_reversed_later_is_taken_and_raised(ledger, inbox, clock, caplog) -> None:
    rail = Rail()
    f, reader = processed_by_webhook(ledger, inbox, clock, rail)
    clock.ms += 86_400_000  # the beneficiary bank sends it back a day later
    deliver(inbox, "evt_r", "payout.reversed", payout("reversed"))
    with caplog.at_level("ERROR"):
        reader.read()
    assert followed(ledger) == ("reversed", True, lifecycle.PAYOUT_REVERSED)
    assert f.counts["attention:PAYOUT_REVERSED"] == 1
    assert any("ATTENTION PAYOUT_REVERSED" in r.getMessage() for r in caplog.records)
    assert intents.require_intent(ledger, M, SIK).state.value == "APPLIED"


def test_a_processed_payout_whose_reversal_webhook_never_comes_is_found_reversed_by_the_poller(
        ledger, inbox, clock) -> None:  # fmt: skip
    """Webhooks first, polls as the safety net: a processed payout is final, but its bank may still reverse it, and
    a payout.reversed lost for good (the receiver unreachable for Razorpay's 24 hours of retries) must not leave the
    money back on the account with no person told. The poller goes on fetching a processed payout, backing off to
    six hours, for a week (WATCHED_FOR_MS); before, it stopped at processed."""
    rail = Rail()
    rail.entities[POUT] = payout("processed")
    f, _ = processed_by_webhook(ledger, inbox, clock, rail)
    for _ in range(3):  # fetched again and again while it stays processed, further and further apart
        clock.ms = lifecycle.current(ledger, M, SIK).next_poll_at  # type: ignore[assignment,union-attr]
        f.step()
    assert rail.fetches == [POUT] * 3 and followed(ledger) == ("processed", True, None)
    rail.entities[POUT] = payout("reversed")  # two days on, the beneficiary bank sends it back; no webhook comes
    clock.ms += 2 * 86_400_000
    f.step()
    assert followed(ledger) == ("reversed", True, lifecycle.PAYOUT_REVERSED)
    assert lifecycle.current(ledger, M, SIK).next_poll_at is None  # type: ignore[union-attr]  # nothing after it
    assert f.counts["attention:PAYOUT_REVERSED"] == 1


def test_a_payout_reversed_webhook_whose_observation_met_a_busy_ledger_is_taken_by_the_next_step(
        ledger, ledger_path, inbox, clock) -> None:  # fmt: skip
    """A webhook sighting is taken by the lifecycle at least once: the sighting commits in one transaction and its
    observation in another, and when the second fails (here the ledger is held by another writer past the
    busy timeout) the sighting, kept already, is taken by a later step — although the payout is final and the
    poller fetches it no more, and the reader, reading the event again, finds it kept and tells no one."""
    rail = Rail()
    applied(ledger, payout("processing"), now=clock.ms)
    f = follower(ledger, rail, clock, webhooks=True)
    other_writer = sqlite3.connect(ledger_path, isolation_level=None)

    def held_by_another_writer(merchant_id: str, sik: str, seen: Any, ref: str) -> int:
        ledger.execute("PRAGMA busy_timeout = 50")
        other_writer.execute("BEGIN IMMEDIATE")  # e.g. the rail worker's group commit
        return f.sighted(merchant_id, sik, entity_id=seen.entity_id, status=seen.status, entity=seen.entity, ref=ref)

    reader = reader_telling(f, ledger, inbox, clock)
    deliver(inbox, "evt_p", "payout.processed", payout("processed"))
    reader.read()
    assert followed(ledger) == ("processed", True, None)
    clock.ms += 3 * 86_400_000
    deliver(inbox, "evt_r", "payout.reversed", payout("reversed"))
    reader.on_sighting = held_by_another_writer
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        reader.read()
    other_writer.execute("ROLLBACK")
    ledger.execute("PRAGMA busy_timeout = 10000")
    assert [s.status for s in sightings.for_intent(ledger, M, SIK)] == ["processed", "reversed"], "kept already"
    assert followed(ledger) == ("processed", True, None)
    reader.on_sighting = None
    reader.read()  # the event again: kept already, nobody told
    assert f.step() == 1
    assert followed(ledger) == ("reversed", True, lifecycle.PAYOUT_REVERSED)
    assert [r.attention for r in lifecycle.needs_attention(ledger)] == [lifecycle.PAYOUT_REVERSED]
    assert f.counts["attention:PAYOUT_REVERSED"] == 1
    assert f.step() == 0 and [h["status"] for h in lifecycle.history(ledger, M, SIK)] == \
        ["processing", "processed", "reversed"], "taken once"  # fmt: skip


def test_a_payout_reversed_webhook_kept_before_a_kill_is_taken_after_the_restart(ledger_path, clock,
                                                                                 tmp_path) -> None:  # fmt: skip
    """The reconciler killed between the sighting's commit and its observation's: a restarted reader reads the
    event again and finds it kept; the restarted follower's first step takes it."""
    rail = Rail()
    ledger = open_ledger(ledger_path)
    inbox = webhook_inbox.open_inbox(tmp_path / "webhooks.sqlite3")
    applied(ledger, payout("processed"), now=clock.ms)
    f = follower(ledger, rail, clock, webhooks=True)
    f.step()
    assert followed(ledger) == ("processed", True, None)

    def killed(merchant_id: str, sik: str, seen: Any, ref: str) -> None:
        raise KeyboardInterrupt("SIGKILL between the sighting's commit and the follower's")

    reader = reader_telling(f, ledger, inbox, clock)
    reader.on_sighting = killed
    deliver(inbox, "evt_r", "payout.reversed", payout("reversed"))
    with pytest.raises(KeyboardInterrupt):
        reader.read()
    ledger.close()
    inbox.close()
    ledger = open_ledger(ledger_path)
    inbox = webhook_inbox.open_inbox(tmp_path / "webhooks.sqlite3")
    f = follower(ledger, rail, clock, webhooks=True)
    reader_telling(f, ledger, inbox, clock).read()
    assert followed(ledger) == ("processed", True, None), "kept already: the reader tells no one"
    clock.ms += 1000
    assert f.step() == 1
    assert followed(ledger) == ("reversed", True, lifecycle.PAYOUT_REVERSED)
    assert rail.fetches == [], "taken from the ledger, not fetched"
    ledger.close()
    inbox.close()


def test_a_payout_failed_after_processed_is_a_conflict_for_a_person(ledger, inbox, clock) -> None:
    rail = Rail()
    applied(ledger, payout("processing"), now=clock.ms)
    f = follower(ledger, rail, clock, webhooks=True)
    reader = reader_telling(f, ledger, inbox, clock)
    deliver(inbox, "evt_p", "payout.processed", payout("processed"))
    deliver(inbox, "evt_f", "payout.failed", payout("failed"))
    reader.read()
    assert followed(ledger) == ("processed", True, lifecycle.CONFLICTING_FINAL)
    assert [h["taken"] for h in lifecycle.history(ledger, M, SIK)][-1] == "conflict"


def test_the_same_payout_status_under_two_event_ids_is_one_observation(ledger, inbox, clock) -> None:
    rail = Rail()
    applied(ledger, payout("processing"), now=clock.ms)
    f = follower(ledger, rail, clock, webhooks=True)
    reader = reader_telling(f, ledger, inbox, clock)
    deliver(inbox, "evt_1", "payout.processed", payout("processed"))
    deliver(inbox, "evt_2", "payout.processed", payout("processed"))  # a replay by hand, under a new id
    deliver(inbox, "evt_3", "payout.updated", payout("processed"))
    reader.read()
    assert [(h["status"], h["taken"]) for h in lifecycle.history(ledger, M, SIK)] == \
        [("processing", "moved"), ("processed", "moved")]  # fmt: skip
    assert followed(ledger) == ("processed", True, None)


def test_the_poller_fetches_a_queued_payout_until_it_is_final(ledger, clock) -> None:
    rail = Rail()
    applied(ledger, payout("queued"), now=clock.ms)
    f = follower(ledger, rail, clock)
    f.step()
    assert followed(ledger) == ("queued", False, None) and rail.fetches == []
    rail.entities[POUT] = payout("queued")
    clock.ms += 2000
    assert f.step() == 0 and rail.fetches == [POUT]
    rail.entities[POUT] = payout("cancelled")  # an operator cancelled it on the dashboard
    clock.ms += 4000
    assert f.step() == 1
    assert followed(ledger) == ("cancelled", True, lifecycle.PAYOUT_NOT_PAID)
    clock.ms += 10**8
    f.step()
    assert rail.fetches == [POUT, POUT], "a final payout is not fetched again"


def test_a_rail_without_payouts_is_not_asked_for_one_and_not_asked_in_a_loop(ledger, clock) -> None:
    applied(ledger, None, now=clock.ms)
    f = follower(ledger, RefundsOnly(), clock)
    f.step()
    clock.ms += 60_000
    f.step()
    assert f.counts["not_fetchable"] == 1
    assert lifecycle.current(ledger, M, SIK) is None


# -- against the real sandbox -------------------------------------------------------------------------

_ids = itertools.count(1)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    """The sandbox with its lifecycle off: a payout stays processing until moved by hand (RazorpayX test mode)."""
    with start_sandbox(tmp_path_factory.mktemp("rail")) as rail:
        rail.set_banking_balance(10_000_000)
        yield rail


@pytest.fixture
def client(sandbox: SandboxProcess) -> Iterator[RazorpayClient]:
    with RazorpayClient(sandbox.url, sandbox.key_id, sandbox.key_secret, timeout_ms=3000) as c:
        yield c


def made_payout(sandbox: SandboxProcess, client: RazorpayClient) -> tuple[str, Payout]:
    """A payout made as the rail worker will make it (SPEC §18): reference_id "ilk_"+SIK, notes.interlock_sik, and
    the SIK as X-Payout-Idempotency."""
    n = next(_ids)
    sik = f"PAYOUTLIFE{os.getpid():08d}{n:014d}"[:32]
    payee = f"fa_{os.getpid() % 10**6:06d}L{n:07d}"
    sandbox.add_fund_account(payee)
    made = client.create_payout(account_number=DEFAULT_ACCOUNT_NUMBER, fund_account_id=payee, amount=AMOUNT,
                                currency="INR", mode="IMPS", purpose="vendor bill", queue_if_low_balance=False,
                                reference_id=receipt_for(sik), narration="Interlock payout", notes=stamp_notes(sik),
                                idempotency_key=sik)  # fmt: skip
    return sik, made


def applied_on_the_sandbox(ledger: sqlite3.Connection, sik: str, made: Payout, now: int) -> None:
    put_intent(ledger, sik, "IN_FLIGHT", amount=AMOUNT, tool=PAYOUT_TOOL, subject=made.fund_account_id, now=now)
    with transaction(ledger):
        intents.finish_attempt(ledger, M, sik, 1, now=now, outcome="APPLIED", rail_entity_id=made.id,
                               http_status=200, response=made.raw)  # fmt: skip
        intents.transition(ledger, M, sik, Event.RAIL_APPLIED, now=now, set_fields={"rail_entity_id": made.id})


@pytest.mark.parametrize(("moves", "final", "attention"), [
    (["processed"], "processed", None),
    (["processed", "reversed"], "reversed", lifecycle.PAYOUT_REVERSED),
    (["failed"], "failed", lifecycle.PAYOUT_FAILED),
])  # fmt: skip
def test_the_poller_follows_a_real_payout_to_its_final_status(sandbox, client, ledger, clock, moves, final,
                                                              attention) -> None:  # fmt: skip
    sik, made = made_payout(sandbox, client)
    assert made.status == "processing" and made.carries_stamp(sik)
    applied_on_the_sandbox(ledger, sik, made, clock.ms)
    f = follower(ledger, client, clock)
    f.step()
    assert followed(ledger, sik) == ("processing", False, None), "the answer's own status is the start"
    clock.ms += 2000
    assert f.step() == 0, "fetched: still processing"
    for status in moves:
        sandbox.move_payout(made.id, status)
    clock.ms += 4000
    assert f.step() == 1
    row = lifecycle.current(ledger, M, sik)
    assert row is not None and (row.status, row.final, row.attention, row.source) == (final, True, attention, "poll")
    assert row.amounts == {"amount": AMOUNT, "fees": 590, "tax": 90}
    assert row.entity_id == made.id and f.counts["fetched"] == 2
