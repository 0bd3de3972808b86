"""Guards of reconciler/loop.py that no other test would miss (issue 17, item 7): each test here fails when the
guard it names is deleted. In-process, over a real SQLite ledger, with the scripted rail and the injectable
clock of tests/engine/send_world.py."""

from __future__ import annotations

import dataclasses
import sqlite3
from typing import Any

from ledger import intents, leases
from ledger.db import open_ledger, transaction
from ledger.states import Event, State
from rail_worker.execute import execute
from rails.razorpay import RailError, RailErrorKind
from reconciler.loop import MAX_ATTEMPTS, RETRIES_EXHAUSTED
from tests.engine.send_world import REFUND, SETTLEMENT, World
from tests.mandates import MERCHANT, make_mandate

SIK = "S" * 32


def _events(world: World) -> list[str]:
    rows = open_ledger(world.path).execute("SELECT payload_json FROM audit_log WHERE kind = 'TRANSITION' ORDER BY seq")
    return [row[0] for row in rows]


def _unknown_after_one_attempt(world: World, conn: sqlite3.Connection) -> None:
    world.authorized(SETTLEMENT)
    with transaction(conn):
        intents.start_attempt(conn, MERCHANT, SIK, now=world.clock(), lease_owner="rail:A", lease_epoch=1,
                              lease_expires_at=world.clock() + world.settings.lease_ttl_ms, request={})  # fmt: skip
        intents.transition(conn, MERCHANT, SIK, Event.RAIL_AMBIGUOUS, now=world.clock())


# -- grace for an IN_FLIGHT row whose own worker is alive --------------------------------------------------------------


def test_a_live_workers_in_flight_row_gets_one_more_ttl_before_it_is_taken(world: World) -> None:
    s = world.settings
    world.authorized(SETTLEMENT)
    a = world.runtime("rail:A")  # epoch 1, alive: it keeps renewing its lease below
    conn = open_ledger(world.path)
    with transaction(conn):
        intents.start_attempt(conn, MERCHANT, SIK, now=world.clock(), lease_owner="rail:A", lease_epoch=1,
                              lease_expires_at=world.clock() + s.lease_ttl_ms, request={})  # fmt: skip

    def time_passes_while_a_renews(ms: int) -> None:
        step = s.lease_ttl_ms // 3  # A's heartbeat
        for _ in range(ms // step):
            world.clock.advance(step)
            assert a.lease is not None
            with transaction(conn):
                a.lease = leases.heartbeat(conn, a.lease, now=world.clock(), ttl_ms=s.lease_ttl_ms)

    time_passes_while_a_renews(s.lease_ttl_ms + s.rail_timeout_ms)  # the row's lease and the call's deadline are over
    world.reconciler().sweep()
    assert world.intent().state is State.IN_FLIGHT, "its worker is alive and will record the answer"
    time_passes_while_a_renews(s.lease_ttl_ms)  # one TTL more: evidently it will not (an error left the row behind)
    world.reconciler().sweep()
    assert world.intent().state is not State.IN_FLIGHT
    assert any('"LEASE_EXPIRED"' in event for event in _events(world))


# -- a reconcile pass whose per-intent lease was lost writes nothing ---------------------------------------------------


def test_a_finding_made_after_the_reconcile_lease_was_lost_is_discarded(world: World) -> None:
    s = world.settings
    conn = open_ledger(world.path)
    _unknown_after_one_attempt(world, conn)
    world.clock.advance(s.lease_ttl_ms + s.rail_timeout_ms + s.reconcile_min_delay_ms)
    first = world.reconciler()
    second = dataclasses.replace(world.reconciler(), owner="reconciler:2")
    lister = world.rail.list_instant_settlements

    def first_stalls_while_reading(**kwargs: Any) -> Any:
        # The first reconciler stalls on its read past its per-intent lease; the second takes the intent over and
        # is reading the rail itself when the first wakes up with its (lagging, empty) page.
        world.clock.advance(s.lease_ttl_ms + 1)
        assert second._expire_abandoned(world.clock()) == 1
        with transaction(conn):
            intents.begin_reconcile(conn, MERCHANT, SIK, now=world.clock(), owner=second.owner,
                                    lease_expires_at=world.clock() + s.lease_ttl_ms)  # fmt: skip
        world.rail.list_instant_settlements = lister  # type: ignore[method-assign]
        return lister(**kwargs)

    world.rail.list_instant_settlements = first_stalls_while_reading  # type: ignore[method-assign]
    first.reconcile(MERCHANT, SIK)
    intent = world.intent()
    assert (intent.state, intent.lease_owner) == (State.RECONCILING, "reconciler:2"), "the second pass was overrun"
    assert conn.execute("SELECT COUNT(*) FROM recon_findings").fetchone()[0] == 0
    assert world.rail.calls == []


# -- automatic retries stop at MAX_ATTEMPTS ----------------------------------------------------------------------------


def test_a_call_confirmed_absent_after_its_last_automatic_attempt_is_quarantined_for_a_person(world: World) -> None:
    # ADR 0025: five answers lost and five lists without our stamp — a lagging list looks exactly like this.
    world.authorized(SETTLEMENT)
    world.rail.reject = RailError(RailErrorKind.AMBIGUOUS, "504", method="POST", path="/x", http_status=504)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        execute(world.runtime("rail:A"), MERCHANT, SIK, request_id=None)  # a gateway 504 that applied nothing
        assert (world.intent().state, world.intent().attempt_seq) == (State.UNKNOWN, attempt)
        world.watch()
        world.clock.advance(60_000)  # past the min delay and any backoff
        world.reconciler().sweep()
        expected = State.AUTHORIZED if attempt < MAX_ATTEMPTS else State.QUARANTINED
        assert world.intent().state is expected, f"after attempt {attempt}"
    assert len(world.rail.calls) == MAX_ATTEMPTS
    assert world.intent().reason_code == RETRIES_EXHAUSTED
    world.clock.advance(600_000)
    world.reconciler().sweep()
    assert len(world.rail.calls) == MAX_ATTEMPTS, "a quarantined intent was sent again"


# -- two reconcilers: a due list is acted on only for the attempt it judged ----------------------------------------


def test_a_due_list_gone_stale_behind_another_reconcilers_retry_reads_nothing(world: World) -> None:
    # Found in review: R1 judges attempt 1 due; before it gets there, R2 confirms attempt 1 absent and authorizes a
    # retry, and attempt 2 is applied with its answer lost. R1's pass must not read attempt 2's list at once.
    r1 = world.reconciler()
    r2 = dataclasses.replace(r1, owner="reconciler:2", seen={})
    world.authorized(SETTLEMENT)
    world.rail.reject = RailError(RailErrorKind.AMBIGUOUS, "504", method="POST", path="/x", http_status=504)
    execute(world.runtime(), MERCHANT, SIK, request_id=None)  # attempt 1: a 504 that applied nothing
    r1._due(world.clock())
    r2._due(world.clock())
    world.clock.advance(5000)
    due = r1._due(world.clock())
    assert due == [(MERCHANT, SIK, 1)]
    assert r2.sweep() == 1 and world.intent().state is State.AUTHORIZED, "R2: truly absent, a retry"
    world.rail.apply_then_fail = True
    execute(world.runtime("rail:B"), MERCHANT, SIK, request_id=None)  # attempt 2 applied, its answer lost
    world.rail.listed = False  # and not listed yet
    world.clock.advance(1)
    assert [r1.reconcile(m, s, attempt_seq=a) for m, s, a in due] == [False]
    assert (world.intent().state, world.intent().attempt_seq) == (State.UNKNOWN, 2)
    assert len(world.rail.entities) == 1


# -- ADR 0026: a keyed refund's early read is absence only when a retry will prove it ---------------------------------


def test_a_keyed_refund_no_retry_will_follow_is_confirmed_absent_only_by_a_second_read_a_delay_later(
    world: World,
) -> None:
    world.authorized(REFUND, amount=189900)
    world.rail.reject = RailError(RailErrorKind.AMBIGUOUS, "504", method="POST", path="/x", http_status=504)
    execute(world.runtime(), MERCHANT, SIK, request_id=None)  # a gateway 504 that applied nothing
    replaced = make_mandate({"issued_at": world.mandate.issued_at, "expires_at": world.mandate.expires_at,
                             "purpose": "replaced"})  # fmt: skip
    reconciler = world.reconciler(replaced)  # no retry under the mandate configured now
    reconciler._due(world.clock())
    world.clock.advance(world.settings.reconcile_min_delay_ms)  # its answer plus the delay: a keyed refund is due
    reconciler.sweep()
    assert world.intent().state is State.UNKNOWN, "an early read with no retry to prove it was taken as absence"
    world.clock.advance(world.settings.reconcile_min_delay_ms)
    reconciler.sweep()
    assert world.intent().state is State.CONFIRMED_NOT_APPLIED
    assert len(world.rail.calls) == 1
