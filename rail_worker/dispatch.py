"""Many money calls in flight from the one leased rail worker (SPEC §8 step 6, ADR 0011).

The RQ job runs in the worker's main thread: it takes a call slot and hands its Decision to a pool thread,
then finishes — the ledger, not the queue, owns the outcome from there. The pool thread admits the
Decision (a committed transaction through the group-commit writer, which folds the admissions of many
threads into one commit), starts the attempt (IN_FLIGHT committed), sends the request inside its send
window (ADR 0005), records the answer (fenced) and publishes the Outcome. At most
INTERLOCK_RAIL_CONCURRENCY calls are out at once; a job waits for a free slot *before* anything of its
call is written, so no row's lease runs down in a queue. With concurrency 1 everything runs inline in the
job, as it did before there was a pool.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

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
        # Intents whose call is on a pool thread now -> request ids of repeats waiting for its recorded answer.
        self._calls: dict[tuple[str, str], list[str]] = {}

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

        The intent is claimed *before* admission: a repeat admitted on another thread a moment later then
        waits for this call's recorded answer, whichever of the two commits first."""
        key = (decision.merchant_id, decision.sik) if decision.sik is not None else None
        claimed = key is not None and self._claim(key)
        calls = False
        try:
            admission = admit(self.rt, decision)
            trace: Trace = {**decision.trace, "admitted": trace_now()}
            if admission.execute is None:
                outcome = admission.outcome
                if outcome is not None and self._pending_repeat(outcome):
                    if self._waits_for_its_call(outcome):
                        return "WAITING"
                    outcome = self._read_again(outcome)  # the call it repeats may have been recorded meanwhile
                self._publish(outcome, trace)
                return outcome.state if outcome else "NO_OUTCOME"
            calls = True
            intent = admission.execute
            landing = (intent.merchant_id, intent.sik)
            if landing != key:  # a grace intent (ADR 0009): the call claims it, not the SIK claimed above
                if claimed:
                    claimed = self._release(key)  # type: ignore[arg-type]
                return self._start(intent.merchant_id, intent.sik, decision.request_id, trace, slot)
            self._run(intent.merchant_id, intent.sik, decision.request_id, trace, slot, answers_repeats=claimed)
            return "DONE"
        except Exception:
            if slot is None:
                raise  # inline: the job fails, and RQ keeps the traceback
            # Nothing admitted is lost: the agent's repeat of the call comes back to the ledger.
            logger.exception("admission of request %s failed", decision.request_id)
            return "FAILED"
        finally:
            if not calls:
                if claimed:
                    self._release(key)  # type: ignore[arg-type]
                if slot is not None:
                    self._slots.release()

    def _start(self, merchant_id: str, sik: str, request_id: str | None, trace: Trace,
               slot: _Slot | None) -> str:  # fmt: skip
        """Start the attempt, make the call, record and publish its answer. *slot* is the call slot this
        pool thread owns and releases when the call is recorded (None inline, where the job holds it)."""
        claimed = self._claim((merchant_id, sik))  # only the call that claimed the intent answers its repeats
        self._run(merchant_id, sik, request_id, trace, slot, answers_repeats=claimed)
        return "DONE"

    def _claim(self, key: tuple[str, str]) -> bool:
        with self._lock:
            if key in self._calls:
                return False
            self._calls[key] = []
            return True

    def _release(self, key: tuple[str, str]) -> bool:
        """Give up a claim and answer the repeats that waited on it with what the ledger says now. Returns
        False: the caller holds no claim any more."""
        with self._lock:
            waiting = self._calls.pop(key, [])
        if waiting:
            self._answer_repeats(key[0], key[1], waiting)
        return False

    @staticmethod
    def _pending_repeat(outcome: Outcome) -> bool:
        return (outcome.request_id is not None and outcome.intent is not None
                and outcome.sik is not None and outcome.replayed
                and outcome.state in (State.AUTHORIZED, State.IN_FLIGHT))  # fmt: skip

    def _waits_for_its_call(self, outcome: Outcome) -> bool:
        """A repeat of a call that is on a pool thread right now is answered when that call is recorded, with
        its recorded state — not at once with IN_FLIGHT, which would only send the agent round again."""
        assert outcome.intent is not None and outcome.sik is not None and outcome.request_id is not None
        with self._lock:
            waiting = self._calls.get((outcome.intent.merchant_id, outcome.sik))
            if waiting is None:
                return False
            waiting.append(outcome.request_id)
        return True

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

    def _run(self, merchant_id: str, sik: str, request_id: str | None, trace: Trace, slot: _Slot | None,
             answers_repeats: bool) -> None:  # fmt: skip
        try:
            begun = begin_attempt(self.rt, merchant_id, sik, request_id=request_id, trace=trace)
            outcome = complete(self.rt, begun) if isinstance(begun, Started) else begun
            self._publish(outcome, trace)
        except Exception:  # noqa: BLE001 - an IN_FLIGHT row left behind is settled by the reconciler, by stamp
            logger.exception("the attempt on %s ended without a record", sik)
        finally:
            if slot is not None:
                self._slots.release()
            if answers_repeats:
                self._release((merchant_id, sik))

    def _answer_repeats(self, merchant_id: str, sik: str, request_ids: list[str]) -> None:
        try:
            intent = self.rt.write(lambda conn: intents.get_intent(conn, merchant_id, sik))
        except Exception:  # noqa: BLE001 - unanswered repeats are told IN_PROGRESS by the ingress and come again
            logger.exception("could not read %s to answer %d repeats", sik, len(request_ids))
            return
        if intent is None:
            return
        for request_id in request_ids:
            self._publish(outcome_from_intent(intent, request_id=request_id, replayed=True), {})

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
