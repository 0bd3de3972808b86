"""The rail's answer is retried until it is durable, fenced or not, and a worker holding one it could not write
sends nothing new (issue 25 item 2, ADR 0005). In-process over a real SQLite ledger (one transaction per write and
the group-commit writer), with the scripted rail and the injectable clock of tests/engine/send_world.py; a write
failure is SQLite's "database or disk is full" raised in place of the write (the repro script pins the ledger's
max_page_count for a real SQLITE_FULL)."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from interlock.errors import IllegalTransition, StaleLease
from ledger import leases
from ledger.db import open_ledger
from ledger.states import State
from ops.status_cli import collect
from rail_worker import execute as execute_module
from rail_worker import lease as lease_module
from rail_worker.execute import begin_attempt, complete, execute
from rail_worker.runtime import RailRuntime
from tests.engine import send_world
from tests.engine.send_world import SETTLEMENT, World
from tests.mandates import MERCHANT

SIK, SIK2, SIK3 = "S" * 32, "T" * 32, "U" * 32
world = send_world.world  # the fixture: one world per commit mode


def _no_sleep(monkeypatch: pytest.MonkeyPatch, world: World, advance_ms: int = 0) -> None:
    """The retry's pauses take no real time; each one moves the ledger's clock on *advance_ms*."""

    class Time:
        monotonic = staticmethod(execute_module.clock.monotonic)

        @staticmethod
        def sleep(seconds: float) -> None:
            world.clock.advance(advance_ms)

    monkeypatch.setattr(execute_module, "clock", Time)


def _fail_writes(rt: RailRuntime, count: int, on_failure: Callable[[int], None] | None = None, *,
                 after_the_fence: bool = False) -> list[bool]:
    """Once armed (by the rail call, or when the fence refuses a write if *after_the_fence*), the next *count*
    writes meet a full disk; each failure first runs *on_failure(n)*, whose own writes go through. Returns whether
    the worker held an unrecorded answer at each failure."""
    real = rt.write
    state: dict[str, Any] = {"armed": False, "left": count, "inside": False, "n": 0}
    seen: list[bool] = []

    def write(fn: Callable[[sqlite3.Connection], Any]) -> Any:
        if not state["armed"] or state["inside"] or state["left"] == 0:
            try:
                return real(fn)
            except (StaleLease, IllegalTransition):
                state["armed"] = state["armed"] or after_the_fence
                raise
        state["left"] -= 1
        state["n"] += 1
        state["inside"] = True
        try:
            if on_failure is not None:
                on_failure(state["n"])
        finally:
            state["inside"] = False
        seen.append(rt.unrecorded.is_set())
        raise sqlite3.OperationalError("database or disk is full")

    rt.write = write  # type: ignore[method-assign]
    rt._test_fail_state = state  # type: ignore[attr-defined]
    return seen


def _arm_after_the_call(world: World, rt: RailRuntime) -> None:
    world.rail.during_call = lambda: rt._test_fail_state.update(armed=True)  # type: ignore[attr-defined]


def test_an_answer_failing_to_write_past_the_abandonment_bound_and_the_lease_is_kept_not_dropped(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The rail applied the settlement; its answer then meets a full disk for 20 tries while the ledger's clock runs
    # on past the row lease + deadline + reconcile delay, and the lease is lost on the way. main gave up (None).
    world.authorized(SETTLEMENT)
    a = world.runtime("rail:A")
    _no_sleep(monkeypatch, world, advance_ms=500)
    seen = _fail_writes(a, 20, lambda n: a.lease_lost.set() if n == 3 else None)
    _arm_after_the_call(world, a)
    execute(a, MERCHANT, SIK, request_id=None)
    intent = world.intent()
    assert (intent.state, intent.rail_entity_id) == (State.APPLIED, world.rail.stamped(SIK)[0])
    assert world.attempts() == [(1, "APPLIED")]
    assert len(world.rail.calls) == 1
    assert seen[1:] == [True] * 19, "held as unrecorded from the first failure on"
    assert not a.unrecorded.is_set(), "released once durable"
    critical = [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL]
    assert any("STOPS SENDING" in m for m in critical) and any("still not durable" in m for m in critical)


def test_a_worker_holding_an_unrecorded_answer_starts_and_sends_nothing_new(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.authorized(SETTLEMENT, sik=SIK2, amount=100)
    world.authorized(SETTLEMENT, sik=SIK3, amount=200)
    a = world.runtime("rail:A")
    started2 = begin_attempt(a, MERCHANT, SIK2, request_id=None)  # committed IN_FLIGHT, its request not yet out
    world.authorized(SETTLEMENT)  # SIK, the call whose answer cannot be written at first
    _no_sleep(monkeypatch, world)
    meanwhile: dict[str, Any] = {}

    def while_the_answer_is_held(n: int) -> None:
        if n == 2:
            meanwhile["third"] = execute(a, MERCHANT, SIK3, request_id=None)
            meanwhile["second"] = complete(a, started2)  # type: ignore[arg-type]

    _fail_writes(a, 3, while_the_answer_is_held)
    _arm_after_the_call(world, a)
    execute(a, MERCHANT, SIK, request_id=None)
    assert world.intent(SIK).state is State.APPLIED
    assert len(world.rail.calls) == 1, "nothing else left while the answer was held"
    assert world.intent(SIK3).state is State.AUTHORIZED, "not started"
    second = world.intent(SIK2)
    assert (second.state, second.reason_code) == (State.UNKNOWN, "RAIL_NOT_SENT_STALE")
    assert world.attempts(SIK2) == [(1, "NOT_SENT")]
    # Durable: sending resumes.
    execute(a, MERCHANT, SIK3, request_id=None)
    assert world.intent(SIK3).state is State.APPLIED and len(world.rail.calls) == 2


def test_a_fenced_applied_answer_survives_a_full_disk_and_the_authorized_retry_sends_nothing(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fenced_evidence_dropped.py: A stalls 3 TTLs with its settlement out, B takes the lease, the reconciler (the list
    # lagging) re-authorizes a retry; A's fenced answer then meets a full disk. main kept it with one write and
    # dropped it, and B's retry paid again.
    world.authorized(SETTLEMENT)
    a = world.runtime("rail:A")
    _no_sleep(monkeypatch, world)
    conn = open_ledger(world.path)
    full = {"on": False}

    def disk_full(n: int) -> None:
        full["on"] = True

    def worker_a_looks_dead() -> None:
        world.watch()
        world.clock.advance(3 * world.settings.lease_ttl_ms)
        lease_module.boot(world.runtime("rail:B", take_lease=False))
        world.rail.listed = False
        world.reconciler().sweep()
        world.rail.listed = True
        assert world.intent().state is State.AUTHORIZED

    _fail_writes(a, 5, disk_full, after_the_fence=True)
    world.rail.during_call = worker_a_looks_dead
    execute(a, MERCHANT, SIK, request_id=None)
    assert full["on"], "the fenced answer's write did fail"
    b = world.runtime("rail:B", take_lease=False)
    b.lease = leases.get_lease(conn, leases.RAIL_WORKER_LEASE)
    execute(b, MERCHANT, SIK, request_id=None)
    assert len(world.rail.calls) == 1, "one settlement for one SIK"
    intent = world.intent()
    assert (intent.state, intent.rail_entity_id) == (State.APPLIED, world.rail.stamped(SIK)[0])
    assert world.attempts() == [(1, "FENCED_APPLIED")]


def test_status_shows_a_worker_holding_an_unrecorded_answer_until_it_is_written(
    world: World, monkeypatch: pytest.MonkeyPatch, redis_server: Any, redis_client: Any
) -> None:
    # The ledger is what cannot be written, so the worker mirrors what it holds to its Redis for `interlock status`.
    world.authorized(SETTLEMENT)
    a = world.runtime("rail:A")
    a.redis = redis_client
    _no_sleep(monkeypatch, world)
    during: list[Any] = []
    _fail_writes(a, 2, lambda n: during.append(collect(world.path, redis_server.url, world.settings.shard)))
    _arm_after_the_call(world, a)
    execute(a, MERCHANT, SIK, request_id=None)
    held = during[1]["unrecorded_rail_answers"]
    assert [(h["sik"], h["attempt_seq"], h["outcome"], h["worker"]) for h in held] == [(SIK, 1, "APPLIED", "rail:A")]
    assert held[0]["rail_entity_id"] == world.rail.stamped(SIK)[0]
    assert collect(world.path, redis_server.url, world.settings.shard)["unrecorded_rail_answers"] == []
    assert world.intent().state is State.APPLIED
