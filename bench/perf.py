"""The performance bench: direct vs gated in one run, against one sandbox rail (SPEC §13, issue 14).

* added latency per money call (p50/p99), sequential, at 0 ms and at a configurable rail latency (the
  sandbox's `slow` fault at rate 1 with scope `all`, so reads are as slow as money calls);
* end-to-end throughput with C concurrent agents, gated and direct side by side, at both latencies; "direct"
  twice: the REST client, and an MCP client of the sandbox's MCP front in its razorpay-mcp-server profile
  (direct-MCP: what users run without Interlock);
* Redis commands per money call, by hop, from Redis's own MONITOR on the quiet stack (bench.perf_redis);
* the per-hop breakdown of gated calls, from the trace each call carries (bench.perf_trace);
* time to definite after an ambiguous refund, per fault (bench.perf_ttd);
* gate decisions per second with 1, 2 and 4 gate workers (the rail worker stopped: proposals in on
  "gates", decisions counted as they land on "rail");
* the rail worker alone at INTERLOCK_RAIL_CONCURRENCY levels, against the sandbox and a rail double
  (bench.perf_rail);
* the machine's SQLite WAL + synchronous=FULL commit time, the physical floor of every ledger write.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench.env import AGENT
from bench.metrics import percentile
from bench.perf_cpu import CpuSample
from bench.perf_rail import RAILS, RailAloneSample, run_rail_alone
from bench.perf_redis import RedisCount, measure_redis
from bench.perf_rig import MERCHANT, MODES, PERF_ENV, PERF_MANDATE, Call, PerfRig, joined_traces, run_agents
from bench.perf_trace import Definite, HopStat, breakdown
from bench.perf_ttd import FAULTS, measure_definite
from deploy.stack import wait_for
from interlock.clock import now_ms
from interlock.messages import Proposal
from interlock.queues import GATE_JOB, gates_queue, rail_queue, rq_queue

# The throughput runs of the summary line (0 ms x8, slow x32): their per-hop breakdowns are shown too.
HOP_AGENTS = {0: 8, "slow": 32}


@dataclass(frozen=True)
class PerfConfig:
    latency_ms: int = 200
    calls: int = 200
    slow_calls: int = 30
    concurrency: tuple[int, ...] = (1, 8, 32, 64)
    gate_workers: tuple[int, ...] = (1, 2, 4)
    e2e_gate_workers: int = 0  # gate workers of the end-to-end stack (0: the most of gate_workers)
    decisions: int = 400
    throughput_calls: int = 48  # at least this many per concurrency level at 0 ms
    slow_throughput_calls: int = 16  # ... and at the slow rail
    calls_per_agent: int = 3  # every agent of a throughput run makes at least this many calls
    # The runs whose CPU is measured (and hops traced) make at least this many: /proc counts CPU in 10 ms ticks, so
    # 48 calls left each process's figure ±0.2 ms a call and the summary's own-CPU ratio moved ~15% run to run.
    cpu_calls: int = 400
    rail_concurrency: tuple[int, ...] = (1, 16, 64, 256)
    rail_rounds: int = 4  # the rail worker alone: calls per level = concurrency x rounds (at least rail_min_calls)
    rail_min_calls: int = 10
    rails: tuple[str, ...] = RAILS
    definite_faults: tuple[str, ...] = FAULTS
    definite_calls: int = 8  # ambiguous refunds per fault, made concurrently
    redis_calls: int = 50  # sequential gated calls under MONITOR (0: not measured)
    latency_rounds: int = 10  # the sequential latency runs: the modes take turns, this many times


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
    hops: dict[str, list[HopStat]] = field(default_factory=dict)  # a run's label -> its per-hop breakdown
    definite: list[Definite] = field(default_factory=list)
    rail_alone: list[RailAloneSample] = field(default_factory=list)
    cpu: list[CpuSample] = field(default_factory=list)  # CPU per call by process, direct and gated
    redis: RedisCount | None = None  # Redis commands per money call, by hop


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


def rounds_of(calls: int, rounds: int) -> list[int]:
    """*calls* split into at most *rounds* nearly equal turns (none empty)."""
    turns = max(1, min(rounds, calls))
    return [calls // turns + (1 if i < calls % turns else 0) for i in range(turns)]


def _sequential_latency(rig: PerfRig, config: PerfConfig, report: PerfReport, rail_ms: int, calls: int,
                        echo: Callable[[str], None]) -> None:  # fmt: skip
    """One agent's sequential calls in every mode, the modes taking turns (LATENCY_ROUNDS): on a shared machine a
    burst of load elsewhere then falls on every mode alike, not on whichever ran at that moment."""
    made: dict[str, list[Call]] = {mode: [] for mode in MODES}
    rig.take_traces()
    for turn in rounds_of(calls, config.latency_rounds):
        for mode in MODES:
            results, _, _ = run_agents(rig, mode, 1, turn)
            made[mode].extend(results)
    traces = rig.take_traces()
    for mode in MODES:
        results = made[mode]
        sample = LatencySample(mode, rail_ms, [c.ms for c in results], sum(not c.ok for c in results))
        report.latency.append(sample)
        if mode == "gated":
            report.hops[f"{rail_ms} ms rail, 1 agent"] = breakdown(joined_traces(results, traces))
        echo(f"latency {mode:<10} rail {rail_ms:>4} ms: p50 {sample.p50:.1f} p99 {sample.p99:.1f} ms")


def _latency_and_throughput(rig: PerfRig, config: PerfConfig, report: PerfReport, echo: Callable[[str], None]) -> None:
    for rail_ms, calls in ((0, config.calls), (config.latency_ms, config.slow_calls)):
        rig.rail_latency(rail_ms)
        _sequential_latency(rig, config, report, rail_ms, calls, echo)
        floor = config.throughput_calls if rail_ms == 0 else config.slow_throughput_calls
        for agents in config.concurrency:
            hop_run = agents == HOP_AGENTS[0 if rail_ms == 0 else "slow"]
            total = max(config.calls_per_agent * agents, floor, config.cpu_calls if hop_run else 0)
            for mode in MODES:
                rig.take_traces()
                label = f"{mode}, {rail_ms} ms rail, {agents} agents"
                results, seconds, cpu = run_agents(rig, mode, agents, total, cpu_label=label if hop_run else None)
                tput = ThroughputSample(mode, rail_ms, agents, total, sum(c.ok for c in results), seconds)
                report.throughput.append(tput)
                if cpu is not None:
                    report.cpu.append(cpu)
                if mode == "gated" and hop_run:
                    traces = joined_traces(results, rig.take_traces())
                    report.hops[f"{rail_ms} ms rail, {agents} agents"] = breakdown(traces)
                echo(f"throughput {mode:<10} rail {rail_ms:>4} ms, {agents:>2} agents: {tput.per_second:.1f}/s")
    rig.rail_latency(0)


def run_perf(config: PerfConfig, base: Path, *, echo: Callable[[str], None] = print) -> PerfReport:
    base.mkdir(parents=True, exist_ok=True)
    report = PerfReport(config)
    report.sqlite_commit_ms = sqlite_commit_floor(base)
    echo(f"sqlite WAL+FULL commit p50 {percentile(report.sqlite_commit_ms, 50):.2f} ms")
    gate_workers = config.e2e_gate_workers or max(config.gate_workers)
    report.throughput_gate_workers = gate_workers
    rig = PerfRig(base, gate_workers).start()
    try:
        for mode in MODES:
            run_agents(rig, mode, 1, 5)  # warm-up: imports, sessions, first-connection costs
        if config.redis_calls:
            report.redis = measure_redis(rig, config.redis_calls)  # first: the stack is quiet, nothing queued
            echo(f"Redis commands per money call {report.redis.per_call:.1f} "
                 f"(background {report.redis.background_per_second:.1f}/s)")  # fmt: skip
        _latency_and_throughput(rig, config, report, echo)
        if config.definite_faults:
            report.definite = measure_definite(rig, config.definite_faults, config.definite_calls, echo)
        # Gates alone: stop the rail worker and every gate worker, then measure 1, 2, 4 workers.
        for name in [n for n in rig.stack.actors if n == "rail" or n.startswith("gate")]:
            rig.stack.actors[name].stop()
        payments = rig.payments(50)
        for workers in config.gate_workers:
            report.decisions[workers] = measure_decisions(rig, workers, config.decisions, payments)
            echo(f"gate decisions with {workers} worker(s): {report.decisions[workers]:.0f}/s")
    finally:
        rig.stop()
    if config.rail_concurrency and config.rails:
        report.rail_alone = run_rail_alone(base, rails=config.rails, latency_ms=config.latency_ms,
                                           levels=config.rail_concurrency, rounds=config.rail_rounds,
                                           minimum=config.rail_min_calls, env=PERF_ENV, mandate_changes=PERF_MANDATE,
                                           echo=echo)  # fmt: skip
    return report
