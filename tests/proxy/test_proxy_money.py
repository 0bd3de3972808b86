"""A refund through agent → Interlock (proxy mode) → upstream MCP server → sandbox lands exactly once,
and an ambiguous answer is settled by paging the upstream's own list tool."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from mcp_types import CallToolResult, TextContent

from ledger import audit
from tests.proxy.conftest import Proxy

pytestmark = pytest.mark.anyio


def structured(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, result
    return dict(result.structured_content)


async def test_a_refund_lands_once_through_the_upstream(proxy_factory: Callable[..., Proxy]) -> None:
    proxy = proxy_factory()
    pid = proxy.payment(189900)
    async with proxy.agent() as agent:
        listed = {tool.name: tool for tool in (await agent.list_tools()).tools}
        assert set(listed) == {"fetch_payment", "fetch_refund", "create_refund", "create_instant_settlement",
                               "interlock_status"}  # fmt: skip
        # The agent sees the upstream's own description (what the human pinned), and Interlock's result shape.
        assert listed["create_refund"].description.startswith("Use this tool to create a normal refund")
        assert listed["create_refund"].output_schema is not None
        assert "caller_action" in listed["create_refund"].output_schema["properties"]

        read = await agent.call_tool("fetch_payment", {"payment_id": pid})
        assert not read.is_error
        text = read.content[0]
        assert isinstance(text, TextContent) and json.loads(text.text)["id"] == pid

        first = structured(await agent.call_tool("create_refund", {"payment_id": pid, "amount": 50000}))
        assert (first["state"], first["caller_action"], first["replayed"]) == ("APPLIED", "DONE", False)
        again = structured(await agent.call_tool("create_refund", {"payment_id": pid, "amount": 50000}))
        assert (again["state"], again["replayed"], again["rail_entity_id"]) == ("APPLIED", True,
                                                                              first["rail_entity_id"])  # fmt: skip
    sik = first["sik"]
    assert proxy.rail.count_stamped(sik) == 1
    (refund,) = proxy.refunds_of(pid)
    assert refund["id"] == first["rail_entity_id"]
    assert refund["receipt"] == "ilk_" + sik and refund["notes"]["interlock_sik"] == sik
    conn = proxy.ledger()
    assert audit.verify_chain(conn) is None
    conn.close()


async def test_ambiguous_504_is_reconciled_applied_by_paging_the_upstream_list(
    proxy_factory: Callable[..., Proxy],
) -> None:
    proxy = proxy_factory()
    pid = proxy.payment(10_000_000, prior_refunds=150)  # ours is listed after 150 others: page two of the list
    proxy.rail.set_faults([{"name": "ambiguous_504", "rate": 1.0}, {"name": "deep_page", "rate": 1.0}])
    async with proxy.agent() as agent:
        outcome = structured(await agent.call_tool("create_refund", {"payment_id": pid, "amount": 40000}))
    assert (outcome["state"], outcome["caller_action"]) == ("UNKNOWN", "RETRY_SAME_CALL")
    sik = outcome["sik"]
    proxy.rail.set_faults([{"name": "deep_page", "rate": 1.0}])
    intent = proxy.settle(sik, {"APPLIED"})
    assert intent.attempt_seq == 1, "an applied refund must be found, never retried"
    assert proxy.rail.count_stamped(sik) == 1
    ours = [r for r in proxy.refunds_of(pid) if r["notes"] and r["notes"].get("interlock_sik") == sik]
    assert len(ours) == 1 and intent.rail_entity_id == ours[0]["id"]
    conn = proxy.ledger()
    finding = conn.execute("SELECT outcome, pages_scanned FROM recon_findings WHERE sik = ?", (sik,)).fetchall()
    conn.close()
    assert [tuple(f) for f in finding] == [("APPLIED", 2)]


async def test_fail_504_is_confirmed_absent_after_paging_to_exhaustion_then_lands_once(
    proxy_factory: Callable[..., Proxy],
) -> None:
    proxy = proxy_factory()
    pid = proxy.payment(10_000_000, prior_refunds=120)
    proxy.rail.set_faults([{"name": "fail_504", "rate": 1.0}])
    async with proxy.agent() as agent:
        outcome = structured(await agent.call_tool("create_refund", {"payment_id": pid, "amount": 30000}))
        assert outcome["state"] == "UNKNOWN"
        sik = outcome["sik"]
        assert proxy.rail.count_stamped(sik) == 0
        proxy.rail.clear_faults()
        intent = proxy.settle(sik, {"APPLIED"})
        assert intent.attempt_seq == 2
        repeat = structured(await agent.call_tool("create_refund", {"payment_id": pid, "amount": 30000}))
    assert (repeat["state"], repeat["replayed"]) == ("APPLIED", True)
    assert proxy.rail.count_stamped(sik) == 1
    conn = proxy.ledger()
    findings = [tuple(r) for r in conn.execute(
        "SELECT outcome, pages_scanned, pagination_exhausted FROM recon_findings WHERE sik = ? ORDER BY id", (sik,))]
    conn.close()
    assert findings == [("CONFIRMED_NOT_APPLIED", 2, 1)]
