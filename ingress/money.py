"""Money tools: validate, stamp the trusted identity, enqueue a Proposal on "gates", wait for the Outcome.

The ingress decides nothing about money. It refuses malformed calls before anything is recorded, and
answers with the first outcome the rail worker records for this call (SPEC §10) — or IN_PROGRESS with
RETRY_SAME_CALL past the deadline, which is safe because a repeat of the same call has the same SIK.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import redis
from mcp_types import CallToolResult
from pydantic import ValidationError

from ingress import results
from ingress.app import Caller, Ingress
from interlock import outcomes
from interlock.arguments import parse_money_call, parse_operation_ref
from interlock.clock import now_ms
from interlock.errors import InvalidInput
from interlock.failpoints import failpoint
from interlock.messages import CallerAction, Outcome, Proposal
from interlock.queues import GATE_JOB, OUTCOME_TTL_S, gates_queue, rq_queue

logger = logging.getLogger(__name__)

OPERATION_REF_META_KEY = "interlock/operation_ref"
# A gate job that failed is kept a day for the operator; a finished one only as long as its outcome.
GATE_JOB_FAILURE_TTL_S = 86_400


async def call_money_tool(
    ingress: Ingress, caller: Caller, tool: str, arguments: dict[str, Any], meta: dict[str, Any]
) -> CallToolResult:
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
    except InvalidInput as exc:
        return results.invalid_input(exc)

    proposal = Proposal(
        request_id=uuid.uuid4().hex,
        agent_id=caller.agent_id,
        merchant_id=caller.merchant_id,
        tool=tool,
        arguments=arguments,
        operation_ref=operation_ref,
        received_at_ms=now_ms(),
    )
    try:
        await ingress.blocking(_enqueue, ingress.queue_redis, proposal)
    except redis.RedisError as exc:
        logger.error("cannot enqueue proposal %s for %s: %s", proposal.request_id, caller.agent_id, exc)
        return results.error(
            "QUEUE_UNAVAILABLE",
            f"Interlock could not record this call (its queue is unreachable: {type(exc).__name__}); "
            "nothing was paid. Repeat the same call: it is safe and will not pay twice.",
            CallerAction.RETRY_SAME_CALL,
        )
    failpoint("ingress.after_enqueue")
    logger.info("proposal %s enqueued: agent=%s tool=%s", proposal.request_id, caller.agent_id, tool)

    outcome = await _wait(ingress, proposal.request_id)
    if outcome is None:
        return results.in_progress()
    return results.money_outcome(outcome.structured())


def proposal_job_id(request_id: str) -> str:
    # RQ job ids allow only [A-Za-z0-9_-], so not the "proposal:<id>" spelling of the Redis keys.
    return f"proposal-{request_id}"


def _enqueue(client: redis.Redis, proposal: Proposal) -> None:
    rq_queue(gates_queue(), client).enqueue(
        GATE_JOB,
        proposal.to_json(),
        job_id=proposal_job_id(proposal.request_id),
        result_ttl=OUTCOME_TTL_S,
        failure_ttl=GATE_JOB_FAILURE_TTL_S,
    )


async def _wait(ingress: Ingress, request_id: str) -> Outcome | None:
    """The first recorded outcome, or None. The proposal is already on the queue, so a failure here is
    'not known yet' (IN_PROGRESS), never an error: something may have been recorded."""
    try:
        return await ingress.blocking(outcomes.wait, ingress.wait_redis, request_id, ingress.settings.outcome_wait_ms)
    except redis.RedisError as exc:
        logger.warning("lost Redis while waiting for the outcome of %s: %s", request_id, exc)
    except ValidationError as exc:
        logger.error("unreadable outcome for %s: %s", request_id, exc)
    return None
