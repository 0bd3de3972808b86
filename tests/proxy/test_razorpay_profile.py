"""The sandbox's MCP front in its razorpay-mcp-server profile serves the real server's contract — tool
names, input schemas, descriptions, results as compact JSON text, failures in the server's own words —
and Interlock's upstream adapter reads that contract right: stamps travel, a refusal is REJECTED, a
gateway page or a timeout inside the upstream is AMBIGUOUS, and the send window still holds.
Real processes: the sandbox rail and the front; the adapter is Interlock's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

from interlock.sik import receipt_for, stamp_notes
from rails.base import RailError, RailErrorKind
from rails.deadline import send_window
from rails.mcp_session import UpstreamSession, UpstreamTarget
from rails.mcp_upstream import McpUpstreamRail
from rails.upstream_manifest import pins
from sandbox.testing import SandboxProcess, wait_for
from tests.procs import INTERLOCK
from tests.proxy.conftest import PROFILE_ENV, RAZORPAY, front_process, front_tools

REAL_TOOLS = {
    "fetch_payment", "create_refund", "fetch_refund", "update_refund", "fetch_multiple_refunds_for_payment",
    "fetch_specific_refund_for_payment", "fetch_all_refunds", "create_instant_settlement",
    "fetch_all_instant_settlements", "fetch_instant_settlement_with_id",
}  # fmt: skip


def text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def failure(call: object) -> RailError:
    with pytest.raises(RailError) as caught:
        call()  # type: ignore[operator]
    return caught.value


@pytest.fixture
def adapter(razorpay_front: str) -> Iterator[McpUpstreamRail]:
    rail = McpUpstreamRail(UpstreamSession(UpstreamTarget(url=razorpay_front), timeout_s=8))
    yield rail
    rail.close()


@pytest.mark.anyio
async def test_the_profile_lists_the_real_servers_tools_with_its_schemas(razorpay_front: str, front: str) -> None:
    async with Client(razorpay_front, mode="legacy", cache=None) as client:
        assert client.server_info is not None and client.server_info.name == "razorpay-mcp-server"
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == REAL_TOOLS, "no sandbox-only tool: razorpay-mcp-server has no fetch_balance"
    refund = tools["create_refund"]
    assert refund.description == ("Use this tool to create a normal refund for a payment. Amount should be in the "
                                  "smallest currency unit (e.g., for ₹295, use 29500)")  # fmt: skip
    assert refund.input_schema["required"] == ["payment_id", "amount"]
    assert refund.input_schema["properties"]["amount"] == {
        "type": "number", "minimum": 100,
        "description": "Payment amount in the smallest currency unit (e.g., for ₹295, use 29500)"}  # fmt: skip
    assert set(refund.input_schema["properties"]) == {"payment_id", "amount", "speed", "notes", "receipt"}
    settle = tools["create_instant_settlement"].input_schema
    assert settle["required"] == ["amount"] and settle["properties"]["settle_full_balance"]["default"] is False
    assert tools["fetch_payment"].annotations is not None and tools["fetch_payment"].annotations.read_only_hint is False
    # A different contract is a different pin: a mandate pinned against one profile does not fit the other.
    assert pins(front_tools(razorpay_front))["create_refund"] != pins(front_tools(front))["create_refund"]


@pytest.mark.anyio
async def test_results_are_compact_json_text_and_failures_are_the_servers_words(
    razorpay_front: str, rail_sandbox: SandboxProcess
) -> None:
    rail_sandbox.add_payment("pay_RZPWORDS00001", 100000)
    async with Client(razorpay_front, mode="legacy", cache=None) as client:
        read = await client.call_tool("fetch_payment", {"payment_id": "pay_RZPWORDS00001"})
        unknown = await client.call_tool("fetch_payment", {"payment_id": "pay_RZPNOSUCH0001"})
        empty = await client.call_tool("create_refund", {})
        typed = await client.call_tool("create_refund", {"payment_id": 7, "amount": "500"})
        truncated = await client.call_tool("create_refund", {"payment_id": "pay_RZPWORDS00001", "amount": 500.7})
        over = await client.call_tool("create_refund", {"payment_id": "pay_RZPWORDS00001", "amount": 10**7})
        with pytest.raises(MCPError) as no_tool:
            await client.call_tool("fetch_balance", {})
    assert not read.is_error and read.structured_content is None
    entity = json.loads(text(read))
    assert entity["id"] == "pay_RZPWORDS00001"
    assert text(read) == json.dumps(entity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert unknown.is_error and text(unknown) == "fetching payment failed: The id provided does not exist"
    assert text(empty) == ("Validation errors:\n- missing required parameter: payment_id\n"
                           "- missing required parameter: amount")  # fmt: skip
    assert text(typed) == "Validation errors:\n- invalid parameter type: payment_id\n- invalid parameter type: amount"
    # The server reads amount as a float and sends int(amount): why Interlock refuses a float before it.
    assert not truncated.is_error and json.loads(text(truncated))["amount"] == 500
    assert over.is_error and text(over).startswith("creating refund failed: The refund amount provided is greater")
    assert no_tool.value.code == -32602 and no_tool.value.message == "tool 'fetch_balance' not found: tool not found"


def test_the_adapter_carries_the_stamps_and_reads_a_refusal_as_rejected(
    adapter: McpUpstreamRail, rail_sandbox: SandboxProcess
) -> None:
    pid, sik = "pay_RZPADAPT0001", "R" * 32
    rail_sandbox.add_payment(pid, 100000, prior_refunds=3)
    assert adapter.fetch_payment(pid).amount == 100000
    refund = adapter.create_refund(pid, 2500, notes=stamp_notes(sik, {"ticket": "T-1"}), receipt=receipt_for(sik),
                                   idempotency_key="ilk_" + sik)  # fmt: skip
    assert refund.carries_stamp(sik) and refund.amount == 2500
    (stored,) = [e["entity"] for e in rail_sandbox.entities("refund") if e["entity"]["id"] == refund.id]
    assert stored["receipt"] == "ilk_" + sik and stored["notes"] == {"ticket": "T-1", "interlock_sik": sik}
    assert not adapter.list_refunds_for_payment(pid, count=2, skip=2).exhausted
    assert adapter.list_refunds_for_payment(pid, count=2, skip=4).exhausted
    assert adapter.fetch_refund(refund.id).id == refund.id

    missing = failure(lambda: adapter.fetch_payment("pay_RZPNOSUCH0002"))
    over = failure(lambda: adapter.create_refund(pid, 10**7, notes=stamp_notes("S" * 32), receipt=receipt_for("S" * 32),
                                                 idempotency_key=None))  # fmt: skip
    reused = failure(lambda: adapter.create_refund(pid, 100, notes=stamp_notes(sik), receipt=receipt_for(sik),
                                                   idempotency_key=None))  # fmt: skip
    full = failure(lambda: adapter.create_instant_settlement(settle_full_balance=True, notes=None))
    assert missing.kind is RailErrorKind.REJECTED and missing.not_found
    assert over.kind is RailErrorKind.REJECTED and "greater than" in (over.description or "")
    assert reused.kind is RailErrorKind.REJECTED and "receipt" in (reused.description or "")
    # razorpay-mcp-server requires amount even with settle_full_balance: refused before any rail call.
    assert full.kind is RailErrorKind.REJECTED and full.field == "amount"
    assert rail_sandbox.count_stamped("S" * 32) == 0


def test_a_gateway_page_or_a_server_error_behind_the_upstream_is_ambiguous(
    adapter: McpUpstreamRail, rail_sandbox: SandboxProcess
) -> None:
    rail_sandbox.add_payment("pay_RZPGATE00001", 100000)
    seen = []
    for html, sik in ((1.0, "G" * 32), (0.0, "H" * 32)):
        rail_sandbox.set_faults([{"name": "ambiguous_504", "rate": 1.0, "params": {"html": html}}])
        try:
            seen.append(failure(lambda s=sik: adapter.create_refund(  # type: ignore[misc]
                "pay_RZPGATE00001", 1000, notes=stamp_notes(s), receipt=receipt_for(s), idempotency_key=None)))
        finally:
            rail_sandbox.clear_faults()
    page, server = seen
    assert page.kind is RailErrorKind.AMBIGUOUS and page.body == "creating refund failed:"
    assert server.kind is RailErrorKind.AMBIGUOUS and "The server encountered an error" in (server.body or "")
    assert rail_sandbox.count_stamped("G" * 32) == rail_sandbox.count_stamped("H" * 32) == 1, "both were applied"


def test_a_timeout_inside_the_upstream_is_ambiguous_and_the_refund_lands_late(
    tmp_path: Path, rail_sandbox: SandboxProcess
) -> None:
    # The upstream's own HTTP client gives up first (its SDK timeout, shortened here), then the rail applies.
    rail_sandbox.add_payment("pay_RZPSLOW00001", 100000)
    sik = "T" * 32
    env = {PROFILE_ENV: RAZORPAY, "INTERLOCK_SANDBOX_MCP_RAIL_TIMEOUT_MS": "500"}
    with front_process(tmp_path, rail_sandbox, env) as url:
        rail = McpUpstreamRail(UpstreamSession(UpstreamTarget(url=url), timeout_s=8))
        try:
            with rail_sandbox.slow_held():  # not answered before the upstream's 500 ms client gives up
                timed_out = failure(lambda: rail.create_refund("pay_RZPSLOW00001", 1000, notes=stamp_notes(sik),
                                                               receipt=receipt_for(sik),
                                                               idempotency_key=None))  # fmt: skip
                wait_for(lambda: rail_sandbox.health()["slow_waiting"] == 1, timeout=60)
        finally:
            rail.close()
    assert timed_out.kind is RailErrorKind.AMBIGUOUS
    assert timed_out.body is not None and timed_out.body.startswith('creating refund failed: Post "http')
    assert "context deadline exceeded (Client.Timeout exceeded while awaiting headers)" in timed_out.body
    wait_for(lambda: rail_sandbox.count_stamped(sik) == 1, timeout=60)


def test_the_send_window_still_holds_against_the_real_contract(
    adapter: McpUpstreamRail, rail_sandbox: SandboxProcess
) -> None:
    rail_sandbox.add_payment("pay_RZPWINDOW0001", 100000)
    late, sik = "W" * 32, "Y" * 32
    with send_window(time.monotonic() - 0.001):
        closed = failure(lambda: adapter.create_refund("pay_RZPWINDOW0001", 1000, notes=stamp_notes(late),
                                                       receipt=receipt_for(late), idempotency_key=None))  # fmt: skip
    assert closed.kind is RailErrorKind.NOT_SENT
    with send_window(time.monotonic() + 60):
        assert adapter.create_refund("pay_RZPWINDOW0001", 1000, notes=stamp_notes(sik), receipt=receipt_for(sik),
                                     idempotency_key=None).carries_stamp(sik)  # fmt: skip
    assert (rail_sandbox.count_stamped(late), rail_sandbox.count_stamped(sik)) == (0, 1)


def test_manifest_pin_shows_the_real_tools_and_that_settlements_have_no_balance_read(
    razorpay_front: str, rail_sandbox: SandboxProcess
) -> None:
    env = {**os.environ, **rail_sandbox.rail_env(), PROFILE_ENV: RAZORPAY}
    served = {name: {"sha256": digest} for name, digest in pins(front_tools(razorpay_front)).items()}
    stdio = f"{sys.executable} -m sandbox --mcp --stdio --rail-url {rail_sandbox.url}"
    for upstream in (razorpay_front, stdio):
        done = subprocess.run([*INTERLOCK, "manifest", "pin", "--upstream", upstream], capture_output=True,
                              text=True, timeout=60, env=env)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "# No balance tool (fetch_balance): create_instant_settlement" in done.stdout
        pinned = yaml.safe_load(done.stdout)["provenance"]["pinned_manifests"]
        assert set(pinned) == REAL_TOOLS and pinned == served, f"{upstream} serves the same manifest"
