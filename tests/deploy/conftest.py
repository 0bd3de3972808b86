from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from deploy.agent_client import SandboxControl, StackInfo
from deploy.redis_server import EmbeddedRedis
from deploy.stack import Stack
from ingress.tokens import token_sha256
from sandbox.testing import SandboxProcess
from tests.engine.conftest import FAST
from tests.mandates import AGENT, EXAMPLE

TOKEN = "stack-test-token-5b9c1e"
_ids = itertools.count(1)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class FullStack:
    stack: Stack
    info: StackInfo
    rail: SandboxProcess
    control: SandboxControl

    def payment(self, amount: int = 189900) -> str:
        pid = f"pay_S{next(_ids)}x{id(self) % 100000}"
        self.rail.add_payment(pid, amount)
        return pid

    def intents_count(self) -> int:
        from ledger.db import open_ledger

        conn = open_ledger(self.stack.ledger_path, readonly=True)
        try:
            return int(conn.execute("SELECT COUNT(*) FROM intents").fetchone()[0])
        finally:
            conn.close()


@pytest.fixture
def full_stack_factory(tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
                       rail_sandbox: SandboxProcess) -> Iterator[Callable[..., FullStack]]:  # fmt: skip
    stacks: list[Stack] = []

    def make(*, env: dict[str, str] | None = None, kill_at: dict[str, str] | None = None) -> FullStack:
        data = tmp_path / f"stack{len(stacks)}"
        data.mkdir()
        tokens = data / "tokens.yaml"
        tokens.write_text(f"agents:\n  {AGENT}: {{token_sha256: {token_sha256(TOKEN)}}}\n")
        token_file = data / "agent.token"
        token_file.write_text(TOKEN)
        stack = Stack(data, redis_url=redis_server.url,
                      env={"INTERLOCK_MANDATE": str(EXAMPLE), **rail_sandbox.rail_env(), **FAST, **(env or {})})
        stacks.append(stack)
        stack.start_engine(kill_at=kill_at)
        url = stack.start_ingress(tokens_file=tokens)
        info = StackInfo(mcp_url=url, token_file=str(token_file), agent_id=AGENT, sandbox_url=rail_sandbox.url,
                         rail_key_id=rail_sandbox.key_id, rail_key_secret=rail_sandbox.key_secret,
                         ledger=str(stack.ledger_path), redis_url=redis_server.url)  # fmt: skip
        control = SandboxControl(rail_sandbox.url, rail_sandbox.key_id, rail_sandbox.key_secret)
        return FullStack(stack, info, rail_sandbox, control)

    yield make
    for stack in stacks:
        stack.stop()
    rail_sandbox.clear_faults()
