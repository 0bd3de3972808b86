"""The task binding crosses the ingress only in `_meta`, from the harness (SPEC §10): the ingress carries it into
the Proposal as sent, and the model cannot supply one — task fields inside `arguments` are unknown arguments."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from deploy.redis_server import EmbeddedRedis
from interlock.task import TASK_META_KEY, TASK_SIG_META_KEY, new_task, sign_task
from tests.ingress.helpers import TestResponder, error_of, gates_queue_length, stdio_client_for

pytestmark = pytest.mark.anyio

BLOCK = sign_task(new_task("ticket-4711", 2_000_000_000_000, "create_refund", merchant_id="acc_DEMO000001",
                           agent_ids=["agent_demo"], subjects=["pay_1"],
                           max_amount_minor=189900), Ed25519PrivateKey.generate(), "ticketing")  # fmt: skip


async def test_the_harness_task_in_meta_reaches_the_proposal_as_sent(env, errlog, redis_server: EmbeddedRedis) -> None:
    with TestResponder(redis_server.url) as responder:
        async with stdio_client_for(env, errlog) as client:
            result = await client.call_tool("create_refund", {"payment_id": "pay_1", "amount": 100}, meta=BLOCK)
    assert not result.is_error
    [proposal] = responder.proposals
    assert proposal.task == BLOCK[TASK_META_KEY]
    assert proposal.task_sig == BLOCK[TASK_SIG_META_KEY]
    assert proposal.arguments == {"payment_id": "pay_1", "amount": 100}


@pytest.mark.parametrize("field", ["interlock/task", "interlock_task", "task", "task_id", "grants",
                                   "interlock/task_sig"])  # fmt: skip
async def test_the_model_cannot_supply_a_task_in_arguments(env, errlog, rclient, field: str) -> None:
    async with stdio_client_for(env, errlog) as client:
        arguments = {"payment_id": "pay_1", "amount": 100, field: BLOCK[TASK_META_KEY]}
        body = error_of(await client.call_tool("create_refund", arguments))
    assert body["error"]["field"] == field
    assert "unknown field" in body["error"]["message"]
    assert gates_queue_length(rclient) == 0  # refused before anything was proposed


async def test_a_meta_task_that_is_not_an_object_is_refused_naming_it(env, errlog, rclient) -> None:
    async with stdio_client_for(env, errlog) as client:
        result = await client.call_tool("create_refund", {"payment_id": "pay_1", "amount": 100},
                                        meta={TASK_META_KEY: "refund pay_1 please"})  # fmt: skip
    assert error_of(result)["error"]["field"] == TASK_META_KEY
    assert gates_queue_length(rclient) == 0
