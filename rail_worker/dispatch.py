"""Many money calls in flight from the one leased rail worker (SPEC §8 step 6, ADR 0011).

The RQ job runs in the worker's main thread: it takes a call slot and hands its Decision to a pool thread,
then finishes — the ledger, not the queue, owns the outcome from there. The pool thread admits the
Decision and, when it authorizes a call, starts the attempt in the same transaction (IN_FLIGHT committed
with the admission, through the group-commit writer, which folds the writes of many threads into one
commit), sends the request inside its send window (ADR 0005), records the answer (fenced) and publishes
the Outcome: two commits a call. At most
INTERLOCK_RAIL_CONCURRENCY calls are out at once; a job waits for a free slot *before* anything of its
call is written, so no row's lease runs down in a queue. With concurrency 1 everything runs inline in the
job, as it did before there was a pool.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

import redis

from interlock.messages import Decision, Outcome, Trace, trace_now
from interlock.outcomes import publish
from ledger import intents
from ledger.states import State
from ledger.views import outcome_from_intent
from rail_worker.admit import admit
from rail_worker.execute import Started, begin_attempt, complete
from rail_worker.runtime import RailRuntime

logger = logging.getLogger(__name__)

DISPATCHED = "DISPATCHED"


@dataclass
class _Slot:
    handed_off: bool = False  # a pool thread owns the slot now and releases it when the call is recorded


@dataclass
class _Claim:
    """Who may still answer the repeats of one intent's call. The claim belongs to the call that executes
    (ADR 0011): a thread only *enters* it before its admission (so a repeat admitted a moment after the
    admission that creates the intent, on another thread, still finds someone to wait for), and becomes its
    executor only once its own admission says it makes the call. Whoever leaves it last, with no call
    running, answers what is left waiting: no repeat is left unanswered, and none waits on itself."""

    admitting: int = 0  # threads whose admission on this intent has not yet said what they do
    executing: int = 0  # threads making this intent's call (one, unless an execute job is delivered twice)
    waiting: list[Outcome] = field(default_factory=list)  # repeats' answers as admitted, until the call is recorded


class Dispatcher:
    def __init__(self, rt: RailRuntime, concurrency: int, *, pool: Executor | None = None) -> None:
        """*pool* runs the calls when concurrency is above 1: a thread pool of that size unless given (the
        simulator gives one that runs each call as an actor of its own)."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.rt = rt
        rt.start_with_admission = True  # the calls its admissions authorize are made here: one commit, not two
        self.concurrency = concurrency
        self._slots = threading.BoundedSemaphore(concurrency)
        if concurrency == 1:
            pool = None
        elif pool is None:
            pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="rail-call")
        self._pool = pool
        self._lock = threading.Lock()
        # Intents whose call is being admitted or made on a pool thread now, and the repeats waiting for its answer.
        self._calls: dict[tuple[str, str], _Claim] = {}

    def handle_decision(self, decision: Decision) -> str:
        """Admit a Decision and, when it authorizes an intent, make its call. Inline at concurrency 1 (the job
        returns what happened); else on a pool thread, once a call slot is free: the job is done when its
        Decision is handed over, and the admissions of many pool threads share the writer's commits."""
        if self._pool is None:
            with self._slot():
                return self._admit(decision, None)
        with self._slot() as slot:
            slot.handed_off = True
            self._pool.submit(self._admit, decision, slot)
        return DISPATCHED

    def execute(self, merchant_id: str, sik: str, request_id: str | None) -> str:
        """An execute job (a retry the reconciler authorized, a released hold, a stranded intent)."""
        with self._slot() as slot:
            if self._pool is None:
                return self._start(merchant_id, sik, request_id, {}, None)
            slot.handed_off = True
            self._pool.submit(self._start, merchant_id, sik, request_id, {}, slot)
        return DISPATCHED

    def _admit(self, decision: Decision, slot: _Slot | None) -> str:
        """*slot* is the call slot a pool thread owns (None inline, where the job holds it): released here
        when no call follows, else by _run once the call is recorded.

        The thread enters the intent's claim *before* admission, so a repeat admitted on another thread a
        moment later waits for this call's recorded answer whichever of the two commits first; it leaves the
        claim as soon as its admission says what it does — the executor of the call, or not."""
        decision.trace["admission_started"] = trace_now()  # on the thread that admits: a pool thread, or inline
        key = (decision.merchant_id, decision.sik) if decision.sik is not None else None
        entered = key is not None
        if key is not None:
            self._enter(key)
        calls = False
        try:
            admission = admit(self.rt, decision)
            trace: Trace = {**decision.trace, "admitted": trace_now()}
            if admission.execute is None:
                outcome = admission.outcome
                pending = outcome if outcome is not None and self._pending_repeat(outcome) else None
                entered = False
                if self._after_admission(key, wait_with=pending):
                    return "WAITING"
                if pending is not None:
                    outcome = self._read_again(pending)  # the call it repeats may have been recorded meanwhile
                self._publish(outcome, trace)
                return outcome.state if outcome else "NO_OUTCOME"
            intent = admission.execute
            landing = (intent.merchant_id, intent.sik)  # a grace intent (ADR 0009) may not be the SIK entered
            entered = False
            self._after_admission(key, executes=landing)
            calls = True
            self._run(intent.merchant_id, intent.sik, decision.request_id, trace, slot, begun=admission.started)
            return "DONE"
        except Exception:
            if slot is None:
                raise  # inline: the job fails, and RQ keeps the traceback
            # Nothing admitted is lost: the agent's repeat of the call comes back to the ledger.
            logger.exception("admission of request %s failed", decision.request_id)
            return "FAILED"
        finally:
            if entered:
                self._after_admission(key)  # the admission raised: this thread makes no call and waits for none
            if not calls and slot is not None:
                self._slots.release()

    def _start(self, merchant_id: str, sik: str, request_id: str | None, trace: Trace,
               slot: _Slot | None) -> str:  # fmt: skip
        """Start the attempt, make the call, record and publish its answer. *slot* is the call slot this
        pool thread owns and releases when the call is recorded (None inline, where the job holds it)."""
        with self._lock:
            self._calls.setdefault((merchant_id, sik), _Claim()).executing += 1
        self._run(merchant_id, sik, request_id, trace, slot)
        return "DONE"

    def _enter(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._calls.setdefault(key, _Claim()).admitting += 1

    def _after_admission(self, key: tuple[str, str] | None, *, wait_with: Outcome | None = None,
                         executes: tuple[str, str] | None = None) -> bool:  # fmt: skip
        """Leave the claim entered on *key* now that the admission has said what this thread does: make the call
        of *executes* (its claim is this thread's from now), or — for a repeat answered *wait_with* while that
        call is still out — wait for its recorded answer. True when the repeat waits: it is answered by the
        call that executes, or by the last thread to leave the claim. Never waits on a claim only it holds."""
        with self._lock:
            if executes is not None:
                self._calls.setdefault(executes, _Claim()).executing += 1
            own = self._calls[key] if key is not None else None
            if own is not None:
                own.admitting -= 1
            waits = False
            if wait_with is not None:
                assert wait_with.intent is not None and wait_with.sik is not None
                target = self._calls.get((wait_with.intent.merchant_id, wait_with.sik))
                # Someone else is still on that claim (this thread has left it): the executing call, or a
                # thread whose admission — perhaps the one that created the intent — has not said yet.
                if target is not None and (target.executing > 0 or target.admitting > 0):
                    target.waiting.append(wait_with)
                    waits = True
            orphans: list[Outcome] = []
            if own is not None and own.admitting == 0 and own.executing == 0:
                assert key is not None
                del self._calls[key]
                orphans = own.waiting
        if orphans and key is not None:
            self._answer_repeats(key[0], key[1], orphans)
        return waits

    def _call_recorded(self, key: tuple[str, str]) -> None:
        """The executing call on *key* is recorded (or ended without a record): answer its repeats now."""
        with self._lock:
            claim = self._calls[key]
            claim.executing -= 1
            waiting: list[Outcome] = []
            if claim.executing == 0:
                waiting, claim.waiting = claim.waiting, []
                if claim.admitting == 0:
                    del self._calls[key]
        if waiting:
            self._answer_repeats(key[0], key[1], waiting)

    @staticmethod
    def _pending_repeat(outcome: Outcome) -> bool:
        return (outcome.request_id is not None and outcome.intent is not None
                and outcome.sik is not None and outcome.replayed
                and outcome.state in (State.AUTHORIZED, State.IN_FLIGHT))  # fmt: skip

    def _read_again(self, outcome: Outcome) -> Outcome:
        """No call holds the intent now: it may have been recorded between the admission's read and here."""
        assert outcome.intent is not None and outcome.sik is not None
        merchant_id, sik = outcome.intent.merchant_id, outcome.sik
        try:
            intent = self.rt.write(lambda conn: intents.get_intent(conn, merchant_id, sik))
        except Exception:  # noqa: BLE001 - the admission's answer stands; the agent's repeat reads the ledger
            logger.exception("could not read %s again for request %s", sik, outcome.request_id)
            return outcome
        if intent is None:
            return outcome
        return outcome_from_intent(intent, request_id=outcome.request_id, replayed=True)

    @contextmanager
    def _slot(self) -> Iterator[_Slot]:
        """A call slot, taken before anything is written; released here unless a pool thread took it over."""
        self._slots.acquire()
        slot = _Slot()
        try:
            yield slot
        finally:
            if not slot.handed_off:
                self._slots.release()

    def drain(self) -> None:
        """Wait for every call already out to be recorded (or fenced), then stop the pool."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _run(self, merchant_id: str, sik: str, request_id: str | None, trace: Trace, slot: _Slot | None, *,
             begun: Started | Outcome | None = None) -> None:  # fmt: skip
        """Make the call of an intent whose claim this thread holds as its executor, and give the claim up.
        *begun* is the attempt its admission already started (execute.begin_in); without one it starts here."""
        try:
            if begun is None:
                begun = begin_attempt(self.rt, merchant_id, sik, request_id=request_id, trace=trace)
            elif isinstance(begun, Started):
                begun.trace.update(trace)
            outcome = complete(self.rt, begun) if isinstance(begun, Started) else begun
            self._publish(outcome, trace)
        except Exception:  # noqa: BLE001 - an IN_FLIGHT row left behind is settled by the reconciler, by stamp
            logger.exception("the attempt on %s ended without a record", sik)
        finally:
            if slot is not None:
                self._slots.release()
            self._call_recorded((merchant_id, sik))

    def _answer_repeats(self, merchant_id: str, sik: str, waiting: list[Outcome]) -> None:
        """Answer repeats that waited for the call with what the ledger says now; when it cannot be read, each
        with its own admission's answer (not yet definite: the caller repeats the call), never with nothing."""
        try:
            intent = self.rt.write(lambda conn: intents.get_intent(conn, merchant_id, sik))
        except Exception:  # noqa: BLE001 - each still gets an answer, the one its admission gave
            logger.exception("could not read %s to answer %d repeats", sik, len(waiting))
            intent = None
        for outcome in waiting:
            if intent is not None:
                outcome = outcome_from_intent(intent, request_id=outcome.request_id, replayed=True)
            self._publish(outcome, {})

    def _publish(self, outcome: Outcome | None, trace: Trace) -> None:
        if outcome is None or outcome.request_id is None:
            return
        if trace and not outcome.trace:
            outcome = outcome.model_copy(update={"trace": trace})
        try:
            publish(self.rt.redis, outcome)
        except redis.RedisError as exc:
            # The ledger holds the answer; the agent's retry of the same call reads it from there.
            logger.warning("could not publish the outcome of %s: %s", outcome.request_id, exc)
