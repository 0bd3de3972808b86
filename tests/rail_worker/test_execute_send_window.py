"""The timing rules of rail_worker/execute.py (ADR 0005), placed exactly with a fake monotonic clock and the injectable
wall clock of tests/engine/send_world.py: the instant by which a request must have left (both leases less the call's
deadline), what a stalled or lease-less worker records instead of sending (how late it was, whether the lease was
lost), a lease lost just before the first byte, the during_call failpoint's timer joined before the answer is
recorded, and how often a failing outcome write is retried (until it is written: never left to the reconciler).
In-process, over a real SQLite ledger, with the scripted rail."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.db import open_ledger
from ledger.states import Event, State
from rail_worker import execute as execute_module
from rail_worker.classify import Classified
from rail_worker.execute import Started, execute
from rail_worker.runtime import RailRuntime
from tests.engine.send_world import SETTLEMENT, T0, World, make_world
from tests.mandates import MERCHANT

SIK = "S" * 32


class FakeTime:
    """Stands in for the `time` module execute.py reads: a monotonic clock that moves only when slept on."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    made = make_world(tmp_path, monkeypatch)
    yield made
    made.close()


def _last_transition(world: World) -> dict[str, Any]:
    row = open_ledger(world.path).execute(
        "SELECT payload_json FROM audit_log WHERE kind = 'TRANSITION' ORDER BY seq DESC LIMIT 1").fetchone()
    return dict(json.loads(row[0]))


def _started(world: World, rt: RailRuntime) -> Started:
    world.authorized(SETTLEMENT)
    started = execute_module.begin_attempt(rt, MERCHANT, SIK, request_id=None)
    assert isinstance(started, Started)
    return started


# -- the send deadline -------------------------------------------------------------------------------------------------


def test_the_send_deadline_is_the_earlier_lease_less_the_call_timeout_on_both_clocks(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = world.runtime()
    started = dataclasses.replace(_started(world, rt), leased_at=100.0)
    intent = started.intent
    monkeypatch.setattr(execute_module, "clock", FakeTime(100.0))
    timeout = world.settings.rail_timeout_ms
    assert rt.current_lease().expires_at == T0 + world.settings.lease_ttl_ms
    row_shorter = dataclasses.replace(started, intent=dataclasses.replace(intent, lease_expires_at=T0 + 2500))
    assert execute_module._send_by(rt, row_shorter) == (100.0 + (2500 - timeout) / 1000, T0 + 2500 - timeout)
    row_longer = dataclasses.replace(started, intent=dataclasses.replace(intent, lease_expires_at=T0 + 9000))
    worker_until = T0 + world.settings.lease_ttl_ms - timeout
    assert execute_module._send_by(rt, row_longer) == (100.0 + (worker_until - T0) / 1000, worker_until)


def test_a_backward_step_of_the_wall_clock_since_the_commit_does_not_stretch_the_send_deadline(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = world.runtime()
    started = dataclasses.replace(_started(world, rt), leased_at=100.0)  # committed at T0, monotonic 100 s
    monkeypatch.setattr(execute_module, "clock", FakeTime(100.5))  # half a second later ...
    world.clock.step(-5000)  # ... the wall clock is set five seconds back: the leases look 5 s longer
    ttl, timeout = world.settings.lease_ttl_ms, world.settings.rail_timeout_ms
    send_by, wall_until = execute_module._send_by(rt, started)
    assert send_by == 100.0 + (ttl - timeout) / 1000, "one TTL less the deadline after the row's lease began"
    assert wall_until == T0 + ttl - timeout


def test_a_worker_stalled_past_its_send_deadline_records_how_late_it_was_and_sends_nothing(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.authorized(SETTLEMENT)
    s = world.settings
    monkeypatch.setattr(execute_module, "clock", FakeTime(100.0))
    monkeypatch.setattr(execute_module, "failpoint", lambda name: world.clock.advance(
        s.lease_ttl_ms - s.rail_timeout_ms + 2000) if name == "rail.after_wal_before_call" else None)  # fmt: skip
    execute(world.runtime(), MERCHANT, SIK, request_id=None)
    assert world.rail.calls == []
    assert (world.intent().state, world.intent().reason_code) == (State.UNKNOWN, "RAIL_NOT_SENT_STALE")
    assert _last_transition(world)["detail"] == {"attempt_seq": 1, "late_ms": 2000, "lease_lost": False}
    assert world.attempts() == [(1, "NOT_SENT")]


def test_a_worker_whose_lease_was_lost_records_that_and_sends_nothing_however_early(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.authorized(SETTLEMENT)
    monkeypatch.setattr(execute_module, "clock", FakeTime(100.0))
    rt = world.runtime()
    rt.lease_lost.set()
    execute(rt, MERCHANT, SIK, request_id=None)
    assert world.rail.calls == []
    early_by = world.settings.lease_ttl_ms - world.settings.rail_timeout_ms
    assert _last_transition(world)["detail"] == {"attempt_seq": 1, "late_ms": -early_by, "lease_lost": True}


def test_a_lease_lost_after_the_stall_check_stops_the_request_at_the_rail_clients_first_byte(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.authorized(SETTLEMENT)
    rt = world.runtime()

    def the_heartbeat_finds_the_lease_gone(name: str, delay_ms: int) -> None:
        rt.lease_lost.set()  # after complete() judged the window open, before the client writes a byte

    monkeypatch.setattr(execute_module, "arm", the_heartbeat_finds_the_lease_gone)
    execute(rt, MERCHANT, SIK, request_id=None)
    assert world.rail.calls == [] and world.rail.entities == []
    assert (world.intent().state, world.intent().reason_code) == (State.UNKNOWN, "RAIL_NOT_SENT")
    assert world.attempts() == [(1, "NOT_SENT")]


def test_the_during_call_failpoint_fires_while_the_request_is_out_before_the_answer_is_recorded(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.authorized(SETTLEMENT)
    armed: list[tuple[str, int]] = []
    joined: list[State] = []

    class Timer:
        def join(self) -> None:
            joined.append(world.intent().state)

    def arm(name: str, delay_ms: int) -> Timer:
        armed.append((name, delay_ms))
        return Timer()

    monkeypatch.setattr(execute_module, "arm", arm)
    execute(world.runtime(), MERCHANT, SIK, request_id=None)
    assert armed == [("rail.during_call", execute_module.DURING_CALL_DELAY_MS)]
    assert joined == [State.IN_FLIGHT], "the timer is joined before the answer is recorded"
    assert world.intent().state is State.APPLIED


# -- an outcome write that fails ---------------------------------------------------------------------------------------


def _failing_writes(rt: RailRuntime, clock: FakeTime, failures: list[float]) -> list[int]:
    """rt.write fails once for each entry of *failures* (a disk I/O error that returns at that monotonic instant),
    then writes. Returns the list the write attempts are counted in."""
    real: Callable[[Callable[[sqlite3.Connection], Any]], Any] = rt.write
    calls: list[int] = []

    def write(fn: Callable[[sqlite3.Connection], Any]) -> Any:
        calls.append(1)
        if failures:
            clock.now = max(clock.now, failures.pop(0))
            raise sqlite3.OperationalError("disk I/O error")
        return real(fn)

    rt.write = write  # type: ignore[method-assign]
    return calls


def _applied(world: World) -> Classified:
    return Classified(Event.RAIL_APPLIED, "APPLIED", rail_entity_id="setlod_RETRIED000001", http_status=200)


def test_a_failing_outcome_write_is_retried_with_pauses_doubling_from_50_ms_to_1_s(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = world.runtime()
    started = _started(world, rt)
    clock = FakeTime(0.0)
    monkeypatch.setattr(execute_module, "clock", clock)
    calls = _failing_writes(rt, clock, [0.0] * 7)
    recorded = execute_module._record_until_written(rt, started.intent, _applied(world), started.lease_epoch, T0)
    assert recorded is not None and (recorded.state, recorded.rail_entity_id) == (State.APPLIED,
                                                                                 "setlod_RETRIED000001")
    assert clock.sleeps == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert len(calls) == 8


def test_a_write_failing_past_the_instant_anyone_may_act_on_its_absence_is_still_retried(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 25 item 2: the old code gave up after 3 lease TTLs and left the answer to a list read.
    rt = world.runtime()
    started = _started(world, rt)
    clock = FakeTime(0.0)
    monkeypatch.setattr(execute_module, "clock", clock)
    s = world.settings
    world.clock.advance(s.lease_ttl_ms + s.rail_timeout_ms + s.reconcile_min_delay_ms)  # the bound, exactly
    _failing_writes(rt, clock, [1000.0, 2000.0])
    recorded = execute_module._record_until_written(rt, started.intent, _applied(world), started.lease_epoch, T0)
    assert (recorded.state, recorded.rail_entity_id) == (State.APPLIED, "setlod_RETRIED000001")
    assert any(r.levelname == "CRITICAL" and "still not durable" in r.getMessage() for r in caplog.records)


def test_a_write_failing_after_the_lease_was_lost_is_still_retried(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 25 item 2: the old code dropped the answer at its first failure once the lease was lost.
    rt = world.runtime()
    started = _started(world, rt)
    clock = FakeTime(0.0)
    monkeypatch.setattr(execute_module, "clock", clock)
    calls = _failing_writes(rt, clock, [0.0])
    rt.lease_lost.set()
    recorded = execute_module._record_until_written(rt, started.intent, _applied(world), started.lease_epoch, T0)
    assert recorded.state is State.APPLIED and len(calls) == 2


def test_an_answer_for_an_attempt_re_leased_under_another_epoch_is_kept_as_evidence_only(world: World) -> None:
    # The outcome write is fenced on the epoch as well as the attempt_seq: a row re-leased under epoch 2 for the same
    # attempt (placed by hand here) is not the superseded worker's to record.
    world.authorized(SETTLEMENT)

    def a_successor_re_leases_the_row() -> None:
        conn = open_ledger(world.path)
        conn.execute("UPDATE intents SET lease_epoch = 2 WHERE sik = ?", (SIK,))
        conn.commit()

    world.rail.during_call = a_successor_re_leases_the_row
    assert execute(world.runtime(), MERCHANT, SIK, request_id="req-1") is None
    intent = world.intent()
    assert (intent.state, intent.lease_epoch, intent.rail_entity_id) == (State.IN_FLIGHT, 2, None)
    assert world.attempts() == [(1, "FENCED_APPLIED")]
