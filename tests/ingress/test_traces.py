"""Per-hop traces at the ingress (issue 14, item 4): stamped on the Proposal, brought back on the Outcome, kept
on the bench's Redis list only while INTERLOCK_TRACE is set — and never part of the agent's result."""

from __future__ import annotations

import json
from typing import Any

import pytest

from deploy.redis_server import EmbeddedRedis
from interlock.messages import Outcome, Proposal, trace_now
from interlock.queues import trace_key
from tests.ingress.helpers import TestResponder, applied_outcome, stdio_client_for, wait_until

pytestmark = pytest.mark.anyio

CONTRACT_KEYS = {"state", "sik", "intent", "rail_entity_id", "reason_code", "caller_action", "replayed"}


def traced_outcome(proposal: Proposal) -> Outcome:
    """What the rail worker answers: the Proposal's trace carried on, with its own stamps added."""
    trace = {**proposal.trace, "recorded": trace_now()}
    outcome: Outcome = applied_outcome(proposal).model_copy(update={"trace": trace})
    return outcome


async def test_with_tracing_on_the_finished_trace_is_kept_and_the_result_is_unchanged(
    env: dict[str, str], errlog: Any, redis_server: EmbeddedRedis, rclient: Any
) -> None:
    with TestResponder(redis_server.url, answer=traced_outcome) as responder:
        async with stdio_client_for({**env, "INTERLOCK_TRACE": "1"}, errlog) as client:
            result = await client.call_tool("create_refund", {"payment_id": "pay_1", "amount": 100})

    [proposal] = responder.proposals
    assert proposal.trace["ingress_received"] <= proposal.trace["enqueued"]
    assert set(result.structured_content) == CONTRACT_KEYS  # the trace never reaches the agent
    raw = wait_until(lambda: rclient.lrange(trace_key(), 0, -1), timeout=10, what="the kept trace")
    [record] = [json.loads(item) for item in raw]
    assert (record["request_id"], record["sik"], record["state"]) == (proposal.request_id, "A" * 32, "APPLIED")
    stamps = record["trace"]
    assert list(stamps) == ["ingress_received", "enqueued", "recorded", "ingress_answered"]
    assert stamps["ingress_received"] <= stamps["enqueued"] <= stamps["recorded"] <= stamps["ingress_answered"]


async def test_without_tracing_nothing_is_kept(env: dict[str, str], errlog: Any, redis_server: EmbeddedRedis,
                                               rclient: Any) -> None:  # fmt: skip
    with TestResponder(redis_server.url, answer=traced_outcome):
        async with stdio_client_for(env, errlog) as client:
            for _ in range(3):
                result = await client.call_tool("create_refund", {"payment_id": "pay_1", "amount": 100})
                assert result.structured_content["state"] == "APPLIED"
    assert rclient.exists(trace_key()) == 0
