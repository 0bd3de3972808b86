"""RQ entry points on the rail queue (interlock.queues.ADMIT_JOB / EXECUTE_JOB).

The runtime is installed by `interlock rail-worker` at boot, after it took the lease; a job that
finds no runtime refuses to run rather than build one without the lease.
"""

from __future__ import annotations

import logging

import redis

from interlock.messages import Decision, Outcome
from interlock.outcomes import publish
from rail_worker.admit import admit
from rail_worker.execute import execute
from rail_worker.runtime import RailRuntime

logger = logging.getLogger(__name__)

_runtime: RailRuntime | None = None


def install_runtime(runtime: RailRuntime | None) -> None:
    global _runtime
    _runtime = runtime


def runtime() -> RailRuntime:
    if _runtime is None or _runtime.lease is None:
        raise RuntimeError("rail jobs run only inside `interlock rail-worker`, after it took the lease")
    return _runtime


def handle_decision(decision_json: str) -> str:
    rt = runtime()
    decision = Decision.from_json(decision_json)
    admission = admit(rt, decision)
    outcome = admission.outcome
    if admission.execute is not None:
        outcome = execute(rt, admission.execute.merchant_id, admission.execute.sik, request_id=decision.request_id)
    _publish(rt, outcome)
    return outcome.state if outcome else "NO_OUTCOME"


def execute_intent(merchant_id: str, sik: str, request_id: str | None = None) -> str:
    rt = runtime()
    outcome = execute(rt, merchant_id, sik, request_id=request_id)
    _publish(rt, outcome)
    return outcome.state if outcome else "NO_OUTCOME"


def _publish(rt: RailRuntime, outcome: Outcome | None) -> None:
    if outcome is None or outcome.request_id is None:
        return
    try:
        publish(rt.redis, outcome)
    except redis.RedisError as exc:
        # The ledger holds the answer; the agent's retry of the same call reads it from there.
        logger.warning("could not publish the outcome of %s: %s", outcome.request_id, exc)
