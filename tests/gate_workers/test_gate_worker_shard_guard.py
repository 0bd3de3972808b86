"""A gate worker given the shard map refuses a proposal whose merchant the map puts on another shard (SPEC
§15): a second check of the ingress's routing, so a stale map on one ingress cannot split a merchant's intents
over two ledgers. And it refuses to start as a shard the map does not have."""

from __future__ import annotations

import subprocess
from pathlib import Path

import redis
from rq.job import Job
from rq.serializers import JSONSerializer

from deploy.redis_server import EmbeddedRedis
from interlock.queues import rail_queue, rq_queue
from sandbox.testing import SandboxProcess
from tests.gate_workers.test_gate_worker_processes import enqueue, env_for
from tests.mandates import MERCHANT
from tests.procs import INTERLOCK, Proc, running, wait_until


def shard_env(tmp_path: Path, redis_server: EmbeddedRedis, rail: SandboxProcess, shard: str) -> dict[str, str]:
    env = env_for(tmp_path, redis_server, rail)
    shard_map = tmp_path / "shards.yaml"
    shard_map.write_text(f"shards:\n  mine: {{redis_url: '{redis_server.url}', ledger: '{env['INTERLOCK_LEDGER']}'}}\n"
                         f"  other: {{redis_url: 'redis://127.0.0.1:1/0', ledger: other.sqlite3}}\n"
                         f"merchants:\n  {MERCHANT}: other\n")  # fmt: skip
    return {**env, "INTERLOCK_SHARDS": str(shard_map), "INTERLOCK_SHARD": shard}


def test_a_proposal_for_a_merchant_of_another_shard_is_refused_and_nothing_is_decided(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis, rail_sandbox: SandboxProcess
) -> None:
    rail_sandbox.add_payment("pay_GUARD001", 189900)
    worker = Proc([*INTERLOCK, "gate-worker"], shard_env(tmp_path, redis_server, rail_sandbox, "mine"),
                  tmp_path / "gw.log")  # fmt: skip
    with running(worker):
        request_id = enqueue(redis_client, "pay_GUARD001", 1000, shard="mine")  # on shard mine's own queue
        job = wait_until(lambda: (j := Job.fetch(f"proposal-{request_id}", connection=redis_client,
                                                 serializer=JSONSerializer)).is_failed and j, timeout=60,
                         what="the misrouted proposal's job to fail")  # fmt: skip
    result = job.latest_result()
    failure = (result.exc_string if result is not None else None) or ""
    assert f"merchant {MERCHANT} belongs to shard other, not to this shard mine" in failure
    assert rq_queue(rail_queue("mine"), redis_client).count == 0  # no Decision: nothing for this shard's ledger


def test_a_gate_worker_for_a_shard_the_map_does_not_have_refuses_to_start(
    tmp_path: Path, redis_server: EmbeddedRedis, rail_sandbox: SandboxProcess
) -> None:
    env = shard_env(tmp_path, redis_server, rail_sandbox, "s9")
    result = subprocess.run([*INTERLOCK, "gate-worker"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "no shard named 's9' (the map has mine, other)" in result.stderr
