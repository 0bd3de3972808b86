"""The official MCP client, over streamable HTTP and over stdio, against the multi-process stack:
real redis-server, real sandbox rail, real gate, rail and reconciler processes."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from deploy.agent_client import mcp_client, structured
from deploy.demo import run_demo
from tests.deploy.conftest import FullStack
from tests.mandates import AGENT
from tests.procs import wait_until

CONTRACT = {"state", "sik", "intent", "rail_entity_id", "reason_code", "caller_action", "replayed"}
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.anyio
async def test_the_demo_cases_over_http(full_stack_factory: Callable[..., FullStack]) -> None:
    full = full_stack_factory()
    lines: list[str] = []
    code = await run_demo(full.info, out=lines.append)
    assert code == 0, "\n".join(lines)
    assert lines[-1] == "demo: 9 passed, 0 failed"
    async with mcp_client(full.info.mcp_url, full.info.token()) as client:
        result = structured(await client.call_tool("create_refund", {"payment_id": full.payment(), "amount": 1000}))
    assert set(result) == CONTRACT
    assert set(result["intent"]) == {"merchant_id", "tool", "subject", "amount_minor", "currency"}


@pytest.mark.anyio
async def test_over_stdio(full_stack_factory: Callable[..., FullStack], tmp_path: Path) -> None:
    full = full_stack_factory()
    env = {k: v for k, v in full.stack.base_env().items() if k != "INTERLOCK_AGENT_TOKENS"}
    env["INTERLOCK_AGENT_ID"] = AGENT
    params = StdioServerParameters(command=sys.executable, args=["-m", "interlock.cli", "ingress", "--stdio"],
                                   env=env, cwd=REPO)
    pid = full.payment(189900)
    with (tmp_path / "stdio-ingress.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=60) as client:
            first = structured(await client.call_tool("create_refund", {"payment_id": pid, "amount": 60000}))
            assert set(first) == CONTRACT
            assert (first["state"], first["caller_action"], first["replayed"]) == ("APPLIED", "DONE", False)
            for _ in range(5):
                again = structured(await client.call_tool("create_refund", {"payment_id": pid, "amount": 60000}))
                assert (again["state"], again["replayed"]) == ("APPLIED", True)
                assert again["rail_entity_id"] == first["rail_entity_id"]
            over = structured(await client.call_tool("create_refund", {"payment_id": pid, "amount": 4800000}))
            assert (over["state"], over["reason_code"], over["caller_action"]) == (
                "BLOCKED", "G2_EXCEEDS_REFUNDABLE", "DO_NOT_RETRY")
    assert full.control.count_stamped(first["sik"]) == 1


@pytest.mark.anyio
async def test_bad_input_records_nothing_and_the_ingress_keeps_serving(
    full_stack_factory: Callable[..., FullStack],
) -> None:
    full = full_stack_factory()
    pid = full.payment()
    bad = [
        ("create_refund", {"payment_id": pid, "amount": 1899.0}),
        ("create_refund", {"payment_id": pid, "amount": "1899"}),
        ("create_refund", {"payment_id": pid, "amount": 2**70}),
        ("create_refund", {"amount": 100}),
        ("create_refund", {"payment_id": pid, "amount": 100, "currency": "USD"}),
        ("create_payout", {"amount": 100}),
    ]
    async with mcp_client(full.info.mcp_url, full.info.token()) as client:
        for tool, arguments in bad:
            result = await client.call_tool(tool, arguments)
            assert result.is_error, (tool, arguments)
            assert structured(result)["error"]["message"]
        ok = structured(await client.call_tool("create_refund", {"payment_id": pid, "amount": 100}))
    assert ok["state"] == "APPLIED"
    assert full.intents_count() == 1, "no malformed call may leave an intent"
    response = httpx.post(full.info.mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                          headers={"Authorization": "Bearer wrong"}, timeout=10)  # fmt: skip
    assert response.status_code == 401


@pytest.mark.anyio
async def test_a_gate_worker_killed_mid_flight_never_causes_a_second_entity(
    full_stack_factory: Callable[..., FullStack],
) -> None:
    full = full_stack_factory(env={"INTERLOCK_OUTCOME_WAIT_MS": "3000"}, kill_at={"gate": "gate.after_resolve"})
    gate = full.stack.actors["gate1"]
    pid = full.payment()
    async with mcp_client(full.info.mcp_url, full.info.token()) as client:
        first = structured(await client.call_tool("create_refund", {"payment_id": pid, "amount": 77700}))
        assert (first["state"], first["caller_action"]) == ("IN_PROGRESS", "RETRY_SAME_CALL")
        wait_until(lambda: not gate.alive(), timeout=60, what="the gate worker to die")
        assert gate.returncode() == -9
        full.stack.start_actor("gate1", ["gate-worker"])  # restarted without the failpoint
        # What the agent is told to do: repeat the same call until the answer is definite (however long the
        # restarted worker takes to start on a busy machine; 90 s only detects one that never answers).
        deadline = time.monotonic() + 90
        while True:
            again = structured(await client.call_tool("create_refund", {"payment_id": pid, "amount": 77700}))
            if again["state"] != "IN_PROGRESS" or time.monotonic() > deadline:
                break
        assert again["state"] == "APPLIED", again
    assert full.control.count_stamped(again["sik"]) == 1
    assert full.intents_count() == 1


@pytest.mark.anyio
async def test_the_demo_says_which_failed_rows_need_the_example_mandate(
    full_stack_factory: Callable[..., FullStack], tmp_path: Path,
) -> None:
    """On a mandate without the payout grant the two payout rows fail; the demo says that is what they check
    (issue 48 item 4), and every other row passes."""
    import yaml

    from tests.mandates import make_mandate

    mandate = make_mandate(drop=("scope.grants.create_payout", "idempotency.create_payout"))
    path = tmp_path / "no-payouts.yaml"
    path.write_text(yaml.safe_dump(mandate.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    full = full_stack_factory(env={"INTERLOCK_MANDATE": str(path)})
    lines: list[str] = []
    code = await run_demo(full.info, out=lines.append)
    assert code == 1 and lines[-1] == "demo: 7 passed, 2 failed", "\n".join(lines)
    failed = [line for line in lines if line.startswith("FAIL")]
    assert len(failed) == 2 and all("payout" in line for line in failed), failed
    assert "They need: create_payout granted, fa_DEMOVENDOR0001 on its payees" in lines[-2], lines[-2]
