"""The exactly-once engine as real processes: redis-server, the sandbox rail, gate worker(s), the
rail worker and the reconciler, over one fresh ledger per test."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from deploy.redis_server import EmbeddedRedis
from deploy.stack import Stack
from interlock.clock import now_ms
from interlock.messages import Outcome, Proposal
from interlock.outcomes import wait
from interlock.queues import GATE_JOB, gates_queue, rq_queue
from ledger.db import open_ledger
from ledger.intents import Intent, get_intent
from sandbox.testing import SandboxProcess
from tests.mandates import AGENT, EXAMPLE, MERCHANT
from tests.procs import wait_until

FAST = {
    "INTERLOCK_RECONCILE_MIN_DELAY_MS": "300",
    "INTERLOCK_RAIL_TIMEOUT_MS": "1500",
    "INTERLOCK_LEASE_TTL_MS": "4000",
    "INTERLOCK_RECONCILE_MAX_PASSES": "6",
}
_ids = itertools.count(1)


@dataclass
class Engine:
    stack: Stack
    rail: SandboxProcess
    redis: redis.Redis

    def ledger(self) -> sqlite3.Connection:
        return open_ledger(self.stack.ledger_path, readonly=True)

    def payment(self, amount: int = 189900, **extra: object) -> str:
        pid = f"pay_E{next(_ids)}x{now_ms() % 10**9}"
        self.rail.add_payment(pid, amount, **extra)
        return pid

    def propose(self, arguments: dict, *, tool: str = "create_refund", request_id: str | None = None,
                operation_ref: str | None = None) -> str:  # fmt: skip
        request_id = request_id or f"req{next(_ids)}x{now_ms()}"
        proposal = Proposal(request_id=request_id, agent_id=AGENT, merchant_id=MERCHANT, tool=tool,
                            arguments=arguments, operation_ref=operation_ref, received_at_ms=now_ms())  # fmt: skip
        rq_queue(gates_queue(), self.redis).enqueue(GATE_JOB, proposal.to_json(), job_id=f"proposal-{request_id}")
        return request_id

    def outcome(self, request_id: str, timeout_s: float = 45) -> Outcome:
        got = wait(self.redis, request_id, int(timeout_s * 1000))
        assert got is not None, f"no outcome for {request_id}; logs:\n{self.logs()}"
        return got

    def intent(self, sik: str) -> Intent | None:
        conn = self.ledger()
        try:
            return get_intent(conn, MERCHANT, sik)
        finally:
            conn.close()

    def settle(self, sik: str, states: set[str], timeout_s: float = 30) -> Intent:
        def done() -> Intent | None:
            intent = self.intent(sik)
            return intent if intent is not None and intent.state.value in states else None

        try:
            result: Intent = wait_until(done, timeout=timeout_s, what=f"{sik} to reach {states}")
        except AssertionError:
            raise AssertionError(f"{sik} is {self.intent(sik)}; logs:\n{self.logs()}") from None
        return result

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{a.log()[-3000:]}" for n, a in self.stack.actors.items())


@pytest.fixture
def engine_factory(tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
                   rail_sandbox: SandboxProcess) -> Iterator[Callable[..., Engine]]:  # fmt: skip
    stacks: list[Stack] = []

    def make(*, gate_workers: int = 1, env: dict[str, str] | None = None, start: bool = True,
             kill_at: dict[str, str] | None = None) -> Engine:  # fmt: skip
        stack = Stack(tmp_path / f"stack{len(stacks)}", redis_url=redis_server.url, gate_workers=gate_workers,
                      env={"INTERLOCK_MANDATE": str(EXAMPLE), **rail_sandbox.rail_env(), **FAST, **(env or {})})
        stacks.append(stack)
        if start:
            stack.start_engine(kill_at=kill_at)
        return Engine(stack, rail_sandbox, redis_client)

    yield make
    for stack in stacks:
        stack.stop()
    rail_sandbox.clear_faults()
