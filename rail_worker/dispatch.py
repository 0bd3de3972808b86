"""Many money calls in flight from the one leased rail worker (SPEC §8 step 6, ADR 0011).

The RQ job runs in the worker's main thread: it takes a call slot, admits the Decision and starts the
attempt (each a committed transaction, through the group-commit writer), then hands the call to a pool
thread and finishes — the ledger, not the queue, owns the outcome from there. The pool thread sends the
request inside its send window (ADR 0005), records the answer (fenced) and publishes the Outcome. At most
INTERLOCK_RAIL_CONCURRENCY calls are out at once; a job waits for a free slot *before* it writes IN_FLIGHT,
so no row's lease runs down in a queue. With concurrency 1 everything runs inline in the job, as it did
before there was a pool.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import redis

from interlock.messages import Decision, Outcome, Trace, trace_now
from interlock.outcomes import publish
from rail_worker.admit import admit
from rail_worker.execute import Started, begin_attempt, complete
from rail_worker.runtime import RailRuntime

logger = logging.getLogger(__name__)

DISPATCHED = "DISPATCHED"


class Dispatcher:
    def __init__(self, rt: RailRuntime, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.rt = rt
        self.concurrency = concurrency
        self._slots = threading.BoundedSemaphore(concurrency)
        self._pool = (ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="rail-call")
                      if concurrency > 1 else None)  # fmt: skip
        self._lock = threading.Lock()
        self.in_flight = 0

    def handle_decision(self, decision: Decision) -> str:
        """Admit a Decision and, when it authorizes an intent, dispatch its call. Returns what happened."""
        self._slots.acquire()
        handed_off = False
        try:
            admission = admit(self.rt, decision)
            trace: Trace = {**decision.trace, "admitted": trace_now()}
            if admission.execute is None:
                self._publish(admission.outcome, trace)
                return admission.outcome.state if admission.outcome else "NO_OUTCOME"
            intent = admission.execute
            begun = begin_attempt(self.rt, intent.merchant_id, intent.sik, request_id=decision.request_id,
                                  trace=trace)  # fmt: skip
            if not isinstance(begun, Started):
                self._publish(begun, trace)
                return begun.state if begun else "NO_OUTCOME"
            handed_off = self._dispatch(begun)
            return DISPATCHED if handed_off else "DONE"
        finally:
            if not handed_off:
                self._slots.release()

    def execute(self, merchant_id: str, sik: str, request_id: str | None) -> str:
        """An execute job (a retry the reconciler authorized, a released hold, a stranded intent)."""
        self._slots.acquire()
        handed_off = False
        try:
            begun = begin_attempt(self.rt, merchant_id, sik, request_id=request_id)
            if not isinstance(begun, Started):
                self._publish(begun, {})
                return begun.state if begun else "NO_OUTCOME"
            handed_off = self._dispatch(begun)
            return DISPATCHED if handed_off else "DONE"
        finally:
            if not handed_off:
                self._slots.release()

    def drain(self) -> None:
        """Wait for every call already out to be recorded (or fenced), then stop the pool."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _dispatch(self, started: Started) -> bool:
        """Run the call inline (concurrency 1: False, the caller keeps the slot) or on the pool (True)."""
        if self._pool is None:
            self._complete(started, release=False)
            return False
        self._pool.submit(self._complete, started, True)
        return True

    def _complete(self, started: Started, release: bool) -> None:
        with self._lock:
            self.in_flight += 1
        try:
            self._publish(complete(self.rt, started), started.trace)
        except Exception:  # noqa: BLE001 - the IN_FLIGHT row stays: the reconciler settles it by stamp
            logger.exception("attempt %d of %s ended without a record", started.intent.attempt_seq,
                             started.intent.sik)  # fmt: skip
        finally:
            with self._lock:
                self.in_flight -= 1
            if release:
                self._slots.release()

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
