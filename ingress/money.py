"""Money tools: validate, stamp the trusted identity, enqueue a Proposal on "gates", wait for the Outcome.

The ingress decides nothing about money. It refuses malformed calls before anything is recorded, and
answers with the first outcome the rail worker records for this call (SPEC §10) — or IN_PROGRESS with
RETRY_SAME_CALL past the deadline, which is safe because a repeat of the same call has the same SIK.

Each call carries a per-hop trace (interlock.messages.Trace): the ingress stamps `ingress_received` and
`enqueued` on the Proposal, the gate worker and the rail worker add theirs, and the Outcome brings them back.
Only while INTERLOCK_TRACE is set does the ingress keep the finished trace (stamped `ingress_answered`) on
the Redis list `queues.trace_key()` for the performance bench; the agent's result never carries it.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import redis
from mcp_types import CallToolResult
from pydantic import ValidationError

from ingress import results
from ingress.app import Caller, Ingress, ShardRoute
from interlock import outcomes
from interlock.arguments import OPERATION_REF_META_KEY, check_envelope, parse_money_call, parse_operation_ref
from interlock.clock import now_ms
from interlock.errors import InvalidInput
from interlock.failpoints import failpoint
from interlock.messages import CallerAction, Outcome, Proposal, Trace, trace_now
from interlock.producer import enqueue
from interlock.queues import GATE_JOB, OUTCOME_TTL_S, TRACE_MAX_LEN, trace_key
from interlock.task import TASK_META_KEY, TASK_SIG_META_KEY

logger = logging.getLogger(__name__)

# A gate job that failed is kept a day for the operator; a finished one only as long as its outcome.
GATE_JOB_FAILURE_TTL_S = 86_400


async def call_money_tool(
    ingress: Ingress, caller: Caller, tool: str, arguments: dict[str, Any], meta: dict[str, Any]
) -> CallToolResult:
    trace: Trace = {"ingress_received": trace_now()}
    if caller.mandate is None or caller.merchant_id is None:
        return results.error(
            "NO_MANDATE",
            f"no mandate is configured for agent {caller.agent_id!r}; an operator must add one",
            CallerAction.ESCALATE_TO_OPERATOR,
        )
    try:
        parse_money_call(tool, arguments)
        # operation_ref comes from the harness via _meta, never from the model's arguments (SPEC §4).
        raw_ref = meta.get(OPERATION_REF_META_KEY)
        operation_ref = None if raw_ref is None else parse_operation_ref(raw_ref)
        # So does the task binding (SPEC §10): carried as sent, verified by the gate worker against the mandate.
        task, task_sig = _meta_object(meta, TASK_META_KEY), _meta_object(meta, TASK_SIG_META_KEY)
    except InvalidInput as exc:
        return results.invalid_input(exc)

    proposal = Proposal(
        request_id=uuid.uuid4().hex,
        agent_id=caller.agent_id,
        merchant_id=caller.merchant_id,
        tool=tool,
        arguments=arguments,
        operation_ref=operation_ref,
        task=task,
        task_sig=task_sig,
        received_at_ms=now_ms(),
        trace=trace,
    )
    refusal = ingress.money_slots.take(caller.agent_id)  # before anything is recorded: a refusal records nothing
    if refusal is not None:
        logger.warning("money call %s by %s refused: %s", tool, caller.agent_id, results.error_body(refusal))
        return refusal
    try:
        return await _propose_and_wait(ingress, caller.merchant_id, proposal)
    finally:
        ingress.money_slots.give_back(caller.agent_id)


async def _propose_and_wait(ingress: Ingress, merchant_id: str, proposal: Proposal) -> CallToolResult:
    route = ingress.route(merchant_id)  # the merchant's shard: its Redis for the proposal and the outcome
    try:
        await ingress.blocking(_enqueue, route, proposal, money=True)
    except redis.RedisError as exc:
        logger.error("cannot enqueue proposal %s for %s on shard %s: %s", proposal.request_id, proposal.agent_id,
                     route.name, exc)  # fmt: skip
        return results.error(
            "QUEUE_UNAVAILABLE",
            f"Interlock could not record this call (its queue is unreachable: {type(exc).__name__}); "
            "nothing was paid. Repeat the same call: it is safe and will not pay twice.",
            CallerAction.RETRY_SAME_CALL,
        )
    failpoint("ingress.after_enqueue")
    logger.info("proposal %s enqueued: agent=%s tool=%s shard=%s", proposal.request_id, proposal.agent_id,
                proposal.tool, route.name)  # fmt: skip

    outcome = await _wait(ingress, route, proposal.request_id)
    if outcome is None:
        return results.in_progress()
    return results.money_outcome(outcome.structured())


def _meta_object(meta: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = meta.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidInput(f"_meta[{key!r}] must be a JSON object, got {type(value).__name__}", field=key)
    check_envelope(value)  # the same size and depth limits as arguments
    return value


def proposal_job_id(request_id: str) -> str:
    # RQ job ids allow only [A-Za-z0-9_-], so not the "proposal:<id>" spelling of the Redis keys.
    return f"proposal-{request_id}"


def _enqueue(route: ShardRoute, proposal: Proposal) -> None:
    # One round trip of two commands: the job's hash, then its id on the queue (interlock.producer).
    pipe = route.queue_redis.pipeline(transaction=False)
    proposal.trace["enqueued"] = trace_now()  # the message is serialised below: the stamp travels with it
    enqueue(route.gates_queue(), GATE_JOB, proposal.to_json(), job_id=proposal_job_id(proposal.request_id),
            result_ttl=OUTCOME_TTL_S, failure_ttl=GATE_JOB_FAILURE_TTL_S, pipeline=pipe)  # fmt: skip
    pipe.execute()


def _wait_blocking(ingress: Ingress, route: ShardRoute, request_id: str) -> Outcome | None:
    outcome = outcomes.wait(route.wait_redis, request_id, ingress.settings.outcome_wait_ms)
    if outcome is not None and ingress.tracer is not None:
        answered = {**outcome.trace, "ingress_answered": trace_now()}
        ingress.tracer.submit(_keep_trace, route.queue_redis, outcome, answered)
    return outcome


def _keep_trace(client: redis.Redis, outcome: Outcome, trace: Trace) -> None:
    """Benchmarking only (INTERLOCK_TRACE): keep the call's finished trace for the bench. A lost trace is
    only a missing sample, so a Redis error here never changes the agent's answer."""
    record = {"request_id": outcome.request_id, "sik": outcome.sik, "state": outcome.state,
              "replayed": outcome.replayed, "trace": trace}  # fmt: skip
    try:
        pipe = client.pipeline(transaction=False)
        pipe.lpush(trace_key(), json.dumps(record))
        pipe.ltrim(trace_key(), 0, TRACE_MAX_LEN - 1)
        pipe.execute()
    except redis.RedisError as exc:
        logger.warning("could not keep the trace of %s: %s", outcome.request_id, exc)


async def _wait(ingress: Ingress, route: ShardRoute, request_id: str) -> Outcome | None:
    """The first recorded outcome, or None. The proposal is already on the queue, so a failure here is
    'not known yet' (IN_PROGRESS), never an error: something may have been recorded."""
    try:
        return await ingress.blocking(_wait_blocking, ingress, route, request_id, money=True)
    except redis.RedisError as exc:
        logger.warning("lost Redis while waiting for the outcome of %s: %s", request_id, exc)
    except ValidationError as exc:
        logger.error("unreadable outcome for %s: %s", request_id, exc)
    return None
