"""`interlock bench perf --shards 1,2,4`: money calls per second against the number of shards (SPEC §15).

For each shard count and each rail-worker concurrency, a fresh sharded stack (deploy.sharded: per shard
its own redis-server, ledger, rail worker, gate worker and reconciler; one ingress over the map) on one
sandbox rail that holds every call for --latency-ms. Each shard has one agent (its merchant pinned to it)
driven by --shard-agents concurrent MCP clients, each making --shard-calls refunds on distinct payments.
Throughput is APPLIED calls over the window from every client connected to the last answer.

For sizing it also counts, over the same window, the commands every shard's Redis processed (INFO stats:
total_commands_processed, background polling included) and how much every ledger grew (page_count x
page_size, WAL included), each divided by the APPLIED calls.

With the rail worker's concurrency held small, the rail worker is the bottleneck (at most concurrency /
latency calls per second per shard) and each shard adds its own. At the default (64) a shard's rail worker
could take 64 / latency; what limits those rows is the offered load (clients / per-call time) or this
machine's CPUs, which every shard and the bench's own clients share — the section states how many CPUs
there are and how loaded they were.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from bench.env import mandate_data
from bench.perf_rig import PAYMENT, PERF_ENV, PERF_MANDATE, REFUND
from deploy.agent_client import SandboxControl, mcp_client, structured
from deploy.sharded import Agent, ShardedStack
from deploy.stack import Stack
from interlock.results import commit_id


@dataclass(frozen=True)
class ShardsSample:
    shards: int
    rail_concurrency: int
    clients: int
    calls: int
    applied: int
    window_s: float
    redis_commands: int = 0
    ledger_bytes: int = 0

    @property
    def per_second(self) -> float:
        return self.applied / self.window_s if self.window_s else 0.0


async def _drive(url: str, tokens: list[str], payments: list[list[str]]) -> tuple[int, int, float]:
    """Every client connects, then all start together; returns (calls, applied, window seconds)."""
    connected = 0
    go = asyncio.Event()
    started = 0.0
    results: list[str | None] = []

    async def client(token: str, mine: list[str]) -> None:
        nonlocal connected, started
        async with mcp_client(url, token) as session:
            connected += 1
            if connected == len(tokens):
                started = time.perf_counter()
                go.set()
            await go.wait()
            for pid in mine:
                answer = structured(await session.call_tool("create_refund", {"payment_id": pid, "amount": REFUND}))
                results.append(answer.get("state"))

    await asyncio.gather(*(client(t, p) for t, p in zip(tokens, payments, strict=True)))
    return len(results), sum(1 for state in results if state == "APPLIED"), time.perf_counter() - started


def measure(base: Path, rail_env: dict[str, str], control: SandboxControl, shards: int, rail_concurrency: int,
            clients_per_shard: int, calls_per_client: int) -> ShardsSample:  # fmt: skip
    names = tuple(f"s{i}" for i in range(shards))
    env = {**rail_env, **PERF_ENV, "INTERLOCK_RAIL_CONCURRENCY": str(rail_concurrency)}
    stack = ShardedStack(base / f"shards{shards}-k{rail_concurrency}", names, env=env)
    agents = []
    for name in names:
        data = mandate_data(PERF_MANDATE)
        data.update(agent_id=f"agent_{name}", merchant_id=f"acc_BENCH_{name}", mandate_id=f"mnd_bench_{name}")
        agents.append(Agent(f"agent_{name}", f"bench-token-{name}-5e1f", data, shard=name))
    counter = iter(range(10**9))
    payments = []
    tokens = []
    for agent in agents:
        for _ in range(clients_per_shard):
            mine = [f"pay_sh{shards}k{rail_concurrency}n{next(counter)}" for _ in range(calls_per_client)]
            for pid in mine:
                control.add_payment(pid, PAYMENT)
            payments.append(mine)
            tokens.append(agent.token)
    stack.start(agents)
    try:
        before = _redis_commands(stack), _ledger_bytes(stack)
        calls, applied, window = asyncio.run(_drive(stack.mcp_url, tokens, payments))
        after = _redis_commands(stack), _ledger_bytes(stack)
    finally:
        stack.stop()
    return ShardsSample(shards, rail_concurrency, len(tokens), calls, applied, window, after[0] - before[0],
                        after[1] - before[1])  # fmt: skip


def _redis_commands(stack: ShardedStack) -> int:
    total = 0
    for shard in stack.shards.values():
        client = redis.Redis.from_url(shard.redis_url or "")
        try:
            info: dict[str, int] = client.info("stats")  # type: ignore[assignment]  # sync client
            total += int(info["total_commands_processed"])
        finally:
            client.close()
    return total


def _ledger_bytes(stack: ShardedStack) -> int:
    total = 0
    for shard in stack.shards.values():
        conn = sqlite3.connect(f"file:{shard.ledger_path}?mode=ro", uri=True)
        try:
            total += int(conn.execute("PRAGMA page_count").fetchone()[0]) * int(
                conn.execute("PRAGMA page_size").fetchone()[0])
        finally:
            conn.close()
    return total


def run_shards(base: Path, shard_counts: tuple[int, ...], concurrencies: tuple[int, ...], latency_ms: int,
               clients_per_shard: int, calls_per_client: int,
               echo: Callable[[str], None] = print) -> list[ShardsSample]:  # fmt: skip
    rail = Stack(base / "rail")
    rail.data_dir.mkdir(parents=True, exist_ok=True)
    url = rail.start_sandbox(seed=0)
    rail_env = {k: rail.env[k] for k in ("INTERLOCK_RAIL_URL", "INTERLOCK_RAIL_KEY_ID", "INTERLOCK_RAIL_KEY_SECRET")}
    control = SandboxControl(url, rail_env["INTERLOCK_RAIL_KEY_ID"], rail_env["INTERLOCK_RAIL_KEY_SECRET"])
    samples = []
    try:
        if latency_ms:
            control.set_faults([{"name": "slow", "rate": 1.0, "scope": "all", "params": {"delay_ms": latency_ms}}])
        for concurrency in concurrencies:
            for shards in shard_counts:
                sample = measure(base, rail_env, control, shards, concurrency, clients_per_shard, calls_per_client)
                echo(f"shards {shards}, rail concurrency {concurrency:>3}: {sample.applied}/{sample.calls} APPLIED "
                     f"in {sample.window_s:.1f} s = {sample.per_second:.1f} calls/s")  # fmt: skip
                samples.append(sample)
    finally:
        control.close()
        rail.stop()
    return samples


def summary(samples: list[ShardsSample], concurrency: int, latency_ms: int) -> str:
    rows = ", ".join(f"{s.shards} -> {s.per_second:.1f}/s" for s in samples if s.rail_concurrency == concurrency)
    return f"shards: {rows} at {latency_ms} ms rail (rail concurrency {concurrency})"


def load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def render(samples: list[ShardsSample], *, latency_ms: int, command: str, load_at_start: float) -> str:
    cpus = os.cpu_count() or 1
    load_now = load_average()
    load = f"load average {load_at_start:.2f} at the start, {load_now:.2f} at the end (1 min)"
    # The load at the end counts the bench's own processes; only what ran before it says other work shared the CPUs.
    if load_at_start > cpus / 2:
        load += (" — **a loaded machine**: other work shared these CPUs, so the numbers (the CPU-bound rows "
                 "above all) are a floor, not this design's ceiling")
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    concurrencies = sorted({s.rail_concurrency for s in samples})
    lines = [
        "## Throughput against shards",
        "",
        f"Evidence: **real processes** (per shard its own redis-server, ledger, rail worker, gate worker and "
        f"reconciler; one HTTP ingress over the shard map; one sandbox rail holding every call {latency_ms} ms), "
        f"**scripted agent** (MCP clients). Commit `{commit_id()}`, {when}, {load}, on **{cpus} CPUs**, "
        f"all shards on this one machine. Reproduce: `{command}`.",
        "",
        "Rail-worker ceiling per shard = rail concurrency / rail latency "
        f"({', '.join(f'{k}: {k * 1000 / latency_ms:.0f}/s' for k in concurrencies) if latency_ms else 'n/a'}); "
        "a row below its ceiling is bounded by the offered load or by the CPUs.",
        "",
        *(summary(samples, k, latency_ms) for k in concurrencies),
        "",
        "| shards | rail concurrency | MCP clients | calls | APPLIED | window | calls/s | calls/s per shard "
        "| Redis commands per call | ledger bytes per call |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in samples:
        per_call = max(s.applied, 1)
        lines.append(f"| {s.shards} | {s.rail_concurrency} | {s.clients} | {s.calls} | {s.applied} | "
                     f"{s.window_s:.1f} s | {s.per_second:.1f} | {s.per_second / s.shards:.1f} | "
                     f"{s.redis_commands / per_call:.0f} | {s.ledger_bytes / per_call:.0f} |")  # fmt: skip
    return "\n".join(lines) + "\n"
