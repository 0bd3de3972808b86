"""Merchant ownership between shards, with real processes (SPEC §15, ADR 0014, issue 25 items 3 and 4).

* A merchant whose call waits in its shard's rail queue (the rail worker down) cannot be moved: `interlock
  shards apply` refuses, naming the queue. And should a Decision slip into the old shard's queue after the
  check, the old shard's rail worker refuses it (SHARD_NOT_OWNER) once the move is in its ledger: the call and
  its repeat settle once, on the new shard.
* Two shards' actors on one Redis never take each other's work: every queue name carries the shard, so a call
  routed to s0 is decided by s0's gate worker however the gate workers come and go.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis
import yaml

from deploy.agent_client import mcp_client, structured
from deploy.redis_server import EmbeddedRedis
from deploy.stack import Stack, wait_for
from ingress.tokens import token_sha256
from interlock.queues import gates_queue, rail_queue, rq_queue
from interlock.shards import load_shard_map, parse_shard_map
from ops.shard_apply import apply_ownership, installed_text
from rail_worker.ownership import SHARD_NOT_OWNER
from sandbox.testing import SandboxProcess
from tests.deploy.sharding import Sharded, start_sharded
from tests.engine.conftest import FAST
from tests.mandates import example_data

WAIT = {"INTERLOCK_OUTCOME_WAIT_MS": "3000"}


@pytest.fixture
def two_shards(tmp_path: Path, rail_sandbox: SandboxProcess) -> Iterator[Sharded]:
    stacks = start_sharded(tmp_path, rail_sandbox, names=("s0", "s1"), env=WAIT)
    yield stacks
    stacks.stop()


async def refund(url: str, token: str, payment: str) -> dict[str, Any]:
    async with mcp_client(url, token, timeout_s=30) as client:
        return structured(await client.call_tool("create_refund", {"payment_id": payment, "amount": 1000}))


def until_definite(url: str, token: str, payment: str, timeout: float = 90) -> dict[str, Any]:
    """Repeat the same call until the answer is definite, as an agent told RETRY_SAME_CALL must."""
    deadline = time.monotonic() + timeout
    while True:
        answer = anyio.run(refund, url, token, payment)
        if answer["state"] != "IN_PROGRESS" or time.monotonic() > deadline:
            return answer


def rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    if not path.exists():
        return []
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return list(conn.execute(sql))
    finally:
        conn.close()


def queued(url: str, name: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(rq_queue(name, client).count)
    finally:
        client.close()


def test_a_merchant_whose_call_waits_in_its_shards_queue_is_not_moved_and_its_old_decision_is_never_paid_twice(
    two_shards: Sharded, rail_sandbox: SandboxProcess,
) -> None:
    s0, merchant, token = two_shards.shards["s0"], two_shards.merchants["s0"], two_shards.tokens["s0"]
    payment = two_shards.payment()
    s0.actors["rail"].stop()  # s0's rail worker down (a restart, a crash loop, a backlog)
    first = anyio.run(refund, two_shards.mcp_url, token, payment)
    assert first["state"] == "IN_PROGRESS" and first["caller_action"] == "RETRY_SAME_CALL"
    assert s0.redis_url is not None
    wait_for(lambda: queued(s0.redis_url or "", rail_queue("s0")) >= 1, timeout=30, what="the Decision on rail:s0")

    current = load_shard_map(two_shards.map_path)
    moved = two_shards.root / "moved.yaml"
    moved.write_text(two_shards.map_path.read_text().replace(f"{merchant}: s0", f"{merchant}: s1"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    env["INTERLOCK_SHARDS"] = str(two_shards.map_path)
    applied = subprocess.run([sys.executable, "-m", "interlock.cli", "shards", "apply", str(moved)], env=env,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert applied.returncode == 1, applied.stdout + applied.stderr
    assert f"merchant {merchant} would move s0 -> s1 but a shard's Redis still holds work for it (s0: rail:s0 queued)" \
        in applied.stderr
    assert load_shard_map(two_shards.map_path).ownership == current.ownership  # nothing applied

    # The race the check cannot close: the Decision reached rail:s0 after the check read it. Record the move
    # in the ledgers as apply does, install the map, and restart the ingress as apply says.
    new = replace(parse_shard_map(moved.read_text(), base_dir=two_shards.root), epoch=1)
    assert apply_ownership(current, new, []) == []
    two_shards.map_path.write_text(installed_text(moved.read_text(), new))
    assert two_shards.ingress is not None
    two_shards.ingress.restart("ingress")
    two_shards.ingress.wait_for_ingress()

    s0.restart("rail")  # s0's rail worker drains its queue: the old Decision is refused, not paid
    refusals = f"SELECT merchant_id FROM decisions WHERE reason_code = '{SHARD_NOT_OWNER}'"
    wait_for(lambda: rows(s0.ledger_path, refusals), timeout=60, what="s0 to refuse the old Decision",
             actor=s0.actors["rail"])  # fmt: skip
    again = until_definite(two_shards.mcp_url, token, payment)  # the agent repeats, as it was told to
    assert again["state"] == "APPLIED", again
    refunds = [e for e in rail_sandbox.entities("refund") if e["entity"].get("payment_id") == payment]
    assert len(refunds) == 1, refunds  # one business action, one refund, across the move
    assert rows(s0.ledger_path, f"SELECT sik FROM intents WHERE merchant_id = '{merchant}'") == []
    in_s1 = rows(two_shards.shards["s1"].ledger_path, f"SELECT state FROM intents WHERE merchant_id = '{merchant}'")
    assert in_s1 == [("APPLIED",)]


@pytest.fixture
def one_redis_two_shards(tmp_path: Path, rail_sandbox: SandboxProcess) -> Iterator[dict[str, Any]]:
    """Shards s0 and s1 started (without a map, each its own ledger) on ONE redis-server, and an ingress for s0."""
    server = EmbeddedRedis(tmp_path / "redis", appendonly=False).start()
    mandate = {**example_data(), "agent_id": "agent_one", "merchant_id": "acc_ONE", "mandate_id": "mnd_one"}
    (tmp_path / "mandates").mkdir()
    (tmp_path / "mandates" / "agent_one.yaml").write_text(yaml.safe_dump(mandate, sort_keys=False))
    token = "token-one-redis-5c1e"
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f"agents:\n  agent_one: {{token_sha256: {token_sha256(token)}}}\n")
    common = {**rail_sandbox.rail_env(), **FAST, **WAIT, "INTERLOCK_MANDATE_DIR": str(tmp_path / "mandates")}
    shards = {n: Stack(tmp_path / n, redis_url=server.url, env={**common, "INTERLOCK_SHARD": n}) for n in ("s0", "s1")}
    ingress = Stack(tmp_path / "ingress", redis_url=server.url,
                    env={**common, "INTERLOCK_SHARD": "s0", "INTERLOCK_LEDGER": str(shards["s0"].ledger_path)})
    try:
        for stack in shards.values():
            stack.start_engine()
        url = ingress.start_ingress(tokens_file=tokens)
        yield {"shards": shards, "url": url, "token": token, "redis": server.url}
    finally:
        ingress.stop()
        for stack in shards.values():
            stack.stop()
        server.stop()


def test_on_one_redis_another_shards_gate_worker_never_takes_a_call_routed_to_s0(
    one_redis_two_shards: dict[str, Any], rail_sandbox: SandboxProcess,
) -> None:
    shards, url, token = one_redis_two_shards["shards"], one_redis_two_shards["url"], one_redis_two_shards["token"]
    pid = "pay_ONEREDIS01"
    rail_sandbox.add_payment(pid, 189900)
    shards["s0"].actors["gate1"].stop()  # a rolling restart: s0's gate worker is down for the call, s1's is up
    first = anyio.run(refund, url, token, pid)
    assert first["state"] == "IN_PROGRESS", first  # s1 never took it: it waits for s0's gate worker
    assert queued(one_redis_two_shards["redis"], gates_queue("s0")) == 1
    shards["s1"].actors["gate1"].stop()  # then s1's is down and s0's is back for the repeat
    shards["s0"].restart("gate1")
    again = until_definite(url, token, pid)
    assert again["state"] == "APPLIED", again
    refunds = [e for e in rail_sandbox.entities("refund") if e["entity"].get("payment_id") == pid]
    assert len(refunds) == 1, refunds
    assert rows(shards["s1"].ledger_path, "SELECT sik FROM intents") == []  # decided by s0's ledger only
