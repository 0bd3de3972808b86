"""The reconciler's periodic sweep (reconciler/loop.py `sweep`, `_expire_abandoned`, `_expire_holds`,
`_reenqueue_stranded`, `_claim`, `_enqueue_execute`): which abandoned IN_FLIGHT and RECONCILING rows it takes back
to UNKNOWN (never a live worker's row before its grace, never a reconcile lease still held), which holds it
expires, which AUTHORIZED intents it hands to the rail worker again (once per interval, claimed in Redis), and
the count of intents it acted on."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger import intents, leases
from ledger.db import transaction
from ledger.states import Event, State
from reconciler import loop as reconciler_module
from reconciler.loop import Reconciler
from tests.engine.send_world import SETTLEMENT, T0, World, make_world
from tests.mandates import AGENT, MERCHANT
from tests.reconciler.recon_world import (
    OWNER,
    SIK,
    Hub,
    audit_mark,
    audit_since,
    in_flight,
    job,
    stamped_settlement,
    transition_row,
    unknown,
)

A, B, C, D, E = ("A" * 32, "B" * 32, "C" * 32, "D" * 32, "E" * 32)


def _reconciler(world: World, hub: Hub | None = None, owner: str = OWNER) -> Reconciler:
    return dataclasses.replace(world.reconciler(), redis=hub, owner=owner)  # type: ignore[arg-type]


def _held(world: World, conn: sqlite3.Connection, sik: str, expires_at: int) -> None:
    with transaction(conn):
        intents.insert_intent(
            conn, merchant_id=MERCHANT, sik=sik, tool=SETTLEMENT, subject_id="balance", amount_minor=50000,
            currency="INR", params={"amount": 50000, "notes": {}}, params_hash="ph", agent_id=AGENT,
            mandate_id=world.mandate.mandate_id, mandate_hash=world.mandate.mandate_hash, operation_ref=None,
            distinct_reason=None, now=world.clock(),
        )  # fmt: skip
        intents.transition(conn, MERCHANT, sik, Event.GATES_HELD, now=world.clock(),
                           set_fields={"hold_expires_at": expires_at})  # fmt: skip


def _expired(sik: str, lease_expired_at: int, *, frm: str = "IN_FLIGHT", event: str = "LEASE_EXPIRED",
             at: int) -> tuple[str, int, dict[str, Any]]:  # fmt: skip
    return ("TRANSITION", at, transition_row(event, frm, "UNKNOWN", sik=sik, actor=OWNER,
                                             detail={"lease_expired_at": lease_expired_at}))  # fmt: skip


# -- the count -------------------------------------------------------------------------------------------------------


def test_a_sweep_counts_each_intent_it_acted_on_once(world: World, conn: sqlite3.Connection) -> None:
    unknown(world, conn, sik=A)  # due at T0 + 4.5 s; the rail holds its stamp
    stamped_settlement(world, A)
    world.authorized(SETTLEMENT, sik=D)  # stranded once it is 5 s old
    _held(world, conn, E, T0 + 10_000)
    world.clock.advance(1)
    unknown(world, conn, sik=B)  # due too, but another reconciler takes it while this sweep reads A's list
    world.watch()
    world.clock.ms = T0 + 6000
    in_flight(world, conn, sik=C)  # abandoned at T0 + 10 s (no rail worker holds a lease)
    world.clock.ms = T0 + 10_000
    lister = world.rail.list_instant_settlements
    other = _reconciler(world, owner="reconciler:2")

    def b_is_taken_meanwhile(**kwargs: Any) -> Any:
        world.rail.list_instant_settlements = lister  # type: ignore[method-assign]
        with transaction(conn):
            intents.begin_reconcile(conn, MERCHANT, B, now=world.clock(), owner=other.owner,
                                    lease_expires_at=world.clock() + 3000)  # fmt: skip
        return lister(**kwargs)

    world.rail.list_instant_settlements = b_is_taken_meanwhile  # type: ignore[method-assign]
    assert world.reconciler().sweep() == 4  # C expired, E's hold expired, A reconciled, D handed over; not B
    states = {sik: world.intent(sik).state for sik in (A, B, C, D, E)}
    assert states == {A: State.APPLIED, B: State.RECONCILING, C: State.UNKNOWN, D: State.AUTHORIZED,
                      E: State.BLOCKED}  # fmt: skip
    assert world.intent(B).lease_owner == "reconciler:2"


def test_a_sweep_with_nothing_to_do_counts_nothing(world: World, conn: sqlite3.Connection) -> None:
    _held(world, conn, E, T0 + 10_001)
    world.clock.ms = T0 + 10_000
    mark = audit_mark(world)
    assert world.reconciler().sweep() == 0
    assert world.intent(E).state is State.HELD
    assert audit_since(world, mark) == []


def test_a_hold_past_its_expiry_is_blocked_with_hold_expired(world: World, conn: sqlite3.Connection) -> None:
    _held(world, conn, E, T0 + 10_000)
    world.clock.ms = T0 + 10_000
    assert world.reconciler().sweep() == 1
    intent = world.intent(E)
    assert (intent.state, intent.reason_code) == (State.BLOCKED, "HOLD_EXPIRED")


# -- abandoned IN_FLIGHT rows ------------------------------------------------------------------------------------------


def test_an_in_flight_row_with_no_rail_worker_is_taken_once_its_lease_and_the_call_deadline_are_over(
        world: World, conn: sqlite3.Connection) -> None:  # fmt: skip
    in_flight(world, conn)  # lease until T0 + 3 s; the call may be out until T0 + 4 s
    world.clock.ms = T0 + 3999
    assert world.reconciler().sweep() == 0
    assert world.intent().state is State.IN_FLIGHT
    world.clock.ms = T0 + 4000
    mark = audit_mark(world)
    assert world.reconciler().sweep() == 1
    assert audit_since(world, mark) == [_expired(SIK, T0 + 3000, at=T0 + 4000)]
    assert world.intent().state is State.UNKNOWN


def test_finding_f7_a_reconciler_whose_clock_runs_ahead_of_the_workers_waits_out_the_workers_lease(
        world: World, conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Finding F7 (docs/simulation.md, ADR 0032): the row lease is the rail worker's clock's reading; a reconciler
    whose clock runs 1 s ahead saw "lease plus deadline" pass a second before the worker's own clock did, and took
    the row while the worker's call could still be out. The rule: a row is abandoned only once the caller's clock
    is past the lease plus the deadline plus INTERLOCK_CLOCK_SKEW_MS, so on the worker's clock never before the lease
    plus the deadline."""
    world.settings = world.settings.model_copy(update={"clock_skew_ms": 1_000})
    in_flight(world, conn)  # leased until T0 + 3 s on the worker's clock; its call may be out until T0 + 4 s
    monkeypatch.setattr(reconciler_module, "now_ms", lambda: world.clock() + 1_000)  # the reconciler's clock
    world.clock.ms = T0 + 3999  # the reconciler reads T0 + 4,999
    assert world.reconciler().sweep() == 0
    assert world.intent().state is State.IN_FLIGHT
    world.clock.ms = T0 + 4000  # the worker's clock is past the lease plus the deadline
    assert world.reconciler().sweep() == 1
    assert world.intent().state is State.UNKNOWN


def test_a_rail_lease_that_ends_this_millisecond_gives_its_row_no_grace(world: World, conn: sqlite3.Connection) -> None:
    world.runtime("rail:A")  # epoch 1, until T0 + 3 s, never renewed
    in_flight(world, conn, epoch=1, lease_expires_at=T0 + 2000)
    world.clock.ms = T0 + 3000
    assert world.reconciler().sweep() == 1
    assert world.intent().state is State.UNKNOWN


def test_a_live_rail_worker_of_another_epoch_gives_the_row_no_grace(world: World, conn: sqlite3.Connection) -> None:
    world.runtime("rail:A")  # epoch 1, alive until T0 + 3 s
    in_flight(world, conn, epoch=0, lease_expires_at=T0 + 1000)  # written under an earlier worker's epoch
    world.clock.ms = T0 + 2000
    assert world.reconciler().sweep() == 1
    assert world.intent().state is State.UNKNOWN


def test_a_live_rail_worker_of_the_rows_epoch_gets_one_more_ttl(world: World, conn: sqlite3.Connection) -> None:
    a = world.runtime("rail:A")
    in_flight(world, conn, epoch=1, lease_expires_at=T0 + 1000)  # abandoned at T0 + 2 s, T0 + 5 s with grace
    world.clock.ms = T0 + 2000
    assert a.lease is not None
    with transaction(conn):
        leases.heartbeat(conn, a.lease, now=world.clock(), ttl_ms=world.settings.lease_ttl_ms)
    assert world.reconciler().sweep() == 0
    world.clock.ms = T0 + 4999
    assert world.reconciler().sweep() == 0
    world.clock.ms = T0 + 5000
    assert world.reconciler()._expire_abandoned(world.clock()) == 1


def test_a_row_not_yet_abandoned_does_not_stop_the_sweep_of_the_rows_after_it(world: World,
                                                                              conn: sqlite3.Connection) -> None:
    world.authorized(SETTLEMENT, sik=A)
    in_flight(world, conn, sik=B, lease_expires_at=T0 + 1000)  # abandoned at T0 + 2 s
    with transaction(conn):
        intents.start_attempt(conn, MERCHANT, A, now=world.clock(), lease_owner="rail:A", lease_epoch=1,
                              lease_expires_at=T0 + 2500, request={})  # fmt: skip
    world.clock.ms = T0 + 3000  # both row leases are over; only B's call deadline is
    mark = audit_mark(world)
    assert world.reconciler()._expire_abandoned(world.clock()) == 1
    assert audit_since(world, mark) == [_expired(B, T0 + 1000, at=T0 + 3000)]
    assert (world.intent(A).state, world.intent(B).state) == (State.IN_FLIGHT, State.UNKNOWN)


# -- abandoned RECONCILING rows ----------------------------------------------------------------------------------------


def _before_each_transaction(monkeypatch: pytest.MonkeyPatch, hook: Callable[[], None]) -> None:
    """Runs *hook* once, between the sweep's read of the rows and its first transaction: another process's write."""
    real = reconciler_module.transaction
    pending = [hook]

    @contextlib.contextmanager
    def hooked(conn: sqlite3.Connection) -> Iterator[None]:
        if pending:
            pending.pop()()
        with real(conn):
            yield

    monkeypatch.setattr(reconciler_module, "transaction", hooked)


def _reconciling(world: World, conn: sqlite3.Connection, sik: str, owner: str, lease_until: int) -> None:
    with transaction(conn):
        intents.begin_reconcile(conn, MERCHANT, sik, now=world.clock(), owner=owner, lease_expires_at=lease_until)


def test_a_dead_reconcilers_row_goes_back_to_unknown(world: World, conn: sqlite3.Connection) -> None:
    unknown(world, conn)
    world.clock.ms = T0 + 4500
    _reconciling(world, conn, SIK, "reconciler:9", T0 + 7500)
    world.clock.ms = T0 + 7500
    assert world.reconciler().sweep() == 0, "its lease runs through its last millisecond"
    world.clock.ms = T0 + 7501
    mark = audit_mark(world)
    assert _reconciler(world)._expire_abandoned(world.clock()) == 1
    assert audit_since(world, mark) == [_expired(SIK, T0 + 7500, frm="RECONCILING", event="RECONCILE_INCONCLUSIVE",
                                                 at=T0 + 7501)]  # fmt: skip


@pytest.mark.parametrize("lease_for", [0, 3000])
def test_a_reconcile_lease_taken_again_since_the_sweep_read_the_row_is_left_alone(
        world: World, conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch, lease_for: int) -> None:  # fmt: skip
    unknown(world, conn)
    world.clock.ms = T0 + 4500
    _reconciling(world, conn, SIK, "reconciler:9", T0 + 7500)
    world.clock.ms = T0 + 8000

    def another_sweep_and_pass() -> None:
        with transaction(conn):
            intents.transition(conn, MERCHANT, SIK, Event.RECONCILE_INCONCLUSIVE, now=world.clock())
        _reconciling(world, conn, SIK, "reconciler:2", world.clock() + lease_for)

    _before_each_transaction(monkeypatch, another_sweep_and_pass)
    assert _reconciler(world)._expire_abandoned(world.clock()) == 0
    intent = world.intent()
    assert (intent.state, intent.lease_owner, intent.lease_expires_at) == (
        State.RECONCILING, "reconciler:2", T0 + 8000 + lease_for)


def test_a_row_settled_since_the_sweep_read_it_does_not_stop_the_sweep(world: World, conn: sqlite3.Connection,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    in_flight(world, conn, sik=A, lease_expires_at=T0 + 1000)  # read first: the older of the two
    world.clock.advance(1)
    in_flight(world, conn, sik=B, lease_expires_at=T0 + 1000)
    world.clock.ms = T0 + 6000

    def a_worker_records_its_answer_meanwhile() -> None:
        with transaction(conn):
            intents.transition(conn, MERCHANT, A, Event.RAIL_AMBIGUOUS, now=world.clock())

    _before_each_transaction(monkeypatch, a_worker_records_its_answer_meanwhile)
    mark = audit_mark(world)
    assert _reconciler(world)._expire_abandoned(world.clock()) == 1
    assert audit_since(world, mark)[1:] == [_expired(B, T0 + 1000, at=T0 + 6000)]


# -- stranded AUTHORIZED intents ---------------------------------------------------------------------------------------


def test_an_authorized_intent_older_than_five_seconds_is_handed_to_the_rail_worker(world: World, hub: Hub) -> None:
    world.authorized(SETTLEMENT)
    world.clock.ms = T0 + 5000
    assert _reconciler(world, hub).sweep() == 0
    assert hub.jobs == []
    world.clock.ms = T0 + 5001
    assert _reconciler(world, hub).sweep() == 1
    assert hub.jobs == [job()]
    assert hub.sets == [(("interlock:reconciler:stranded:" + SIK, "1"), {"nx": True, "px": 5000})]


def test_a_stranded_intent_is_handed_over_once_per_interval_not_once_per_sweep(world: World, hub: Hub) -> None:
    world.authorized(SETTLEMENT, sik=A)
    world.authorized(SETTLEMENT, sik=B)
    hub.keys["interlock:reconciler:stranded:" + A] = "1"  # another reconciler handed A over a moment ago
    world.clock.ms = T0 + 5001
    assert _reconciler(world, hub).sweep() == 1
    assert _reconciler(world, hub).sweep() == 0
    assert hub.jobs == [job(B)]


def test_every_stranded_intent_is_counted(world: World, hub: Hub) -> None:
    world.authorized(SETTLEMENT, sik=A)
    world.authorized(SETTLEMENT, sik=B)
    world.clock.ms = T0 + 5001
    assert _reconciler(world, hub).sweep() == 2
    assert sorted(hub.jobs) == [job(A), job(B)]
    assert _reconciler(world, None).sweep() == 2, "without Redis nothing is claimed (and nothing enqueued)"


def test_with_redis_down_a_stranded_intent_is_still_tried_every_sweep(world: World, hub: Hub) -> None:
    world.authorized(SETTLEMENT)
    world.clock.ms = T0 + 5001
    hub.down = True
    assert _reconciler(world, hub).sweep() == 1
    assert _reconciler(world, hub).sweep() == 1
    assert len(hub.sets) == 2 and hub.jobs == []


def test_the_handover_goes_to_the_queue_of_the_shard_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world = make_world(tmp_path, monkeypatch)
    world.settings = world.settings.model_copy(update={"shard": "s7"})
    hub = Hub()
    hub.install(monkeypatch)
    world.authorized(SETTLEMENT)
    world.clock.ms = T0 + 5001
    assert _reconciler(world, hub).sweep() == 1
    assert hub.jobs == [job(queue="rail:s7")]


def test_every_abandoned_row_is_counted(world: World, conn: sqlite3.Connection) -> None:
    in_flight(world, conn, sik=A)
    in_flight(world, conn, sik=B)
    world.clock.ms = T0 + 4000
    assert world.reconciler()._expire_abandoned(world.clock()) == 2
    assert (world.intent(A).state, world.intent(B).state) == (State.UNKNOWN, State.UNKNOWN)
