"""Earlier attempts' evidence in rail_worker/execute.py (ADR 0005): a retry whose earlier attempt is known to have
applied settles the intent instead of sending, and answers the waiting ingress with the settled Outcome; an answer
for attempt 1 that arrives while the same worker has attempt 2 out is fenced on the attempt_seq and kept as evidence
only; a second stamped entity for one SIK goes on the audit chain with both entity ids, and a single applied answer
writes no such record. In-process, over a real SQLite ledger, with the scripted rail and the injectable clock of
tests/engine/send_world.py."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock.fees import DEFAULT_FEE_RATE
from interlock.messages import CallerAction, IntentTerms, Outcome
from ledger import intents
from ledger.db import open_ledger, transaction
from ledger.limits import reassert
from ledger.states import Event, State
from rail_worker import execute as execute_module
from rail_worker.classify import Classified
from rail_worker.execute import execute
from tests.engine.send_world import SETTLEMENT, World, make_world
from tests.mandates import MERCHANT

SIK = "S" * 32


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    made = make_world(tmp_path, monkeypatch)
    yield made
    made.close()


def _audit(world: World) -> list[tuple[str, dict[str, Any]]]:
    rows = open_ledger(world.path).execute("SELECT kind, payload_json FROM audit_log ORDER BY seq")
    return [(r[0], json.loads(r[1])) for r in rows]


def _confirmed_absent_then_retry(world: World, conn: sqlite3.Connection, *, attempt_out: bool = True) -> None:
    """Attempt 1 (started here unless *attempt_out* says it already is) went ambiguous, a reconcile pass confirmed
    it absent, and a retry was authorized under the world's mandate (inside the caller's transaction)."""
    if not attempt_out:
        intents.start_attempt(conn, MERCHANT, SIK, now=world.clock(), lease_owner="rail:A", lease_epoch=1,
                              lease_expires_at=world.clock() + 3000, request={})  # fmt: skip
    intents.transition(conn, MERCHANT, SIK, Event.RAIL_AMBIGUOUS, now=world.clock())
    intents.begin_reconcile(conn, MERCHANT, SIK, now=world.clock(), owner="r", lease_expires_at=world.clock() + 1)
    intents.transition(conn, MERCHANT, SIK, Event.RECONCILE_CONFIRMED_ABSENT, now=world.clock())
    check = reassert(conn, intents.require_intent(conn, MERCHANT, SIK), world.mandate, now_ms=world.clock(),
                     rate=DEFAULT_FEE_RATE)  # fmt: skip
    intents.transition(conn, MERCHANT, SIK, Event.RETRY_AUTHORIZED, now=world.clock(), reasserted=check)


def test_a_retry_of_an_attempt_known_to_have_applied_answers_applied_and_sends_nothing(world: World) -> None:
    world.authorized(SETTLEMENT)
    conn = open_ledger(world.path)
    with transaction(conn):
        _confirmed_absent_then_retry(world, conn, attempt_out=False)
        intents.finish_attempt(conn, MERCHANT, SIK, 1, now=world.clock(), outcome="FENCED_APPLIED",
                               rail_entity_id="setlod_EARLIER0000001")  # fmt: skip
    outcome = execute(world.runtime(), MERCHANT, SIK, request_id="req-retry")
    terms = IntentTerms(merchant_id=MERCHANT, tool=SETTLEMENT, subject="balance", amount_minor=50000, currency="INR")
    assert outcome == Outcome(request_id="req-retry", state="APPLIED", sik=SIK, intent=terms,
                              rail_entity_id="setlod_EARLIER0000001", caller_action=CallerAction.DONE, replayed=False)
    assert world.rail.calls == []
    kind, settled = _audit(world)[-1]
    assert (kind, settled["event"], settled["actor"], settled["detail"]) == (
        "TRANSITION", "EARLIER_ATTEMPT_APPLIED", "rail:A", {"evidence_attempt_seq": 1})


def test_a_retry_job_without_a_request_id_settled_from_evidence_has_nothing_to_publish(world: World) -> None:
    world.authorized(SETTLEMENT)
    conn = open_ledger(world.path)
    with transaction(conn):
        _confirmed_absent_then_retry(world, conn, attempt_out=False)
        intents.finish_attempt(conn, MERCHANT, SIK, 1, now=world.clock(), outcome="FENCED_APPLIED",
                               rail_entity_id="setlod_EARLIER0000001")  # fmt: skip
    assert execute(world.runtime(), MERCHANT, SIK, request_id=None) is None
    assert (world.intent().state, world.rail.calls) == (State.APPLIED, [])


def test_an_answer_for_attempt_1_does_not_overwrite_attempt_2_the_same_worker_has_out(world: World) -> None:
    world.authorized(SETTLEMENT)
    a = world.runtime("rail:A")

    def a_lagging_list_authorizes_a_retry_and_a_starts_it() -> None:
        # While attempt 1 is out, the reconciler (reading a list that lags) confirms it absent and a retry is
        # authorized; the same worker, under the same epoch, starts attempt 2.
        conn = open_ledger(world.path)
        with transaction(conn):
            _confirmed_absent_then_retry(world, conn)
        started = execute_module.begin_attempt(a, MERCHANT, SIK, request_id=None)
        assert isinstance(started, execute_module.Started) and started.lease_epoch == 1

    world.rail.during_call = a_lagging_list_authorizes_a_retry_and_a_starts_it
    execute(a, MERCHANT, SIK, request_id=None)  # attempt 1's APPLIED answer arrives: fenced on attempt_seq
    intent = world.intent()
    assert (intent.state, intent.attempt_seq, intent.lease_epoch, intent.rail_entity_id) == (
        State.IN_FLIGHT, 2, 1, None)
    assert world.attempts() == [(1, "FENCED_APPLIED"), (2, None)]


def test_a_second_stamped_entity_for_one_sik_is_recorded_with_both_entity_ids(world: World) -> None:
    world.authorized(SETTLEMENT)
    conn = open_ledger(world.path)
    with transaction(conn):
        _confirmed_absent_then_retry(world, conn, attempt_out=False)
        second = intents.start_attempt(conn, MERCHANT, SIK, now=world.clock(), lease_owner="rail:A", lease_epoch=1,
                                       lease_expires_at=world.clock() + 3000, request={})  # fmt: skip
        intents.finish_attempt(conn, MERCHANT, SIK, 1, now=world.clock(), outcome="FENCED_APPLIED",
                               rail_entity_id="setlod_FIRST00000001")  # fmt: skip
    rt = world.runtime()
    applied = Classified(Event.RAIL_APPLIED, "APPLIED", rail_entity_id="setlod_SECOND0000001", http_status=200)
    rt.write(lambda c: execute_module.record(rt, c, second, applied, lease_epoch=1))
    assert [p for k, p in _audit(world) if k == "DUPLICATE_ENTITIES"] == [
        {"merchant_id": MERCHANT, "sik": SIK, "entities": ["setlod_FIRST00000001", "setlod_SECOND0000001"]}]


def test_a_single_applied_answer_writes_no_duplicate_entity_record(world: World) -> None:
    world.authorized(SETTLEMENT)
    execute(world.runtime(), MERCHANT, SIK, request_id=None)
    assert world.intent().state is State.APPLIED
    kinds = [k for k, _ in _audit(world)]
    assert kinds == ["INTENT_PROPOSED", "TRANSITION", "LEASE_ACQUIRED", "TRANSITION", "ATTEMPT_FINISHED", "TRANSITION"]


def test_the_trace_the_job_carried_is_returned_with_the_outcome(world: World) -> None:
    world.authorized(SETTLEMENT)
    outcome = execute(world.runtime(), MERCHANT, SIK, request_id="req-1", trace={"gate_decided": 1234})
    assert outcome is not None and outcome.trace["gate_decided"] == 1234
    assert set(outcome.trace) == {"gate_decided", "request_sent", "answer_received", "recorded"}
