"""Proxy mode against razorpay-mcp-server's own contract (the sandbox front's razorpay-mcp-server profile):
agent → Interlock → upstream → sandbox rail, all real processes.

* a refund lands once and carries its stamps (receipt, notes.interlock_sik) through the real tool;
* a float amount is refused by Interlock although the upstream's schema says "number" (the real server
  would truncate it);
* the upstream's failure texts are classified: its refusal is FAILED_TERMINAL (DO_NOT_RETRY), a gateway
  page or a timeout inside it is UNKNOWN and reconciled by stamp to a single refund;
* instant settlements are refused, saying why: the real server has no balance tool for G2 to read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from mcp_types import CallToolResult, TextContent

from ingress.results import error_body
from sandbox.testing import wait_for
from tests.mandates import AGENT, MERCHANT
from tests.proxy.conftest import RAZORPAY, Proxy

pytestmark = pytest.mark.anyio
REFUSAL = "creating refund failed: The requested refund amount is greater than the refundable amount"


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error and result.structured_content is not None, result
    return dict(result.structured_content)


def words(result: CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, TextContent))


def attempts(proxy: Proxy, sik: str) -> list[tuple[int, str, str]]:
    conn = proxy.ledger()
    try:
        rows = conn.execute("SELECT attempt_seq, outcome, COALESCE(response_json, '') FROM intent_attempts "
                            "WHERE sik = ? ORDER BY attempt_seq", (sik,)).fetchall()  # fmt: skip
    finally:
        conn.close()
    return [tuple(row) for row in rows]


async def test_a_refund_through_the_real_contract_lands_once_and_a_float_never_leaves(
    proxy_factory: Callable[..., Proxy],
) -> None:
    proxy = proxy_factory(profile=RAZORPAY)
    pid = proxy.payment(189900)
    async with proxy.agent() as agent:
        listed = {tool.name: tool for tool in (await agent.list_tools()).tools}
        # Only what Interlock can grant is offered, under the real server's descriptions and schemas.
        assert set(listed) == {"fetch_payment", "fetch_refund", "create_refund", "create_instant_settlement",
                               "interlock_status"}  # fmt: skip
        assert listed["create_refund"].description.endswith("(e.g., for ₹295, use 29500)")
        assert listed["create_refund"].input_schema["properties"]["amount"]["type"] == "number"

        floats = [await agent.call_tool("create_refund", {"payment_id": pid, "amount": amount})
                  for amount in (500.5, 1899.0)]  # fmt: skip
        first = structured(await agent.call_tool("create_refund", {"payment_id": pid, "amount": 50000,
                                                                    "notes": {"ticket": "T-42"}}))  # fmt: skip
        again = structured(await agent.call_tool("create_refund", {"payment_id": pid, "amount": 50000,
                                                                    "notes": {"ticket": "T-42"}}))  # fmt: skip
        read = await agent.call_tool("fetch_payment", {"payment_id": pid})
        unknown = await agent.call_tool("fetch_payment", {"payment_id": "pay_RZPNOTHERE001"})
    for refused in floats:
        body = error_body(refused)
        assert refused.is_error and body is not None, refused
        assert (body["error"]["code"], body["error"]["field"], body["caller_action"]) == (
            "INVALID_INPUT", "amount", "DO_NOT_RETRY")
    assert (first["state"], first["caller_action"], first["replayed"]) == ("APPLIED", "DONE", False)
    assert (again["state"], again["replayed"], again["rail_entity_id"]) == ("APPLIED", True, first["rail_entity_id"])
    (refund,) = proxy.refunds_of(pid)  # the floats reached nothing
    sik = first["sik"]
    assert refund["id"] == first["rail_entity_id"] and refund["amount"] == 50000
    assert refund["receipt"] == "ilk_" + sik and refund["notes"] == {
        "ticket": "T-42", "interlock_sik": sik, "interlock_merchant": MERCHANT, "interlock_agent": AGENT}
    assert proxy.rail.count_stamped(sik) == 1
    # Reads pass through with the upstream's own result; its failure text comes back with a caller_action.
    assert not read.is_error and json.loads(words(read))["amount_refunded"] == 50000
    missing = error_body(unknown)
    assert unknown.is_error and missing is not None
    assert (missing["error"]["code"], missing["caller_action"]) == ("NOT_FOUND", "DO_NOT_RETRY")
    assert "fetching payment failed: The id provided does not exist" in missing["error"]["message"]


async def test_an_upstream_refusal_is_terminal_and_a_failure_inside_it_is_reconciled_to_one_refund(
    proxy_factory: Callable[..., Proxy],
) -> None:
    # The upstream's HTTP client gives up after 1 s (its SDK timeout, shortened), before Interlock's own 3 s;
    # the reconciler looks only after the slow rail has applied (no read-your-writes: SPEC §9).
    proxy = proxy_factory(profile=RAZORPAY, env={"INTERLOCK_SANDBOX_MCP_RAIL_TIMEOUT_MS": "1000",
                                                 "INTERLOCK_RECONCILE_MIN_DELAY_MS": "3000"})  # fmt: skip
    refused_pid, gateway_pid, slow_pid = proxy.payment(100000), proxy.payment(100000), proxy.payment(100000)
    async with proxy.agent() as agent:
        proxy.refuse("create_refund", REFUSAL)
        refused = structured(await agent.call_tool("create_refund", {"payment_id": refused_pid, "amount": 40000}))
        proxy.refuse("create_refund", None)

        proxy.rail.set_faults([{"name": "ambiguous_504", "rate": 1.0, "params": {"html": 1.0}}])
        gateway = structured(await agent.call_tool("create_refund", {"payment_id": gateway_pid, "amount": 40000}))
        with proxy.rail.slow_held():  # not answered before the upstream's client gives up, however busy the machine
            slow = structured(await agent.call_tool("create_refund", {"payment_id": slow_pid, "amount": 40000}))
            wait_for(lambda: proxy.rail.health()["slow_waiting"] == 1, timeout=60)

    assert (refused["state"], refused["reason_code"], refused["caller_action"]) == (
        "FAILED_TERMINAL", "RAIL_REJECTED", "DO_NOT_RETRY")
    assert proxy.refunds_of(refused_pid) == []
    assert attempts(proxy, refused["sik"])[0][1] == "REJECTED"

    for outcome in (gateway, slow):
        assert (outcome["state"], outcome["caller_action"]) == ("UNKNOWN", "RETRY_SAME_CALL")
    gateway_text, slow_text = attempts(proxy, gateway["sik"])[0][2], attempts(proxy, slow["sik"])[0][2]
    assert "creating refund failed:" in gateway_text
    assert "context deadline exceeded (Client.Timeout exceeded while awaiting headers)" in slow_text
    for outcome, pid in ((gateway, gateway_pid), (slow, slow_pid)):
        intent = proxy.settle(outcome["sik"], {"APPLIED"})
        assert intent.attempt_seq == 1, "an applied refund is found by its stamp, never sent again"
        assert proxy.rail.count_stamped(outcome["sik"]) == 1 and len(proxy.refunds_of(pid)) == 1


async def test_instant_settlements_are_refused_because_the_real_server_has_no_balance_tool(
    proxy_factory: Callable[..., Proxy],
) -> None:
    proxy = proxy_factory(profile=RAZORPAY)
    proxy.rail.set_balance(5_000_000)
    before = len(proxy.rail.entities("settlement"))
    async with proxy.agent() as agent:
        answers = [await agent.call_tool("create_instant_settlement", args)
                   for args in ({"amount": 10000}, {"settle_full_balance": True})]  # fmt: skip
    for answer in answers:
        outcome = structured(answer)
        assert (outcome["state"], outcome["reason_code"], outcome["caller_action"], outcome["sik"]) == (
            "BLOCKED", "G2_BALANCE_UNREADABLE", "DO_NOT_RETRY", None)
        assert "fetch_balance" in words(answer) and "Repeating the call gets the same answer" in words(answer)
    assert len(proxy.rail.entities("settlement")) == before
