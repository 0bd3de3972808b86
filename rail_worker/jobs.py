"""RQ entry points on the rail queue (interlock.queues.ADMIT_JOB / EXECUTE_JOB).

The runtime and its dispatcher are installed by `interlock rail-worker` at boot, after it took the lease;
a job that finds none refuses to run rather than build one without the lease. A job ends once its call
is dispatched: the ledger, not the queue, owns the outcome (ADR 0007, ADR 0011).
"""

from __future__ import annotations

import logging

from interlock.messages import Decision, trace_now
from rail_worker.dispatch import Dispatcher

logger = logging.getLogger(__name__)

_dispatcher: Dispatcher | None = None


def install(dispatcher: Dispatcher | None) -> None:
    global _dispatcher
    _dispatcher = dispatcher


def dispatcher() -> Dispatcher:
    if _dispatcher is None or _dispatcher.rt.lease is None:
        raise RuntimeError("rail jobs run only inside `interlock rail-worker`, after it took the lease")
    return _dispatcher


def handle_decision(decision_json: str) -> str:
    dequeued = trace_now()
    decision: Decision = Decision.from_json(decision_json)
    decision.trace["rail_dequeued"] = dequeued
    return dispatcher().handle_decision(decision)


def execute_intent(merchant_id: str, sik: str, request_id: str | None = None) -> str:
    return dispatcher().execute(merchant_id, sik, request_id)
