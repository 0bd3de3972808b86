"""Who answers the repeats of a call that is out at the rail (rail_worker/dispatch.py, ADR 0011): the claim on an
intent belongs to the call that executes. A repeat is answered with the recorded outcome — never IN_FLIGHT from a
claim it took itself — and always answered, also when the executing call ends without a record or the ledger
cannot be read to answer it. In-process over a real SQLite ledger and the group-commit writer, with the scripted
rail of tests/engine/send_world.py; only the scheduling of the pool threads is forced (events, no sleeps)."""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock.messages import Decision, IntentTerms, Outcome, Verdict
from ledger.db import open_ledger
from rail_worker import dispatch
from rail_worker.dispatch import Dispatcher
from rail_worker.runtime import RailRuntime
from rail_worker.writer import LedgerWriter
from tests.engine.send_world import REFUND, World, make_world
from tests.mandates import AGENT, MERCHANT

SIK = "R" * 32
WAIT_S = 10.0


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    made = make_world(tmp_path, monkeypatch, group_commit=True)
    monkeypatch.setattr("rail_worker.admit.now_ms", made.clock)
    yield made
    made.close()


def _decision(world: World, request_id: str) -> Decision:
    terms = IntentTerms(merchant_id=MERCHANT, tool=REFUND, subject="pay_CLAIM0000001", amount_minor=1000,
                        currency="INR")  # fmt: skip
    return Decision(request_id=request_id, agent_id=AGENT, merchant_id=MERCHANT, tool=REFUND, sik=SIK, terms=terms,
                    params={"amount": 1000, "notes": {}}, params_hash="ph", verdict=Verdict.ALLOW,
                    reason_code="ALLOWED", results=[], mandate_id=world.mandate.mandate_id,
                    mandate_hash=world.mandate.mandate_hash, decided_at_ms=world.clock())  # fmt: skip


class Pool:
    """A dispatcher of 4 call slots whose rail holds each money call (`out` set) until `release` is set, and
    which records what each pool thread's admission returned."""

    def __init__(self, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rt: RailRuntime = world.runtime()
        if self.rt.writer is None:
            self.rt.writer = LedgerWriter(self.rt.ledger).start()
            world.writers.append(self.rt.writer)
        self.out, self.release = threading.Event(), threading.Event()
        world.rail.hold = lambda: (self.out.set(), self.release.wait(WAIT_S))  # type: ignore[func-returns-value]
        self.dispatcher = Dispatcher(self.rt, 4)
        self.returned: dict[str, str] = {}
        self.done: dict[str, threading.Event] = {}
        real = self.dispatcher._admit

        def recorded(decision: Decision, slot: Any) -> str:
            try:
                result = real(decision, slot)
                self.returned[decision.request_id] = result
                return result
            finally:
                self.done[decision.request_id].set()

        monkeypatch.setattr(self.dispatcher, "_admit", recorded)

    def submit(self, decision: Decision) -> None:
        self.done[decision.request_id] = threading.Event()
        assert self.dispatcher.handle_decision(decision) == dispatch.DISPATCHED

    def answers(self, request_id: str) -> list[tuple[str, bool]]:
        published: list[Outcome] = self.rt.redis.published  # type: ignore[attr-defined]
        return [(o.state, o.replayed) for o in published if o.request_id == request_id]

    def finish(self) -> None:
        self.release.set()
        self.dispatcher.drain()


def _original_admitted_first(monkeypatch: pytest.MonkeyPatch, pool: Pool, repeat: str) -> None:
    """The repro's interleaving: the repeat's pool thread enters the intent's claim first and is descheduled before
    its admission reaches the writer; the original's admission commits first."""
    real_admit = dispatch.admit
    original_admitted = threading.Event()

    def entered(sik: str) -> bool:
        return any(key[1] == sik for key in list(pool.dispatcher._calls))

    def admit(rt: RailRuntime, decision: Decision) -> Any:
        if decision.request_id == repeat:
            assert original_admitted.wait(WAIT_S)
            return real_admit(rt, decision)
        deadline = time.monotonic() + WAIT_S
        while not entered(decision.sik or "") and time.monotonic() < deadline:
            time.sleep(0.001)
        try:
            return real_admit(rt, decision)
        finally:
            original_admitted.set()

    monkeypatch.setattr(dispatch, "admit", admit)


def test_a_repeat_whose_thread_entered_first_is_answered_with_the_recorded_outcome_not_in_flight(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = Pool(world, monkeypatch)
    _original_admitted_first(monkeypatch, pool, "req-repeat")
    try:
        pool.submit(_decision(world, "req-repeat"))  # the agent's identical call, a moment earlier in the queue
        pool.submit(_decision(world, "req-original"))
        assert pool.out.wait(WAIT_S) and pool.done["req-repeat"].wait(WAIT_S)
        # The repeat's admission is over while the call is still out: it waits for the call's record, it is not
        # told IN_FLIGHT (on f0edd53 it waited on the claim it took itself and answered itself at once).
        assert pool.returned["req-repeat"] == "WAITING"
        assert pool.answers("req-repeat") == []
    finally:
        pool.finish()
    assert pool.answers("req-original") == [("APPLIED", False)]
    assert pool.answers("req-repeat") == [("APPLIED", True)]
    assert len(world.rail.calls) == 1 and pool.dispatcher._calls == {}


def test_every_repeat_during_the_call_waits_for_its_record(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    # On f0edd53, once the first repeat had released the claim, each further repeat claimed the free key and was
    # answered IN_FLIGHT too.
    pool = Pool(world, monkeypatch)
    _original_admitted_first(monkeypatch, pool, "req-repeat")
    try:
        pool.submit(_decision(world, "req-repeat"))
        pool.submit(_decision(world, "req-original"))
        assert pool.out.wait(WAIT_S) and pool.done["req-repeat"].wait(WAIT_S)
        for n in range(3):
            pool.submit(_decision(world, f"req-again-{n}"))
            assert pool.done[f"req-again-{n}"].wait(WAIT_S)
            assert pool.returned[f"req-again-{n}"] == "WAITING" and pool.answers(f"req-again-{n}") == []
    finally:
        pool.finish()
    for request_id in ("req-repeat", "req-again-0", "req-again-1", "req-again-2"):
        assert pool.answers(request_id) == [("APPLIED", True)], request_id
    assert len(world.rail.calls) == 1


def _repeat_waiting_on_the_call(world: World, pool: Pool) -> None:
    pool.submit(_decision(world, "req-original"))
    assert pool.out.wait(WAIT_S)
    pool.submit(_decision(world, "req-repeat"))
    assert pool.done["req-repeat"].wait(WAIT_S) and pool.returned["req-repeat"] == "WAITING"


def test_a_waiting_repeat_is_answered_when_the_executing_call_ends_without_a_record(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = Pool(world, monkeypatch)

    def record_fails(rt: RailRuntime, begun: Any) -> Outcome:
        pool.out.set()  # the request is out (IN_FLIGHT committed) ...
        assert pool.release.wait(WAIT_S)
        raise OSError("disk I/O error")  # ... and its answer could not be written: the row stays IN_FLIGHT

    monkeypatch.setattr(dispatch, "complete", record_fails)
    try:
        _repeat_waiting_on_the_call(world, pool)
    finally:
        pool.finish()
    assert pool.answers("req-repeat") == [("IN_FLIGHT", True)], "answered with what the ledger holds, not lost"
    assert pool.dispatcher._calls == {}


def test_a_waiting_repeat_is_answered_with_its_own_admission_when_the_ledger_cannot_be_read(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = Pool(world, monkeypatch)
    try:
        _repeat_waiting_on_the_call(world, pool)

        def unreadable(*args: object) -> None:
            raise OSError("disk I/O error")

        monkeypatch.setattr(dispatch, "intents", types.SimpleNamespace(get_intent=unreadable))
    finally:
        pool.finish()
    assert pool.answers("req-original") == [("APPLIED", False)]
    assert pool.answers("req-repeat") == [("IN_FLIGHT", True)], "still told to repeat the call, not left unanswered"



def test_the_rail_worker_stamps_its_job_start_the_admitting_thread_and_each_step_of_the_call(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The perf bench's breakdown of the rail hop (bench.perf_trace): queue, call slot and hand-off, admission."""
    from interlock.messages import trace_now
    from rail_worker import jobs

    pool = Pool(world, monkeypatch)
    jobs.install(pool.dispatcher)
    try:
        decision = _decision(world, "req-trace")
        sent = trace_now()
        pool.done["req-trace"] = threading.Event()
        assert jobs.handle_decision(decision.model_copy(update={"trace": {"decision_enqueued": sent}}).to_json()) \
            == dispatch.DISPATCHED
        assert pool.out.wait(WAIT_S)
        pool.finish()
    finally:
        jobs.install(None)
    published: list[Outcome] = pool.rt.redis.published  # type: ignore[attr-defined]
    [outcome] = [o for o in published if o.request_id == "req-trace"]
    order = ["decision_enqueued", "rail_dequeued", "admission_started", "admitted", "request_sent",
             "answer_received", "recorded"]  # fmt: skip
    assert [name for name in order if name in outcome.trace] == order
    stamps = [outcome.trace[name] for name in order]
    assert stamps == sorted(stamps), outcome.trace


def test_an_attempt_that_cannot_start_with_its_admission_starts_on_its_own(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The start inside the admission's transaction raises (a lease refused, say): it is rolled back alone, the
    # admission commits AUTHORIZED, and the pool thread starts the attempt in a transaction of its own.
    from interlock.errors import StaleLease
    from rail_worker import execute

    real_begin, calls = execute._begin, []

    def refused_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[3])
        if len(calls) == 1:
            raise StaleLease("the lease was refused while the admission was written")
        return real_begin(*args, **kwargs)

    monkeypatch.setattr(execute, "_begin", refused_once)
    pool = Pool(world, monkeypatch)
    world.rail.hold = None
    pool.submit(_decision(world, "req-original"))
    assert pool.done["req-original"].wait(WAIT_S)
    pool.finish()
    assert calls == [SIK, SIK] and pool.returned["req-original"] == "DONE"
    assert pool.answers("req-original") == [("APPLIED", False)] and len(world.rail.calls) == 1
    conn = open_ledger(world.path)
    attempts = conn.execute("SELECT COUNT(*) FROM intent_attempts WHERE sik = ?", (SIK,)).fetchone()[0]
    conn.close()
    assert attempts == 1  # the failed start left nothing behind: one attempt, the one that was sent
