"""The performance bench: direct vs gated in one run against one sandbox rail.

* added latency per money call (p50/p99), sequential, at 0 ms and at a configurable rail latency (the
  sandbox's `slow` fault at rate 1 with scope `all`, so reads are as slow as money calls);
* throughput of money calls with C concurrent agents and one rail worker, at both latencies;
* gate decisions per second with 1, 2 and 4 gate workers (the rail worker stopped, so only the gates
  are measured: proposals in on "gates", decisions counted as they land on "rail");
* the machine's SQLite WAL + synchronous=FULL commit time, the physical floor of every ledger write.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench.env import AGENT, TOKEN, mandate_data, write_mandate
from bench.metrics import percentile
from ingress.tokens import token_sha256
from interlock.agent_client import SandboxControl, mcp_client, structured
from interlock.clock import now_ms
from interlock.messages import Proposal
from interlock.queues import GATE_JOB, gates_queue, rail_queue, rq_queue
from interlock.stack import Stack, wait_for
from rails.razorpay import RailError, RazorpayClient

MERCHANT = "acc_DEMO000001"
REFUND = 10_000  # Rs 100 on a Rs 1,000 payment: inside every limit, below the hold threshold
# Limits lifted so the bench measures the machinery, not the mandate's daily caps.
PERF_MANDATE = {
    "limits.windows": [{"window_ms": 86_400_000, "max_calls": 10_000_000, "max_amount_minor": 10**13,
                        "currency": "INR"}],  # fmt: skip
    "limits.fee_budgets": {"INR": {"window_ms": 86_400_000, "max_fee_minor": 10**12}},
}
PERF_ENV = {"INTERLOCK_RAIL_TIMEOUT_MS": "5000", "INTERLOCK_OUTCOME_WAIT_MS": "60000",
            "INTERLOCK_LEASE_TTL_MS": "30000"}  # fmt: skip


@dataclass(frozen=True)
class PerfConfig:
    latency_ms: int = 200
    calls: int = 200
    slow_calls: int = 30
    concurrency: tuple[int, ...] = (1, 8, 32)
    gate_workers: tuple[int, ...] = (1, 2, 4)
    decisions: int = 400
    throughput_calls: int = 48  # per concurrency level at 0 ms (at least 2 per agent)
    slow_throughput_calls: int = 16  # per concurrency level at the slow rail


@dataclass
class LatencySample:
    mode: str
    rail_ms: int
    latencies_ms: list[float]
    failures: int

    @property
    def p50(self) -> float:
        return percentile(self.latencies_ms, 50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies_ms, 99)


@dataclass
class ThroughputSample:
    mode: str
    rail_ms: int
    agents: int
    calls: int
    applied: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.applied / self.seconds if self.seconds else 0.0


@dataclass
class PerfReport:
    config: PerfConfig
    sqlite_commit_ms: list[float] = field(default_factory=list)
    latency: list[LatencySample] = field(default_factory=list)
    throughput: list[ThroughputSample] = field(default_factory=list)
    decisions: dict[int, float] = field(default_factory=dict)  # gate workers -> decisions per second
    throughput_gate_workers: int = 0


def sqlite_commit_floor(directory: Path, commits: int = 200) -> list[float]:
    """Milliseconds per one-row commit under WAL + synchronous=FULL, on the filesystem of *directory*."""
    path = directory / "floor.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v TEXT) STRICT")
        times = []
        for i in range(commits):
            started = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (v) VALUES (?)", (f"row {i}",))
            conn.execute("COMMIT")
            times.append((time.perf_counter() - started) * 1000)
        return times
    finally:
        conn.close()


class PerfRig:
    """One stack (sandbox, Redis, engine, HTTP ingress) and a supply of fresh payments."""

    def __init__(self, base: Path, gate_workers: int) -> None:
        self.base = base
        self.stack = Stack(base / "stack", env=dict(PERF_ENV), gate_workers=gate_workers)
        self._next = 0
        self.url = ""
        self.control: SandboxControl | None = None

    def start(self) -> PerfRig:
        stack = self.stack
        stack.data_dir.mkdir(parents=True, exist_ok=True)
        stack.start_redis()
        rail_url = stack.start_sandbox(seed=0)
        self.control = SandboxControl(rail_url, stack.env["INTERLOCK_RAIL_KEY_ID"],
                                      stack.env["INTERLOCK_RAIL_KEY_SECRET"])  # fmt: skip
        mandate = write_mandate(stack.data_dir / "mandate.yaml", mandate_data(PERF_MANDATE))
        tokens = stack.data_dir / "tokens.yaml"
        tokens.write_text(f"agents:\n  {AGENT}: {{token_sha256: {token_sha256(TOKEN)}}}\n", encoding="utf-8")
        stack.env["INTERLOCK_MANDATE"] = str(mandate)
        self.url = stack.start_ingress(tokens_file=tokens, wait=False)
        stack.start_engine()
        stack.wait_for_ingress()
        return self

    def payments(self, n: int) -> list[str]:
        assert self.control is not None
        ids = []
        for _ in range(n):
            self._next += 1
            pid = f"pay_perf{self._next}"
            self.control.add_payment(pid, 100_000)
            ids.append(pid)
        return ids

    def rail_latency(self, ms: int) -> None:
        assert self.control is not None
        faults = [{"name": "slow", "rate": 1.0, "scope": "all", "params": {"delay_ms": ms}}] if ms else []
        self.control.set_faults(faults)

    def direct_client(self) -> RazorpayClient:
        env = self.stack.env
        return RazorpayClient(env["INTERLOCK_RAIL_URL"], env["INTERLOCK_RAIL_KEY_ID"], env["INTERLOCK_RAIL_KEY_SECRET"],
                              timeout_ms=30_000)  # fmt: skip

    def stop(self) -> None:
        if self.control is not None:
            self.control.close()
        self.stack.kill_all()


def _direct_refund(client: RazorpayClient, payment_id: str) -> tuple[bool, float]:
    started = time.perf_counter()
    try:
        client.create_refund(payment_id, REFUND, notes=None, receipt=None, idempotency_key=uuid.uuid4().hex)
        ok = True
    except RailError:
        ok = False
    return ok, (time.perf_counter() - started) * 1000


async def _direct_agents(rig: PerfRig, payments: list[list[str]]) -> list[tuple[bool, float]]:
    client = rig.direct_client()
    loop = asyncio.get_running_loop()
    results: list[tuple[bool, float]] = []
    with ThreadPoolExecutor(max_workers=len(payments)) as pool:

        async def agent(mine: list[str]) -> None:
            for pid in mine:
                results.append(await loop.run_in_executor(pool, _direct_refund, client, pid))

        await asyncio.gather(*(agent(mine) for mine in payments))
    client.close()
    return results


async def _gated_agents(rig: PerfRig, payments: list[list[str]]) -> list[tuple[bool, float]]:
    results: list[tuple[bool, float]] = []

    async def agent(mine: list[str]) -> None:
        async with mcp_client(rig.url, TOKEN, timeout_s=120) as client:
            for pid in mine:
                started = time.perf_counter()
                answer = structured(await client.call_tool("create_refund", {"payment_id": pid, "amount": REFUND}))
                results.append((answer.get("state") == "APPLIED", (time.perf_counter() - started) * 1000))

    await asyncio.gather(*(agent(mine) for mine in payments))
    return results


def _split(ids: list[str], agents: int) -> list[list[str]]:
    return [ids[i::agents] for i in range(agents)]


def run_agents(rig: PerfRig, mode: str, agents: int, calls: int) -> tuple[list[tuple[bool, float]], float]:
    payments = _split(rig.payments(calls), agents)
    started = time.perf_counter()
    runner = _gated_agents if mode == "gated" else _direct_agents
    results = asyncio.run(runner(rig, payments))
    return results, time.perf_counter() - started


def measure_decisions(rig: PerfRig, workers: int, proposals: int, payments: list[str]) -> float:
    """Decisions per second of *workers* gate workers alone (the rail worker is stopped by the caller)."""
    stack = rig.stack
    names = [f"perfgate{workers}_{i}" for i in range(workers)]
    for name in names:
        stack.start_actor(name, ["gate-worker"])
    client = redis.Redis.from_url(stack.redis_url or "")
    try:
        from rq import Worker

        wait_for(lambda: len(Worker.all(queue=rq_queue(gates_queue(), client))) >= workers, timeout=60,
                 what=f"{workers} gate workers to register")  # fmt: skip
        rail = rq_queue(rail_queue(), client)
        gates = rq_queue(gates_queue(), client)

        def batch(n: int, first_amount: int) -> float:
            jobs = []
            for i in range(n):
                request_id = uuid.uuid4().hex
                proposal = Proposal(request_id=request_id, agent_id=AGENT, merchant_id=MERCHANT, tool="create_refund",
                                    arguments={"payment_id": payments[i % len(payments)], "amount": first_amount + i},
                                    received_at_ms=now_ms())  # fmt: skip
                jobs.append(gates.prepare_data(GATE_JOB, args=(proposal.to_json(),), job_id=f"proposal-{request_id}"))
            start_count = rail.count
            started = time.perf_counter()
            gates.enqueue_many(jobs)
            wait_for(lambda: rail.count - start_count >= n, timeout=600, what="the gate decisions")
            return n / (time.perf_counter() - started)

        # Warm-up: each worker's first job imports the gate code and opens its rail client and ledger.
        batch(4 * workers, 100 + 10_000 * workers)
        return batch(proposals, 100 + 10_000 * workers + 1000)
    finally:
        for name in names:
            stack.actors[name].stop()
        client.close()


def run_perf(config: PerfConfig, base: Path, *, echo: Callable[[str], None] = print) -> PerfReport:
    base.mkdir(parents=True, exist_ok=True)
    report = PerfReport(config)
    report.sqlite_commit_ms = sqlite_commit_floor(base)
    echo(f"sqlite WAL+FULL commit p50 {percentile(report.sqlite_commit_ms, 50):.2f} ms")
    gate_workers = max(config.gate_workers)
    report.throughput_gate_workers = gate_workers
    rig = PerfRig(base, gate_workers).start()
    try:
        for mode in ("direct", "gated"):
            run_agents(rig, mode, 1, 5)  # warm-up: imports, sessions, first-connection costs
        for rail_ms, calls in ((0, config.calls), (config.latency_ms, config.slow_calls)):
            rig.rail_latency(rail_ms)
            for mode in ("direct", "gated"):
                results, _ = run_agents(rig, mode, 1, calls)
                sample = LatencySample(mode, rail_ms, [ms for _, ms in results], sum(not ok for ok, _ in results))
                report.latency.append(sample)
                echo(f"latency {mode:<6} rail {rail_ms:>4} ms: p50 {sample.p50:.1f} p99 {sample.p99:.1f} ms")
            for agents in config.concurrency:
                total = max(2 * agents, config.throughput_calls if rail_ms == 0 else config.slow_throughput_calls)
                for mode in ("direct", "gated"):
                    results, seconds = run_agents(rig, mode, agents, total)
                    tput = ThroughputSample(mode, rail_ms, agents, total, sum(ok for ok, _ in results), seconds)
                    report.throughput.append(tput)
                    echo(f"throughput {mode:<6} rail {rail_ms:>4} ms, {agents:>2} agents: {tput.per_second:.1f}/s")
        rig.rail_latency(0)
        # Gates alone: stop the rail worker and every gate worker, then measure 1, 2, 4 workers.
        for name in [n for n in rig.stack.actors if n == "rail" or n.startswith("gate")]:
            rig.stack.actors[name].stop()
        payments = rig.payments(50)
        for workers in config.gate_workers:
            report.decisions[workers] = measure_decisions(rig, workers, config.decisions, payments)
            echo(f"gate decisions with {workers} worker(s): {report.decisions[workers]:.0f}/s")
    finally:
        rig.stop()
    return report
