"""Sharding by merchant with real processes (SPEC §15): three shards on one machine, each its own Redis,
ledger and actors, one ingress routing by the shard map. A merchant's intents live in exactly one ledger."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from deploy.agent_client import mcp_client, structured
from interlock.shards import load_shard_map
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


def in_flight(sharded: Sharded, shard: str) -> int:
    return sum(1 for _, _, state in sharded.ledger_rows(shard) if state == "IN_FLIGHT")


@pytest.mark.anyio
async def test_a_merchant_routed_by_hash_lands_on_the_same_shard_across_processes_and_restarts(
    tmp_path: Path, rail_sandbox: SandboxProcess
) -> None:
    merchant = "acc_HASHED_0042"
    sharded = start_sharded(tmp_path, rail_sandbox, hashed=(merchant,))
    try:
        home = load_shard_map(sharded.map_path).shard_of(merchant)  # computed here, in the test's process
        assert merchant not in load_shard_map(sharded.map_path).merchants
        pid = sharded.payment()
        [first] = await refunds(sharded, merchant, [pid])
        sharded.ingress.restart("ingress")  # a new ingress process reads the same map
        sharded.ingress.wait_for_ingress()
        [again] = await refunds(sharded, merchant, [pid])
    finally:
        sharded.stop()
    assert (first["state"], again["state"], again["replayed"]) == ("APPLIED", "APPLIED", True)
    assert again["sik"] == first["sik"]
    for shard in sharded.shards:
        mine = [row for row in sharded.ledger_rows(shard) if row[0] == merchant]
        assert mine == ([(merchant, first["sik"], "APPLIED")] if shard == home else [])
    assert sharded.control.count_stamped(first["sik"]) == 1


@pytest.fixture
def patient(tmp_path: Path, rail_sandbox: SandboxProcess) -> Iterator[Sharded]:
    """Shards whose rail calls may take 8 s (and whose leases outlast that): a call the rail answers in 800 ms is
    APPLIED on a busy machine too."""
    stacks = start_sharded(tmp_path, rail_sandbox, env={"INTERLOCK_RAIL_TIMEOUT_MS": "8000",
                                                        "INTERLOCK_LEASE_TTL_MS": "10000"})  # fmt: skip
    yield stacks
    stacks.stop()
    rail_sandbox.clear_faults()


@pytest.mark.anyio
async def test_killing_one_shards_rail_worker_and_redis_mid_burst_touches_no_other_shard(patient: Sharded) -> None:
    sharded, victim, others = patient, "s1", ["s0", "s2"]
    # Every money call takes 800 ms at the rail (well under the rail timeout), so the kill lands while the
    # victim's calls are in flight; the other shards see the same rail and must just finish.
    sharded.rail.set_faults([{"name": "slow", "rate": 1.0, "params": {"delay_ms": 800}}])
    payments = {shard: [sharded.payment() for _ in range(CALLS_PER_AGENT)] for shard in sharded.shards}
    answers: dict[str, list[dict[str, Any]]] = {}
    killed = anyio.Event()

    async def agent(shard: str) -> None:
        answers[shard] = await refunds(sharded, shard, payments[shard])

    async def killer() -> None:
        with anyio.fail_after(60):
            while await anyio.to_thread.run_sync(in_flight, sharded, victim) < 1:
                await anyio.sleep(0.02)
        stack = sharded.shards[victim]
        stack.actors["rail"].kill()  # SIGKILL, by pid
        assert stack.redis is not None
        stack.redis.kill()
        killed.set()

    async with anyio.create_task_group() as group:
        group.start_soon(killer)
        for shard in sharded.shards:
            group.start_soon(agent, shard)
    assert killed.is_set()

    # The other shards: every call APPLIED, no error, each once, in their own ledgers.
    for shard in others:
        assert [a.get("state") for a in answers[shard]] == ["APPLIED"] * CALLS_PER_AGENT, answers[shard]
        assert {(m, s) for m, _, s in sharded.ledger_rows(shard)} == {(sharded.merchants[shard], "APPLIED")}
    # The victim's calls answered without a definite outcome (or had it before the kill), never an error
    # that says anything but "repeat the same call".
    for answer in answers[victim]:
        if answer.get("error") is not None:
            assert answer["caller_action"] == "RETRY_SAME_CALL", answer
        else:
            assert answer["state"] in ("APPLIED", "IN_PROGRESS", "UNKNOWN"), answer
    assert any(a.get("state") != "APPLIED" for a in answers[victim]), answers[victim]

    # Restart the victim shard: its Redis (same port, same AOF), then its rail worker (which waits out the
    # dead one's lease), gate worker and reconciler. Repeating each call settles it by its SIK.
    sharded.rail.clear_faults()
    stack = sharded.shards[victim]
    assert stack.redis is not None
    stack.redis.start()
    for name in ("gate1", "reconciler"):
        stack.actors[name].kill()
    stack.start_actor("rail", ["rail-worker", "--wait-lease", "60"])
    stack.start_actor("gate1", ["gate-worker"])
    stack.start_actor("reconciler", ["reconciler"])
    with anyio.fail_after(120):
        while True:
            again = await refunds(sharded, victim, payments[victim])
            if all(a.get("state") == "APPLIED" for a in again):
                break
            await anyio.sleep(0.5)
    rows = sharded.ledger_rows(victim)
    assert len(rows) == CALLS_PER_AGENT and {(m, s) for m, _, s in rows} == {(sharded.merchants[victim], "APPLIED")}
    for _, sik, _ in rows:
        assert sharded.control.count_stamped(sik) == 1  # 0 duplicates: one money movement per call
    for shard in others:  # untouched by the victim's recovery
        assert len(sharded.ledger_rows(shard)) == CALLS_PER_AGENT
