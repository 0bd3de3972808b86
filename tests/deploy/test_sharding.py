"""Sharding by merchant with real processes (SPEC §15): three shards on one machine, each its own Redis,
ledger and actors, one ingress routing by the shard map. A merchant's intents live in exactly one ledger."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from deploy.agent_client import mcp_client, structured
from sandbox.testing import SandboxProcess
from tests.deploy.sharding import Sharded, start_sharded

CALLS_PER_AGENT = 6


@pytest.fixture
def sharded(tmp_path: Path, rail_sandbox: SandboxProcess) -> Iterator[Sharded]:
    stacks = start_sharded(tmp_path, rail_sandbox)
    yield stacks
    stacks.stop()
    rail_sandbox.clear_faults()


async def refunds(sharded: Sharded, shard: str, payments: list[str], amount: int = 1000) -> list[dict[str, Any]]:
    """One agent (the merchant assigned to *shard*) refunding each payment, all calls concurrently."""
    results: list[dict[str, Any]] = []
    async with mcp_client(sharded.mcp_url, sharded.tokens[shard]) as client:

        async def one(pid: str) -> None:
            results.append(structured(await client.call_tool("create_refund", {"payment_id": pid, "amount": amount})))

        async with anyio.create_task_group() as group:
            for pid in payments:
                group.start_soon(one, pid)
    return results


@pytest.mark.anyio
async def test_three_merchants_on_three_shards_each_applied_once_in_its_own_shards_ledger_only(
    sharded: Sharded,
) -> None:
    payments = {shard: [sharded.payment() for _ in range(CALLS_PER_AGENT)] for shard in sharded.shards}
    answers: dict[str, list[dict[str, Any]]] = {}

    async def agent(shard: str) -> None:
        answers[shard] = await refunds(sharded, shard, payments[shard])

    async with anyio.create_task_group() as group:
        for shard in sharded.shards:
            group.start_soon(agent, shard)

    for shard, merchant in sharded.merchants.items():
        assert [a["state"] for a in answers[shard]] == ["APPLIED"] * CALLS_PER_AGENT, answers[shard]
        assert {a["intent"]["merchant_id"] for a in answers[shard]} == {merchant}
        rows = sharded.ledger_rows(shard)
        # exactly this merchant's calls, each once, in this shard's ledger and in no other
        assert sorted(sik for _, sik, _ in rows) == sorted(a["sik"] for a in answers[shard])
        assert {(m, s) for m, _, s in rows} == {(merchant, "APPLIED")}
        for sik in (a["sik"] for a in answers[shard]):
            assert sharded.control.count_stamped(sik) == 1  # one money movement per call on the rail
    assert sum(len(sharded.ledger_rows(s)) for s in sharded.shards) == 3 * CALLS_PER_AGENT
