"""The end-to-end performance stack and its two kinds of agent.

One stack (sandbox, Redis, gate workers, one rail worker, reconciler, HTTP ingress — each its own process)
with the bench's mandate and INTERLOCK_TRACE set, so the ingress keeps every call's per-hop trace on
`queues.trace_key()`. Direct agents call the sandbox with the REST client; direct-MCP agents are real MCP
clients of the sandbox's MCP front in its razorpay-mcp-server profile (what a user runs without Interlock: the
same MCP SDK, the same tool, one process between the agent and the rail); gated agents are real MCP clients
of the ingress. A gated call's trace is joined to the agent's own send/receive stamps by its SIK.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bench.env import AGENT, TOKEN, mandate_data, write_mandate
from bench.perf_cpu import CpuMeter, CpuSample
from deploy.agent_client import SandboxControl, mcp_client, structured
from deploy.stack import Stack, read_json, wait_for
from ingress.tokens import token_sha256
from interlock.messages import trace_now
from interlock.queues import TRACE_ENV, trace_key
from rails.razorpay import RailError, RazorpayClient

MERCHANT = "acc_DEMO000001"
REFUND = 10_000  # Rs 100 on a Rs 1,000 payment: inside every limit, below the hold threshold
PAYMENT = 100_000
# Limits lifted so the bench measures the machinery, not the mandate's daily caps.
PERF_MANDATE: dict[str, Any] = {
    "limits.windows": [{"window_ms": 86_400_000, "max_calls": 10_000_000, "max_amount_minor": 10**13,
                        "currency": "INR"}],  # fmt: skip
    "limits.fee_budgets": {"INR": {"window_ms": 86_400_000, "max_fee_minor": 10**12}},
}
# INTERLOCK_RECONCILE_MIN_DELAY_MS and INTERLOCK_RAIL_CONCURRENCY are left at their defaults.
PERF_ENV = {"INTERLOCK_RAIL_TIMEOUT_MS": "5000", "INTERLOCK_OUTCOME_WAIT_MS": "60000",
            "INTERLOCK_LEASE_TTL_MS": "30000"}  # fmt: skip


@dataclass(frozen=True)
class Call:
    """One money call as an agent saw it: whether it applied, its wall time, and (gated) its SIK and stamps."""

    ok: bool
    ms: float
    state: str | None = None
    sik: str | None = None
    sent_us: int = 0
    got_us: int = 0


class PerfRig:
    """One stack and a supply of fresh payments."""

    def __init__(self, base: Path, gate_workers: int) -> None:
        self.base = base
        self.stack = Stack(base / "stack", env={**PERF_ENV, TRACE_ENV: "1"}, gate_workers=gate_workers)
        self._next = 0
        self.url = ""
        self.front_url = ""  # the sandbox's MCP front, razorpay-mcp-server profile: the direct-MCP agents' server
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
        ready = stack.data_dir / "front.ready.json"
        front = stack.start_actor("mcp-front", ["sandbox", "--mcp", "--mcp-profile", "razorpay-mcp-server", "--port",
                                                "0", "--rail-url", rail_url, "--ready-file", str(ready)])  # fmt: skip
        stack.start_engine()
        stack.wait_for_ingress()
        self.front_url = str(wait_for(lambda: read_json(ready), timeout=60, what="the sandbox MCP front",
                                      actor=front)["url"])  # fmt: skip
        self._wait_for_gate_workers()
        return self

    def _wait_for_gate_workers(self) -> None:
        """Until every gate worker has registered with RQ: on a busy machine one can start seconds after the others,
        and its first jobs (its one-off set-up commands, its first maintenance) would fall inside a measurement."""
        from rq import Worker

        from interlock.queues import gates_queue, rq_queue

        client = redis.Redis.from_url(self.stack.redis_url or "")
        try:
            queue = rq_queue(gates_queue(), client)
            wait_for(lambda: Worker.count(queue=queue) >= self.stack.gate_workers, timeout=60,
                     what=f"{self.stack.gate_workers} gate workers registered")  # fmt: skip
        finally:
            client.close()

    def pids(self) -> dict[str, int]:
        """Every process of the stack by name (actors, the sandbox, redis-server), for CPU accounting."""
        found = {name: actor.pid for name, actor in self.stack.actors.items() if actor.alive()}
        if self.stack.redis is not None:
            found["redis-server"] = self.stack.redis.pid
        return found

    def payments(self, n: int) -> list[str]:
        assert self.control is not None
        ids = []
        for _ in range(n):
            self._next += 1
            pid = f"pay_perf{self._next}"
            self.control.add_payment(pid, PAYMENT)
            ids.append(pid)
        return ids

    def faults(self, faults: list[dict[str, Any]]) -> None:
        assert self.control is not None
        self.control.set_faults(faults)

    def rail_latency(self, ms: int) -> None:
        self.faults([{"name": "slow", "rate": 1.0, "scope": "all", "params": {"delay_ms": ms}}] if ms else [])

    def rail_timeout_ms(self) -> int:
        return int(self.stack.env["INTERLOCK_RAIL_TIMEOUT_MS"])

    def direct_client(self) -> RazorpayClient:
        env = self.stack.env
        return RazorpayClient(env["INTERLOCK_RAIL_URL"], env["INTERLOCK_RAIL_KEY_ID"], env["INTERLOCK_RAIL_KEY_SECRET"],
                              timeout_ms=30_000)  # fmt: skip

    def take_traces(self) -> dict[str, dict[str, int]]:
        """Every trace the ingress kept since the last take, by SIK (then forgotten)."""
        client = redis.Redis.from_url(self.stack.redis_url or "")
        try:
            pipe = client.pipeline()
            pipe.lrange(trace_key(), 0, -1)
            pipe.delete(trace_key())
            raw, _ = pipe.execute()
        finally:
            client.close()
        traces: dict[str, dict[str, int]] = {}
        for item in reversed(raw):  # oldest first, so a SIK's first answer wins
            record = json.loads(item)
            if record.get("sik") and not record.get("replayed"):
                traces.setdefault(record["sik"], record["trace"])
        return traces

    def stop(self) -> None:
        if self.control is not None:
            self.control.close()
        self.stack.kill_all()


def joined_traces(calls: list[Call], traces: dict[str, dict[str, int]]) -> list[dict[str, int]]:
    """Each gated call's trace with the agent's own send and receive stamps added."""
    joined = []
    for call in calls:
        trace = traces.get(call.sik or "")
        if trace is not None:
            joined.append({**trace, "agent_sent": call.sent_us, "agent_got": call.got_us})
    return joined


def _direct_refund(client: RazorpayClient, payment_id: str) -> Call:
    started = time.perf_counter()
    try:
        client.create_refund(payment_id, REFUND, notes=None, receipt=None, idempotency_key=uuid.uuid4().hex)
        ok = True
    except RailError:
        ok = False
    return Call(ok, (time.perf_counter() - started) * 1000)


class Window:
    """The timed part of a throughput run: from when every agent is ready to when the last call is answered.
    Connecting (an MCP session's handshake, a REST client's pool) is set-up, not throughput."""

    def __init__(self, agents: int, meter: CpuMeter | None) -> None:
        self.meter = meter
        self._waiting = self._running = agents
        self._go = asyncio.Event()
        self.started = self.ended = 0.0
        self.cpu: CpuSample | None = None

    async def ready(self) -> None:
        """Called by each agent once it is connected; returns when all are."""
        self._waiting -= 1
        if self._waiting == 0:
            if self.meter is not None:
                self.meter.start()
            self.started = time.perf_counter()
            self._go.set()
        await self._go.wait()

    def done(self) -> None:
        """Called by each agent after its last answer; the last one ends the window."""
        self._running -= 1
        if self._running == 0:
            self.ended = time.perf_counter()
            if self.meter is not None:
                self.cpu = self.meter.stop()


async def _direct_agents(rig: PerfRig, payments: list[list[str]], window: Window) -> list[Call]:
    client = rig.direct_client()
    loop = asyncio.get_running_loop()
    results: list[Call] = []
    with ThreadPoolExecutor(max_workers=len(payments)) as pool:

        async def agent(mine: list[str]) -> None:
            await window.ready()
            try:
                for pid in mine:
                    results.append(await loop.run_in_executor(pool, _direct_refund, client, pid))
            finally:
                window.done()

        await asyncio.gather(*(agent(mine) for mine in payments))
    client.close()
    return results


async def _gated_agents(rig: PerfRig, payments: list[list[str]], window: Window) -> list[Call]:
    results: list[Call] = []

    async def agent(mine: list[str]) -> None:
        async with mcp_client(rig.url, TOKEN, timeout_s=120) as client:
            await window.ready()
            try:
                for pid in mine:
                    started, sent = time.perf_counter(), trace_now()
                    answer = structured(await client.call_tool("create_refund", {"payment_id": pid, "amount": REFUND}))
                    got, ms = trace_now(), (time.perf_counter() - started) * 1000
                    state = answer.get("state")
                    results.append(Call(state == "APPLIED", ms, state, answer.get("sik"), sent, got))
            finally:
                window.done()

    await asyncio.gather(*(agent(mine) for mine in payments))
    return results


async def _direct_mcp_agents(rig: PerfRig, payments: list[list[str]], window: Window) -> list[Call]:
    """The same refunds through razorpay-mcp-server's contract, served by the sandbox's MCP front: a result is the
    rail's entity as JSON text, a failure an isError text."""
    results: list[Call] = []

    async def agent(mine: list[str]) -> None:
        async with mcp_client(rig.front_url, TOKEN, timeout_s=120) as client:
            await window.ready()
            try:
                for pid in mine:
                    started = time.perf_counter()
                    result = await client.call_tool("create_refund", {"payment_id": pid, "amount": REFUND})
                    ms = (time.perf_counter() - started) * 1000
                    ok = not getattr(result, "is_error", False) and bool(structured(result).get("id"))
                    results.append(Call(ok, ms, "APPLIED" if ok else None))
            finally:
                window.done()

    await asyncio.gather(*(agent(mine) for mine in payments))
    return results


RUNNERS = {"direct": _direct_agents, "direct-mcp": _direct_mcp_agents, "gated": _gated_agents}
MODES = tuple(RUNNERS)  # direct (REST), direct-MCP (razorpay-mcp-server profile), gated (Interlock)


def split(ids: list[str], agents: int) -> list[list[str]]:
    return [ids[i::agents] for i in range(agents)]


def run_agents(rig: PerfRig, mode: str, agents: int, calls: int,
               cpu_label: str | None = None) -> tuple[list[Call], float, CpuSample | None]:  # fmt: skip
    """*calls* refunds on fresh payments by *agents* concurrent agents; returns the calls, the seconds from every
    agent connected to the last answer and, with *cpu_label*, the CPU every process spent per call meanwhile."""
    payments = split(rig.payments(calls), agents)
    runner = RUNNERS[mode]
    meter = CpuMeter(rig.pids, cpu_label, calls) if cpu_label is not None else None
    window = Window(len(payments), meter)
    results = asyncio.run(runner(rig, payments, window))
    return results, window.ended - window.started, window.cpu
