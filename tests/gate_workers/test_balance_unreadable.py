"""A rail with no balance read at all is not an outage (issue 13, item 11): a settlement against it is
refused with G2_BALANCE_UNREADABLE and DO_NOT_RETRY, and the agent is told what is missing — while a
real outage stays G2_RAIL_UNAVAILABLE with RETRY_SAME_CALL."""

from __future__ import annotations

import json
import socket
import sqlite3

import pytest
from mcp_types import TextContent, Tool

from gate_workers.context import GateContext
from gate_workers.jobs import GateRuntime, build_decision, decide
from gate_workers.resolve import resolve
from ingress.results import money_outcome
from interlock.clock import now_ms
from interlock.config import Settings
from interlock.mandate import MandateStore
from interlock.messages import Decision, Proposal, Verdict
from interlock.tools import current_pins
from rail_worker.admit import admit
from rail_worker.runtime import RailRuntime
from rails.models import Balance, Payment
from rails.razorpay import RazorpayClient
from rails.upstream_manifest import ManifestCache
from rails.upstream_tools import ToolMap
from sandbox.testing import SandboxProcess
from tests.mandates import AGENT, MERCHANT, make_mandate


def settlement(request_id: str = "r_settle") -> Proposal:
    return Proposal(request_id=request_id, agent_id=AGENT, merchant_id=MERCHANT, tool="create_instant_settlement",
                    arguments={"amount": 30_000}, received_at_ms=now_ms())  # fmt: skip


def judged(rail: object, ledger: sqlite3.Connection) -> Decision:
    mandate = make_mandate()
    action = resolve(settlement(), rail, ledger, mandate, now_ms())  # type: ignore[arg-type]
    ctx = GateContext(mandate=mandate, now_ms=now_ms(), ledger=ledger, tool_hashes=current_pins())
    return build_decision(action, ctx, mandate)


def test_a_rail_without_a_balance_endpoint_is_refused_for_good_naming_it(
    rail_sandbox: SandboxProcess, ledger: sqlite3.Connection, rail_rt: RailRuntime
) -> None:
    # Razorpay has no GET /v1/balance and answers an unknown URL with 400 "The requested URL was not found
    # on the server."; a path prefix the sandbox does not serve gets that very answer from it.
    no_balance = RazorpayClient(rail_sandbox.url + "/no-such-api", rail_sandbox.key_id, rail_sandbox.key_secret,
                                timeout_ms=5000)  # fmt: skip
    decision = judged(no_balance, ledger)
    assert (decision.verdict, decision.reason_code, decision.sik) == (Verdict.BLOCK, "G2_BALANCE_UNREADABLE", None)
    g2 = next(r for r in decision.results if r.gate == "G2")
    assert "balance read" in g2.detail["missing"] and "/v1/balance" in g2.detail["missing"]
    outcome = admit(rail_rt, decision).outcome
    assert outcome is not None
    assert (outcome.state, outcome.reason_code, outcome.caller_action) == (
        "BLOCKED", "G2_BALANCE_UNREADABLE", "DO_NOT_RETRY")
    # What the agent reads: the structured answer, and in words what is missing and that repeating will not help.
    result = money_outcome(outcome.structured())
    words = " ".join(c.text for c in result.content if isinstance(c, TextContent))
    assert json.loads(result.content[0].text)["caller_action"] == "DO_NOT_RETRY"  # type: ignore[union-attr]
    assert "balance read" in words and "GET /v1/balance" in words and "fetch_balance" in words
    assert "Repeating the call gets the same answer" in words


def test_a_rail_outage_is_still_transient(ledger: sqlite3.Connection, rail_rt: RailRuntime) -> None:
    with socket.socket() as sock:  # a port nobody listens on: connection refused, nothing sent
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    down = RazorpayClient(f"http://127.0.0.1:{port}", "k", "s", timeout_ms=2000)
    decision = judged(down, ledger)
    assert decision.reason_code == "G2_RAIL_UNAVAILABLE"
    outcome = admit(rail_rt, decision).outcome
    assert outcome is not None and outcome.caller_action == "RETRY_SAME_CALL"
    words = " ".join(c.text for c in money_outcome(outcome.structured()).content if isinstance(c, TextContent))
    assert "repeating the same call is safe" in words


class UpstreamWithoutBalance:
    """An upstream MCP server like razorpay-mcp-server: payments and settlements, no balance tool."""

    def list_tools(self) -> list[Tool]:
        return [Tool(name=name, input_schema={"type": "object"})
                for name in ("fetch_payment", "create_refund", "create_instant_settlement")]  # fmt: skip

    def fetch_payment(self, payment_id: str) -> Payment:
        raise AssertionError("not read")

    def fetch_balance(self) -> Balance:
        raise AssertionError("the upstream has no balance tool: it must not be called")


def test_an_upstream_without_a_balance_tool_is_refused_naming_the_tool(ledger: sqlite3.Connection) -> None:
    upstream = UpstreamWithoutBalance()
    rt = GateRuntime(settings=Settings(), mandates=MandateStore({AGENT: make_mandate()}), rail=upstream,
                     ledger=ledger, redis=None, tool_hashes={},  # type: ignore[arg-type]
                     upstream=ManifestCache(upstream, ttl_ms=0))  # fmt: skip
    decision = decide(settlement(), rt)
    assert decision.reason_code == "G2_BALANCE_UNREADABLE" and decision.sik is None
    g2 = next(r for r in decision.results if r.gate == "G2")
    assert g2.detail["missing"] == "a balance read: the upstream MCP server lists no 'fetch_balance' tool"


class UpstreamWithRenamedBalance(UpstreamWithoutBalance):
    """An upstream whose balance tool Interlock reads under another name (INTERLOCK_UPSTREAM_TOOLS)."""

    def __init__(self, balance_tool: str | None) -> None:
        self.tools = ToolMap.parse(json.dumps({"fetch_balance": balance_tool}))

    def list_tools(self) -> list[Tool]:
        return [*super().list_tools(), Tool(name="get_settlement_balance", input_schema={"type": "object"})]


@pytest.mark.parametrize(("balance_tool", "missing"), [
    (None, "a balance read: INTERLOCK_UPSTREAM_TOOLS maps fetch_balance to no upstream tool"),
    ("get_balance", "a balance read: the upstream MCP server lists no 'get_balance' tool"),
])  # fmt: skip
def test_the_balance_tool_is_looked_for_under_its_mapped_name(
    ledger: sqlite3.Connection, balance_tool: str | None, missing: str
) -> None:
    upstream = UpstreamWithRenamedBalance(balance_tool)
    rt = GateRuntime(settings=Settings(), mandates=MandateStore({AGENT: make_mandate()}), rail=upstream,
                     ledger=ledger, redis=None, tool_hashes={},  # type: ignore[arg-type]
                     upstream=ManifestCache(upstream, ttl_ms=0))  # fmt: skip
    assert rt.missing_balance_read() == missing
    found = UpstreamWithRenamedBalance("get_settlement_balance")
    rt.rail, rt.upstream = found, ManifestCache(found, ttl_ms=0)
    assert rt.missing_balance_read() is None
