"""The rail worker alone: Decisions loaded straight onto its queue, no ingress and no gates.

Each Decision is built the way a gate worker builds it (gate_workers.resolve + gate_workers.jobs.build_decision,
the whole ladder, against the bench's mandate) for a distinct payment, so every one is an ALLOW the rail
worker admits and sends. For each INTERLOCK_RAIL_CONCURRENCY level a fresh rail worker over a fresh ledger
takes the batch; the rate is applied intents over the time from the batch's enqueue to the last APPLIED
commit (the ledger's own clock). Two rails, each its own HTTP process at the same latency: the sandbox (the
evidence class every other number uses) and a minimal rail double (bench.rail_double), to tell the rail
worker's limit from the sandbox's. The published Outcomes carry each call's trace, so the rail worker's hops
are broken down per level too.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from bench.env import AGENT, mandate_data, write_mandate
from bench.perf_cpu import cpu_seconds
from bench.perf_trace import HopStat, breakdown
from deploy.agent_client import SandboxControl
from deploy.stack import Actor, Stack, read_json, wait_for
from gate_workers.context import GateContext
from gate_workers.jobs import build_decision
from gate_workers.resolve import resolve
from interlock.clock import now_ms
from interlock.mandate import Mandate, load_mandate
from interlock.messages import Decision, Proposal, Verdict, trace_now
from interlock.queues import ADMIT_JOB, outcome_key, rail_queue, rq_queue
from interlock.tools import current_pins
from ledger.db import open_ledger
from rails.models import Balance, BankingBalance, FundAccount, Page, Payment, Payout

RAILS = ("sandbox", "double")
REFUND = 10_000
PAYMENT = 100_000
SETTLED = ("APPLIED", "FAILED_TERMINAL", "UNKNOWN", "BLOCKED", "HELD", "QUARANTINED")


@dataclass
class RailAloneSample:
    rail: str  # "sandbox" or "double"
    concurrency: int
    calls: int
    applied: int
    seconds: float
    states: dict[str, int] = field(default_factory=dict)
    hops: list[HopStat] = field(default_factory=list)
    cpu_s: float | None = None  # the rail worker process's CPU (user + system, every thread) from load to settled

    @property
    def per_second(self) -> float:
        return self.applied / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_ms_per_call(self) -> float | None:
        return self.cpu_s * 1000 / self.applied if self.cpu_s is not None and self.applied else None

    @property
    def cores(self) -> float | None:
        """CPUs the rail worker kept busy on average while the batch ran: near 1.0, its interpreter (the GIL) is the
        limit, whatever the concurrency."""
        return self.cpu_s / self.seconds if self.cpu_s is not None and self.seconds > 0 else None


class LocalPayments:
    """The gate's rail read, answered locally: every payment the bench made is captured and unrefunded."""

    def fetch_payment(self, payment_id: str) -> Payment:
        return Payment(id=payment_id, amount=PAYMENT, currency="INR", status="captured", captured=True)

    def fetch_balance(self) -> Balance:
        raise AssertionError("the rail worker bench proposes refunds only")

    def fetch_fund_account(self, fund_account_id: str) -> FundAccount:
        raise AssertionError("the rail worker bench proposes refunds only")

    def fetch_banking_balance(self, account_number: str) -> BankingBalance:
        raise AssertionError("the rail worker bench proposes refunds only")

    def fetch_payout(self, payout_id: str) -> Payout:
        raise AssertionError("the rail worker bench proposes refunds only")

    def list_payouts(self, account_number: str, *, reference_id: str | None = None, status: str | None = None,
                     count: int = 100, skip: int = 0) -> Page[Payout]:  # fmt: skip
        raise AssertionError("the rail worker bench proposes refunds only")


def build_decisions(ledger: sqlite3.Connection, mandate: Mandate, payment_ids: list[str]) -> list[Decision]:
    """ALLOW decisions for *payment_ids*, built as a gate worker builds them."""
    reader, pins, decisions = LocalPayments(), current_pins(), []
    for pid in payment_ids:
        now = now_ms()
        proposal = Proposal(request_id=uuid.uuid4().hex, agent_id=AGENT, merchant_id=mandate.merchant_id,
                            tool="create_refund", arguments={"payment_id": pid, "amount": REFUND},
                            received_at_ms=now)  # fmt: skip
        action = resolve(proposal, reader, ledger, mandate, now)
        decision = build_decision(action, GateContext(mandate=mandate, now_ms=now, ledger=ledger, tool_hashes=pins),
                                  mandate)  # fmt: skip
        if decision.verdict is not Verdict.ALLOW:
            raise AssertionError(f"the bench's decision for {pid} is {decision.verdict} {decision.reason_code}")
        decisions.append(decision)
    return decisions


class RailAloneRig:
    """Redis and one rail (sandbox or double) at a fixed latency; a fresh rail worker and ledger per level."""

    def __init__(self, base: Path, rail: str, latency_ms: int, env: dict[str, str]) -> None:
        self.rail, self.latency_ms = rail, latency_ms
        self.stack = Stack(base / f"rail-alone-{rail}", env=dict(env))
        self.control: SandboxControl | None = None
        self.mandate_path = self.stack.data_dir / "mandate.yaml"
        self._next = 0

    def start(self, mandate_changes: dict[str, Any]) -> RailAloneRig:
        stack = self.stack
        stack.data_dir.mkdir(parents=True, exist_ok=True)
        stack.start_redis()
        if self.rail == "sandbox":
            url = stack.start_sandbox(seed=0)
            env = stack.env
            self.control = SandboxControl(url, env["INTERLOCK_RAIL_KEY_ID"], env["INTERLOCK_RAIL_KEY_SECRET"])
            faults = [{"name": "slow", "rate": 1.0, "scope": "all", "params": {"delay_ms": self.latency_ms}}]
            self.control.set_faults(faults if self.latency_ms else [])
        else:
            stack.env.setdefault("INTERLOCK_RAIL_KEY_ID", "rzp_test_double")
            stack.env.setdefault("INTERLOCK_RAIL_KEY_SECRET", "double_secret")
            stack.env["INTERLOCK_RAIL_URL"] = self._start_double()
        stack.env["INTERLOCK_MANDATE"] = str(write_mandate(self.mandate_path, mandate_data(mandate_changes)))
        return self

    def _start_double(self) -> str:
        ready = self.stack.data_dir / "double.ready.json"
        ready.unlink(missing_ok=True)
        args = [sys.executable, "-m", "bench.rail_double", "--latency-ms", str(self.latency_ms),
                "--ready-file", str(ready)]  # fmt: skip
        actor = Actor("double", args, self.stack.base_env(), self.stack.data_dir / "logs" / "double.log").start()
        self.stack.actors["double"] = actor
        info = wait_for(lambda: read_json(ready), timeout=30, what="the rail double", actor=actor)
        return str(info["url"])

    def payments(self, n: int) -> list[str]:
        ids = []
        for _ in range(n):
            self._next += 1
            pid = f"pay_alone{self._next}"
            if self.control is not None:
                self.control.add_payment(pid, PAYMENT)
            ids.append(pid)
        return ids

    def measure(self, concurrency: int, calls: int, *, timeout_s: float) -> RailAloneSample:
        stack = self.stack
        ledger_path = stack.data_dir / f"ledger-c{concurrency}.sqlite3"
        stack.env["INTERLOCK_LEDGER"] = str(ledger_path)
        setting = {"INTERLOCK_RAIL_CONCURRENCY": str(concurrency), "INTERLOCK_KILL_AT": ""}
        actor = stack.actor(f"rail-c{concurrency}", ["rail-worker"], setting).start()
        client = redis.Redis.from_url(stack.redis_url or "")
        try:
            from rq import Worker

            queue = rq_queue(rail_queue(), client)
            wait_for(lambda: any(w.name for w in Worker.all(queue=queue)), timeout=60,
                     what=f"the rail worker (concurrency {concurrency})", actor=actor)  # fmt: skip
            ledger = open_ledger(ledger_path, readonly=True)
            try:
                decisions = build_decisions(ledger, load_mandate(self.mandate_path), self.payments(calls))
                cpu_before = cpu_seconds(actor.pid)
                started_ms = self._load(client, queue, decisions)
                states = _wait_settled(ledger, calls, timeout_s, actor)
                cpu_after = cpu_seconds(actor.pid)
                last = ledger.execute("SELECT MAX(updated_at) FROM intents WHERE state = 'APPLIED'").fetchone()[0]
            finally:
                ledger.close()
            seconds = ((last or started_ms) - started_ms) / 1000
            traces = _outcome_traces(client, [d.request_id for d in decisions])
            cpu = cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None
            return RailAloneSample(self.rail, concurrency, calls, states.get("APPLIED", 0), seconds, states,
                                   breakdown(traces), cpu)  # fmt: skip
        finally:
            client.close()
            actor.stop(timeout=60)

    @staticmethod
    def _load(client: redis.Redis, queue: Any, decisions: list[Decision]) -> int:
        """Everything onto the rail queue in one pipeline; returns the wall-clock ms the batch was enqueued."""
        started_ms, stamp = now_ms(), trace_now()
        jobs = [queue.prepare_data(ADMIT_JOB, args=(d.model_copy(update={"trace": {"decision_enqueued": stamp}})
                                                    .to_json(),),
                                   job_id=f"decision-{d.request_id}", result_ttl=600, failure_ttl=86400)
                for d in decisions]  # fmt: skip
        pipe = client.pipeline()
        queue.enqueue_many(jobs, pipeline=pipe)
        pipe.execute()
        return started_ms

    def stop(self) -> None:
        if self.control is not None:
            self.control.close()
        self.stack.kill_all()


def _wait_settled(ledger: sqlite3.Connection, calls: int, timeout_s: float, actor: Actor) -> dict[str, int]:
    """Intent counts by state once every call has left IN_FLIGHT (or the timeout passed)."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = {r[0]: int(r[1]) for r in ledger.execute("SELECT state, COUNT(*) FROM intents GROUP BY state")}
        if sum(states.get(s, 0) for s in SETTLED) >= calls or time.monotonic() > deadline or not actor.alive():
            return states
        time.sleep(0.02)


def _outcome_traces(client: redis.Redis, request_ids: list[str]) -> list[dict[str, int]]:
    pipe = client.pipeline(transaction=False)
    for request_id in request_ids:
        pipe.lindex(outcome_key(request_id), 0)
    traces = []
    for raw in pipe.execute():
        if raw is not None:
            trace = json.loads(raw).get("trace") or {}
            if trace:
                traces.append(trace)
    return traces


def calls_for(concurrency: int, rounds: int, minimum: int) -> int:
    """Enough calls to keep every slot busy *rounds* times over, and never fewer than *minimum*."""
    return max(concurrency * rounds, minimum)


def run_rail_alone(base: Path, *, rails: tuple[str, ...], latency_ms: int, levels: tuple[int, ...], rounds: int,
                   minimum: int, env: dict[str, str], mandate_changes: dict[str, Any],
                   echo: Callable[[str], None]) -> list[RailAloneSample]:  # fmt: skip
    samples = []
    for rail in rails:
        rig = RailAloneRig(base, rail, latency_ms, env).start(mandate_changes)
        try:
            for concurrency in levels:
                calls = calls_for(concurrency, rounds, minimum)
                # The slowest honest run is one call at a time: give it that, plus a minute.
                timeout = calls * (latency_ms / 1000 + 0.05) + 60
                sample = rig.measure(concurrency, calls, timeout_s=timeout)
                samples.append(sample)
                echo(f"rail worker alone, {rail:<7} rail {latency_ms} ms, concurrency {concurrency:>3}: "
                     f"{sample.per_second:.1f} calls/s ({sample.applied}/{calls} applied in {sample.seconds:.2f} s)")
        finally:
            rig.stop()
    return samples
