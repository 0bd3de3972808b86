"""The lean RQ worker (interlock.consumer): RQ's loop, one pipeline of bookkeeping per job, an optional pool.
Real redis-server; the jobs run in this process (burst mode)."""

from __future__ import annotations

from typing import Any

import redis
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from interlock.consumer import LeanWorker
from interlock.queues import rq_queue
from tests.interlock import consumer_jobs


def _worker(client: redis.Redis, name: str, concurrency: int, prefetch: int = 1) -> tuple[LeanWorker, Any]:
    queue = rq_queue(name, client)
    worker = LeanWorker([queue], connection=client, serializer=JSONSerializer, concurrency=concurrency,
                        prefetch=prefetch)  # fmt: skip
    return worker, queue


def _finished(client: redis.Redis, job_id: str) -> bool:
    return Job.fetch(job_id, connection=client, serializer=JSONSerializer).get_status() == JobStatus.FINISHED


def test_a_pool_runs_jobs_together_and_records_each_end(redis_client: redis.Redis) -> None:
    worker, queue = _worker(redis_client, "consumer-pool", concurrency=4)
    ids = [queue.enqueue("tests.interlock.consumer_jobs.hold", 0.3, job_id=f"hold-{i}", result_ttl=60).id  # type: ignore[attr-defined]
           for i in range(8)]  # fmt: skip
    consumer_jobs.peak = 0
    worker.work(burst=True, logging_level="WARNING")
    worker.drain()
    assert consumer_jobs.peak == 4, f"at most {consumer_jobs.peak} jobs ran at once"
    for job_id in ids:
        job = Job.fetch(job_id, connection=redis_client, serializer=JSONSerializer)
        assert job.get_status() == JobStatus.FINISHED
        assert job.worker_name == worker.name
        assert 0 < redis_client.ttl(job.key) <= 60
    assert redis_client.llen(queue.intermediate_queue_key) == 0, "every finished job leaves the intermediate list"


def test_one_at_a_time_without_a_pool_taking_several_per_dequeue(redis_client: redis.Redis) -> None:
    worker, queue = _worker(redis_client, "consumer-inline", concurrency=1, prefetch=4)
    ids = [queue.enqueue("tests.interlock.consumer_jobs.hold", 0.05, job_id=f"inline-{i}").id for i in range(6)]
    consumer_jobs.peak = 0
    worker.work(burst=True, logging_level="WARNING")
    assert consumer_jobs.peak == 1
    assert all(_finished(redis_client, job_id) for job_id in ids)
    assert redis_client.llen(queue.intermediate_queue_key) == 0


def test_jobs_taken_and_not_started_go_back_on_the_queue(redis_client: redis.Redis) -> None:
    worker, queue = _worker(redis_client, "consumer-back", concurrency=1, prefetch=5)
    ids = [queue.enqueue("tests.interlock.consumer_jobs.hold", 0.01, job_id=f"back-{i}").id for i in range(5)]
    worker.work(burst=True, logging_level="WARNING", max_jobs=2)  # stops after two, three still taken
    worker.drain()
    assert [_finished(redis_client, job_id) for job_id in ids] == [True, True, False, False, False]
    assert queue.get_job_ids() == ids[2:], "the untouched jobs are back, in their order"
    assert redis_client.llen(queue.intermediate_queue_key) == 0


def test_a_failing_job_lands_in_the_failed_registry_with_its_traceback(redis_client: redis.Redis) -> None:
    worker, queue = _worker(redis_client, "consumer-fail", concurrency=2)
    queue.enqueue("tests.interlock.consumer_jobs.refuse", "no such payment", job_id="refused")  # type: ignore[attr-defined]
    queue.enqueue("tests.interlock.consumer_jobs.hold", 0.01, job_id="fine")  # type: ignore[attr-defined]
    worker.work(burst=True, logging_level="WARNING")
    worker.drain()
    assert redis_client.llen(queue.intermediate_queue_key) == 0
    refused = Job.fetch("refused", connection=redis_client, serializer=JSONSerializer)
    assert refused.get_status() == JobStatus.FAILED
    assert "refused" in queue.failed_job_registry.get_job_ids()  # type: ignore[attr-defined]
    result = refused.latest_result()
    assert result is not None and "ValueError: no such payment" in (result.exc_string or "")
    assert Job.fetch("fine", connection=redis_client, serializer=JSONSerializer).get_status() == JobStatus.FINISHED
