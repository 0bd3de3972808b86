"""interlock.producer: a message goes onto an RQ queue as the job RQ builds, in one HSET and one RPUSH, and RQ's own
worker machinery runs it. Real redis-server; Redis's own command counters."""

from __future__ import annotations

import redis
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from interlock.producer import enqueue
from interlock.queues import rq_queue
from runtime.consumer import LeanWorker


def _calls(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


def test_a_message_is_one_hset_and_one_rpush_and_rq_sees_the_job_it_would_have_built(
        redis_client: redis.Redis) -> None:  # fmt: skip
    queue = rq_queue("producer-plain", redis_client)
    before = _calls(redis_client)
    pipe = redis_client.pipeline(transaction=False)
    enqueue(queue, "tests.interlock.consumer_jobs.hold", 0.01, job_id="msg-1", result_ttl=60, failure_ttl=600,
            pipeline=pipe)  # fmt: skip
    pipe.execute()
    after = _calls(redis_client)
    spent = {name: after[name] - before.get(name, 0) for name in after if after[name] != before.get(name, 0)}
    spent.pop("info", None)
    assert spent == {"hset": 1, "rpush": 1}
    assert queue.get_job_ids() == ["msg-1"]
    job = Job.fetch("msg-1", connection=redis_client, serializer=JSONSerializer)
    assert job.get_status() == JobStatus.QUEUED and job.origin == queue.name and job.args == [0.01]
    assert (job.result_ttl, job.failure_ttl, job.enqueued_at is not None) == (60, 600, True)


def test_a_lean_worker_runs_it_and_registers_its_queue_once_at_birth(redis_client: redis.Redis) -> None:
    queue = rq_queue("producer-run", redis_client)
    pipe = redis_client.pipeline(transaction=False)
    enqueue(queue, "tests.interlock.consumer_jobs.hold", 0.01, job_id="msg-2", result_ttl=60, failure_ttl=600,
            pipeline=pipe)  # fmt: skip
    pipe.execute()
    assert not redis_client.sismember("rq:queues", queue.key), "enqueueing does not register the queue"
    worker = LeanWorker([queue], connection=redis_client, serializer=JSONSerializer)
    worker.work(burst=True, logging_level="WARNING")
    worker.drain()
    assert redis_client.sismember("rq:queues", queue.key)
    job = Job.fetch("msg-2", connection=redis_client, serializer=JSONSerializer)
    assert job.get_status() == JobStatus.FINISHED and job.worker_name == worker.name
    assert 0 < redis_client.ttl(job.key) <= 60
