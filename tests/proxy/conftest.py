"""Proxy mode as real processes: redis-server, the sandbox rail, its MCP front (the upstream), gate
worker, rail worker, reconciler and the HTTP ingress with INTERLOCK_RAIL=mcp-upstream. The agent is
the official MCP client speaking streamable HTTP to the ingress with a bearer token.

The front serves its own profile ("sandbox") unless a test asks for "razorpay-mcp-server", the real
server's contract (sandbox/mcp_razorpay.py)."""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from deploy.redis_server import EmbeddedRedis
from deploy.stack import Stack, read_json, wait_for
from ingress.tokens import token_sha256
from interlock.clock import now_ms
from ledger.db import open_ledger
from ledger.intents import Intent, get_intent
from rails.mcp_session import UpstreamSession, UpstreamTarget
from rails.mcp_upstream import McpUpstreamRail
from rails.upstream_manifest import pins
from sandbox.testing import SandboxProcess
from tests.mandates import AGENT, MERCHANT, write_mandate
from tests.procs import INTERLOCK, Proc, wait_until

TOKEN = "proxy-test-token-5e4d3c2b1a"
RAZORPAY = "razorpay-mcp-server"
PROFILE_ENV = "INTERLOCK_SANDBOX_MCP_PROFILE"
FAST = {
    "INTERLOCK_RECONCILE_MIN_DELAY_MS": "300",
    "INTERLOCK_RAIL_TIMEOUT_MS": "3000",
    "INTERLOCK_LEASE_TTL_MS": "8000",
    "INTERLOCK_RECONCILE_MAX_PASSES": "6",
    "INTERLOCK_OUTCOME_WAIT_MS": "20000",
    # G6 judges what the upstream serves at the moment of each call.
    "INTERLOCK_UPSTREAM_MANIFEST_TTL_MS": "0",
}
_ids = itertools.count(1)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def front_tools(front_url: str) -> list[Any]:
    rail = McpUpstreamRail(UpstreamSession(UpstreamTarget(url=front_url), timeout_s=10))
    try:
        return rail.list_tools()
    finally:
        rail.close()


@dataclass
class Proxy:
    stack: Stack
    rail: SandboxProcess
    ingress_url: str
    front_url: str
    overrides: Path

    def agent(self) -> Client:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
        return Client(streamable_http_client(self.ingress_url, http_client=http), read_timeout_seconds=60)

    def payment(self, amount: int = 189900, **extra: object) -> str:
        pid = f"pay_P{next(_ids)}x{now_ms() % 10**9}"
        self.rail.add_payment(pid, amount, **extra)
        return pid

    def poison(self, tool: str, description: str) -> None:
        """The manifest-poisoning fault: the upstream serves a new description from now on."""
        current = json.loads(self.overrides.read_text()) if self.overrides.exists() else {}
        current[tool] = {"description": description}
        self.overrides.write_text(json.dumps(current))

    def override(self, tool: str, **fields: Any) -> None:
        """The upstream changes other fields of *tool* from now on (e.g. annotations, outputSchema, _meta),
        keeping the changes already made."""
        current = json.loads(self.overrides.read_text()) if self.overrides.exists() else {}
        current.setdefault(tool, {}).update(fields)
        self.overrides.write_text(json.dumps(current))

    def refuse(self, tool: str, text: str | None) -> None:
        """The upstream-refusal fault: from the next call on, the front answers *tool* with this error text
        without calling the rail (None: it calls the rail again)."""
        current = json.loads(self.overrides.read_text()) if self.overrides.exists() else {}
        entry = current.setdefault(tool, {})
        if text is None:
            entry.pop("error_text", None)
        else:
            entry["error_text"] = text
        self.overrides.write_text(json.dumps(current))

    def ledger(self) -> sqlite3.Connection:
        return open_ledger(self.stack.ledger_path, readonly=True)

    def intent(self, sik: str) -> Intent | None:
        conn = self.ledger()
        try:
            return get_intent(conn, MERCHANT, sik)
        finally:
            conn.close()

    def settle(self, sik: str, states: set[str], timeout_s: float = 40) -> Intent:
        def done() -> Intent | None:
            intent = self.intent(sik)
            return intent if intent is not None and intent.state.value in states else None

        try:
            result: Intent = wait_until(done, timeout=timeout_s, what=f"{sik} to reach {states}")
        except AssertionError:
            raise AssertionError(f"{sik} is {self.intent(sik)}; logs:\n{self.logs()}") from None
        return result

    def refunds_of(self, payment_id: str) -> list[dict[str, Any]]:
        return [e["entity"] for e in self.rail.entities("refund") if e["entity"]["payment_id"] == payment_id]

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{a.log()[-3000:]}" for n, a in self.stack.actors.items())


@pytest.fixture
def proxy_factory(tmp_path: Path, redis_server: EmbeddedRedis, rail_sandbox: SandboxProcess) -> Iterator[
        Callable[..., Proxy]]:  # fmt: skip
    stacks: list[Stack] = []

    def make(*, mandate_changes: dict[str, Any] | None = None, unpin: tuple[str, ...] = (),
             env: dict[str, str] | None = None, profile: str | None = None) -> Proxy:  # fmt: skip
        data = tmp_path / f"proxy{len(stacks)}"
        front_profile = {PROFILE_ENV: profile} if profile is not None else {}
        stack = Stack(data, redis_url=redis_server.url, env={**rail_sandbox.rail_env(), **FAST,
                      "INTERLOCK_RAIL": "mcp-upstream", **front_profile, **(env or {})})  # fmt: skip
        stacks.append(stack)
        overrides = data / "manifest-overrides.json"
        ready = data / "front.ready.json"
        front = stack.start_actor("upstream", ["sandbox", "--mcp", "--port", "0", "--rail-url", rail_sandbox.url,
                                               "--ready-file", str(ready), "--manifest-overrides", str(overrides)])
        info = wait_for(lambda: read_json(ready), timeout=30, what="the MCP front", actor=front)
        front_url = str(info["url"])
        # The human's review, done by the test: pin what the upstream serves now.
        pinned = {name: {"sha256": digest} for name, digest in pins(front_tools(front_url)).items()
                  if name not in unpin}  # fmt: skip
        mandate = write_mandate(data / "mandate.yaml", {"provenance.pinned_manifests": pinned,
                                                       "provenance.server_id": "sandbox-front",
                                                       **(mandate_changes or {})})  # fmt: skip
        tokens = data / "tokens.yaml"
        tokens.write_text(f"agents:\n  {AGENT}: {{token_sha256: {token_sha256(TOKEN)}}}\n")
        stack.env.update({"INTERLOCK_MANDATE": str(mandate), "INTERLOCK_UPSTREAM_URL": front_url})
        stack.start_engine()
        ingress_url = stack.start_ingress(tokens_file=tokens)
        return Proxy(stack, rail_sandbox, ingress_url, front_url, overrides)

    yield make
    for stack in stacks:
        stack.stop()
    rail_sandbox.clear_faults()


@contextmanager
def front_process(tmp_path: Path, rail_sandbox: SandboxProcess, env: dict[str, str] | None = None) -> Iterator[str]:
    """The sandbox's MCP front alone (no Interlock stack), over HTTP; yields its /mcp URL."""
    ready = tmp_path / f"front{next(_ids)}.json"
    proc = Proc([*INTERLOCK, "sandbox", "--mcp", "--port", "0", "--rail-url", rail_sandbox.url, "--ready-file",
                 str(ready)], {**rail_sandbox.rail_env(), **(env or {})}, ready.with_suffix(".log"))  # fmt: skip
    try:
        info = wait_until(lambda: read_json(ready), timeout=30, what="the MCP front")
        yield str(info["url"])
    finally:
        proc.stop()


@pytest.fixture
def front(tmp_path: Path, rail_sandbox: SandboxProcess) -> Iterator[str]:
    with front_process(tmp_path, rail_sandbox) as url:
        yield url


@pytest.fixture
def razorpay_front(tmp_path: Path, rail_sandbox: SandboxProcess) -> Iterator[str]:
    """The front serving razorpay-mcp-server's contract."""
    with front_process(tmp_path, rail_sandbox, {PROFILE_ENV: RAZORPAY}) as url:
        yield url
