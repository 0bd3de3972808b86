"""The stdio ingress as an agent's MCP client meets it: the official SDK client launches the real
`interlock ingress --stdio` process against a real redis-server. Outcomes come from the TEST RESPONDER
(helpers.TestResponder), which speaks the real queue/outcome protocol in place of the gate/rail workers."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from deploy.redis_server import EmbeddedRedis
from tests.ingress.helpers import (
    DEMO_AGENT,
    DEMO_MERCHANT,
    TestResponder,
    applied_outcome,
    error_of,
    gates_queue_length,
    queued_proposals,
    stdio_client_for,
)

pytestmark = pytest.mark.anyio

LIMITED_MANDATE = """\
v: 1
mandate_id: mnd_limited
merchant_id: acc_LIMITED01
agent_id: agent_limited
issued_at: 1700000000000
expires_at: 2000000000000
purpose: "Refunds only"
scope:
  grants:
    fetch_payment: {reversibility: reversible}
    create_refund:
      reversibility: irreversible
      value: {min_amount_minor: 100, max_amount_minor: 500000, currencies: [INR]}
"""


async def test_tools_list_declares_integer_amounts_annotations_and_output_schemas(env, errlog) -> None:
    async with stdio_client_for(env, errlog) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}

    assert set(tools) == {"fetch_payment", "fetch_refund", "create_refund", "create_instant_settlement",
                          "create_payout", "interlock_status"}  # fmt: skip
    for name in ("create_refund", "create_instant_settlement", "create_payout"):
        assert tools[name].input_schema["properties"]["amount"]["type"] == "integer"
        assert tools[name].annotations is not None
        assert tools[name].annotations.destructive_hint is True
        assert tools[name].annotations.read_only_hint is False
        assert tools[name].annotations.idempotent_hint is True
        assert tools[name].output_schema is not None
        assert "caller_action" in tools[name].output_schema["required"]
    for name in ("fetch_payment", "fetch_refund", "interlock_status"):
        assert tools[name].annotations is not None and tools[name].annotations.read_only_hint is True
        assert tools[name].output_schema is not None


async def test_tools_the_mandate_does_not_grant_are_not_listed(env, errlog, tmp_path: Path) -> None:
    mandate = tmp_path / "limited.yaml"
    mandate.write_text(LIMITED_MANDATE)
    env = {**env, "INTERLOCK_MANDATE": str(mandate), "INTERLOCK_AGENT_ID": "agent_limited"}
    async with stdio_client_for(env, errlog) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
    # interlock_status is always offered; it reads only this merchant's own ledger.
    assert names == ["fetch_payment", "create_refund", "interlock_status"]


MALFORMED: list[tuple[str, dict[str, Any], str]] = [
    ("create_refund", {"payment_id": "pay_1", "amount": 1899.0}, "amount"),
    ("create_refund", {"payment_id": "pay_1", "amount": "1899"}, "amount"),
    ("create_refund", {"payment_id": "pay_1", "amount": -5}, "amount"),
    ("create_refund", {"payment_id": "pay_1", "amount": True}, "amount"),
    ("create_refund", {"payment_id": "pay_1", "amount": 2**70}, "amount"),
    ("create_refund", {"payment_id": "pay_1", "amount": 100, "refund_all": True}, "refund_all"),
    ("create_refund", {"payment_id": "pay_1", "amount": 100, "agent_id": "agent_admin"}, "agent_id"),
    ("create_refund", {"amount": 100}, "payment_id"),
    ("create_refund", {"payment_id": "pay_1", "amount": 100, "notes": {"k": "x" * (70 * 1024)}}, "arguments"),
    # Issue 46: notes that leave no room for the keys Interlock writes, or that use one of them.
    ("create_refund", {"payment_id": "pay_1", "amount": 100, "notes": {f"k{i}": "v" for i in range(13)}}, "notes"),
    ("create_payout", {"fund_account_id": "fa_DEMOVENDOR0001", "amount": 100, "currency": "INR", "mode": "IMPS",
                       "purpose": "vendor bill", "notes": {"interlock_merchant": "acc_OTHER"}},
     "notes.interlock_merchant"),
    ("create_instant_settlement", {"amount": 100, "settle_full_balance": True}, "amount"),
    ("fetch_payment", {"payment_id": "pay 1; DROP"}, "payment_id"),
    ("interlock_status", {}, "sik"),
]


async def test_malformed_calls_are_errors_naming_the_field_and_record_nothing(env, errlog, rclient) -> None:
    async with stdio_client_for(env, errlog) as client:
        for tool, arguments, field in MALFORMED:
            body = error_of(await client.call_tool(tool, arguments))
            error = body["error"]
            assert (error["code"], error["field"]) == ("INVALID_INPUT", field), error
            assert field in error["message"] or field == "arguments"
            assert body["caller_action"] == "DO_NOT_RETRY"
            if field == "notes":
                assert "at most 12 of your own, this call has 13: Razorpay allows 15" in error["message"]

        unknown = error_of(await client.call_tool("create_payment_link", {"amount": 100}))
        assert unknown["error"]["code"] == "UNKNOWN_TOOL"
        assert "create_payment_link" in unknown["error"]["message"]

        bad_ref = await client.call_tool("create_refund", {"payment_id": "pay_1", "amount": 100},
                                         meta={"interlock/operation_ref": "not a ref!"})  # fmt: skip
        assert error_of(bad_ref)["error"]["field"] == "operation_ref"

        # The ingress is still serving after all of that.
        assert len((await client.list_tools()).tools) == 6
    assert gates_queue_length(rclient) == 0


async def test_a_valid_call_is_proposed_with_the_trusted_identity_and_answered_with_its_outcome(
    env, errlog, redis_server: EmbeddedRedis
) -> None:
    with TestResponder(redis_server.url) as responder:
        async with stdio_client_for(env, errlog) as client:
            result = await client.call_tool(
                "create_refund",
                {"payment_id": "pay_29QQoUBi66xm2f", "amount": 189900, "notes": {"ticket": "T-1"}},
                # The harness may attach operation_ref; identity keys in _meta are not trusted and are ignored.
                meta={"interlock/operation_ref": "order-7781-refund", "interlock/agent_id": "agent_admin"},
            )

    assert not result.is_error
    [proposal] = responder.proposals
    assert (proposal.agent_id, proposal.merchant_id) == (DEMO_AGENT, DEMO_MERCHANT)
    assert proposal.tool == "create_refund"
    assert proposal.arguments == {"payment_id": "pay_29QQoUBi66xm2f", "amount": 189900, "notes": {"ticket": "T-1"}}
    assert proposal.operation_ref == "order-7781-refund"
    assert len(proposal.request_id) == 32
    assert result.structured_content == applied_outcome(proposal).structured()
    assert set(result.structured_content) == {"state", "sik", "intent", "rail_entity_id", "reason_code",
                                              "caller_action", "replayed"}  # fmt: skip


async def test_each_call_gets_a_fresh_request_id(env, errlog, redis_server: EmbeddedRedis) -> None:
    with TestResponder(redis_server.url) as responder:
        async with stdio_client_for(env, errlog) as client:
            for _ in range(3):
                result = await client.call_tool("create_refund", {"payment_id": "pay_1", "amount": 100})
                assert result.structured_content["state"] == "APPLIED"
    assert len({p.request_id for p in responder.proposals}) == 3


async def test_no_outcome_before_the_deadline_answers_in_progress_retry_same_call(env, errlog, rclient) -> None:
    env = {**env, "INTERLOCK_OUTCOME_WAIT_MS": "600"}
    async with stdio_client_for(env, errlog) as client:
        started = time.monotonic()
        result = await client.call_tool("create_instant_settlement", {"amount": 50000})
        elapsed = time.monotonic() - started

    assert not result.is_error
    assert result.structured_content == {
        "state": "IN_PROGRESS", "sik": None, "intent": None, "rail_entity_id": None,
        "reason_code": "OUTCOME_PENDING", "caller_action": "RETRY_SAME_CALL", "replayed": False,
    }  # fmt: skip
    assert elapsed >= 0.6
    # The proposal is on "gates" for the gate workers, stamped with the trusted identity.
    [proposal] = queued_proposals(rclient)
    assert (proposal.agent_id, proposal.merchant_id, proposal.tool) == (DEMO_AGENT, DEMO_MERCHANT,
                                                                         "create_instant_settlement")  # fmt: skip
    assert proposal.operation_ref is None


async def test_redis_down_is_a_retryable_error_and_the_next_call_after_it_returns_works(
    env, errlog, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    async with stdio_client_for(env, errlog) as client:
        redis_server.kill()
        down = error_of(await client.call_tool("create_refund", {"payment_id": "pay_1", "amount": 100}))
        assert down["caller_action"] == "RETRY_SAME_CALL"
        assert down["error"]["code"] == "QUEUE_UNAVAILABLE"

        restarted = EmbeddedRedis(tmp_path / "redis2", port=redis_server.port, appendonly=False).start()
        try:
            with TestResponder(restarted.url) as responder:
                again = await client.call_tool("create_refund", {"payment_id": "pay_1", "amount": 100})
            assert not again.is_error
            assert again.structured_content["state"] == "APPLIED"
            assert len(responder.proposals) == 1
        finally:
            restarted.stop()
