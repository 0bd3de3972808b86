"""Gate workers as real processes on a real Redis: stateless, several on one queue, redelivery-safe."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import redis
from rq import Worker
from rq.job import Job
from rq.serializers import JSONSerializer

from deploy.redis_server import EmbeddedRedis
from interlock.messages import Decision, Proposal, Verdict
from interlock.queues import DEFAULT_SHARD, GATE_JOB, gates_queue, rail_queue, rq_queue
from ledger.db import open_ledger
from sandbox.testing import SandboxProcess
from tests.mandates import AGENT, EXAMPLE, MERCHANT
from tests.procs import INTERLOCK, Proc, running, wait_until

_ids = itertools.count(1)


def env_for(tmp_path: Path, redis_server: EmbeddedRedis, rail: SandboxProcess) -> dict[str, str]:
    ledger = tmp_path / "ledger.sqlite3"
    open_ledger(ledger).close()  # the rail worker's job in production; gate workers only read it
    return {"INTERLOCK_LEDGER": str(ledger), "REDIS_URL": redis_server.url, "INTERLOCK_MANDATE": str(EXAMPLE),
            **rail.rail_env()}  # fmt: skip


def enqueue(client: redis.Redis, payment_id: str, amount: int, shard: str = DEFAULT_SHARD) -> str:
    request_id = f"req{next(_ids)}"
    p = Proposal(request_id=request_id, agent_id=AGENT, merchant_id=MERCHANT, tool="create_refund",
                 arguments={"payment_id": payment_id, "amount": amount}, received_at_ms=1)  # fmt: skip
    rq_queue(gates_queue(shard), client).enqueue(GATE_JOB, p.to_json(), job_id=f"proposal-{request_id}")
    return request_id


def decisions(client: redis.Redis) -> list[Decision]:
    queue = rq_queue(rail_queue(), client)
    return [Decision.from_json(job.args[0]) for job in queue.get_jobs()]


def test_two_gate_workers_share_one_queue(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis, rail_sandbox: SandboxProcess
) -> None:
    env = env_for(tmp_path, redis_server, rail_sandbox)
    rail_sandbox.add_payment("pay_GW0001", 189900)
    workers = [Proc([*INTERLOCK, "gate-worker", "--name", f"gw{i}"], env, tmp_path / f"gw{i}.log") for i in (1, 2)]
    with running(*workers):
        # Both must be listening before the burst arrives, or the first one up takes every job.
        wait_until(lambda: {w.name for w in Worker.all(connection=redis_client)} == {"gw1", "gw2"}, timeout=60,
                   what="both gate workers to register")  # fmt: skip
        requests = [enqueue(redis_client, "pay_GW0001", 100 + i) for i in range(30)]
        requests.append(enqueue(redis_client, "pay_GW0001", 4800000))  # the injected over-refund
        wait_until(lambda: len(decisions(redis_client)) == len(requests), timeout=60, what="31 decisions")
        by_request = {d.request_id: d for d in decisions(redis_client)}
        assert set(by_request) == set(requests)
        over = by_request[requests[-1]]
        assert (over.verdict, over.reason_code) == (Verdict.BLOCK, "G2_EXCEEDS_REFUNDABLE")
        assert all(by_request[r].verdict is Verdict.ALLOW for r in requests[:-1])
        assert all(d.terms is not None and d.terms.subject == "pay_GW0001" for d in by_request.values())
        ran_on = {Job.fetch(f"proposal-{r}", connection=redis_client, serializer=JSONSerializer).worker_name
                  for r in requests}  # fmt: skip
        assert ran_on == {"gw1", "gw2"}, f"both workers should have taken jobs: {ran_on}"


def _decision_job(client: redis.Redis, request_id: str) -> Job:
    return Job.fetch(f"decision-{request_id}", connection=client, serializer=JSONSerializer)


def _business_content(decision: Decision) -> dict[str, object]:
    """What the rail worker acts on: everything but when it was decided, the rail read's timestamp and traces."""
    body = json.loads(decision.to_json())
    for timing in ("decided_at_ms", "rail_read_at_ms", "trace"):
        body.pop(timing, None)
    body["results"] = [(r["gate"], r["verdict"], r["reason_code"]) for r in body["results"]]
    return body


def test_a_redelivered_proposal_produces_the_same_decision(
    tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis, rail_sandbox: SandboxProcess
) -> None:
    env = env_for(tmp_path, redis_server, rail_sandbox)
    rail_sandbox.add_payment("pay_GW0002", 50000)
    request_id = enqueue(redis_client, "pay_GW0002", 20000)
    rail = rq_queue(rail_queue(), redis_client)

    def drain(log: str) -> None:
        worker = Proc([*INTERLOCK, "gate-worker", "--burst"], env, tmp_path / log)
        wait_until(lambda: not worker.alive(), timeout=60, what="burst worker to drain the queue")
        assert worker.popen.returncode == 0, worker.output()

    drain("gw1.log")
    assert rail.count == 1
    first = Decision.from_json(_decision_job(redis_client, request_id).args[0])
    # Deliver the very same proposal job a second time, as a crashed-and-requeued worker would, and evaluate it
    # again: the decision job (keyed by request_id) is written afresh and its id queued a second time.
    proposal = Job.fetch(f"proposal-{request_id}", connection=redis_client, serializer=JSONSerializer)
    rq_queue(gates_queue(), redis_client).enqueue_job(proposal)
    drain("gw2.log")
    assert rail.count == 2, "the redelivered proposal was not evaluated again"
    again = Decision.from_json(_decision_job(redis_client, request_id).args[0])
    assert again.trace != first.trace, "the second read is the first decision, not a new one"
    assert first.sik is not None and first.verdict is Verdict.ALLOW
    assert _business_content(again) == _business_content(first)
