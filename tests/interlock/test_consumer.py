"""The lean RQ worker (runtime.consumer): RQ's loop, one pipeline of bookkeeping per job, an optional pool.
Real redis-server; the jobs run in this process (burst mode)."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest
import redis
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from deploy.redis_server import EmbeddedRedis
from interlock.queues import rq_queue
from runtime import consumer
from runtime.consumer import LeanWorker
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
    # Each job runs until four run at once: a pool that ran fewer together would leave them waiting out the deadline.
    ids = [queue.enqueue("tests.interlock.consumer_jobs.gather", 4, job_id=f"hold-{i}", result_ttl=60).id  # type: ignore[attr-defined]
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


def test_jobs_taken_and_not_started_go_back_on_the_queue(redis_client: redis.Redis,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # Jobs were waiting when the worker looked, so it takes more; however slow its first dequeue ran on this machine.
    monkeypatch.setattr(consumer, "WAITED_S", 60.0)
    worker, queue = _worker(redis_client, "consumer-back", concurrency=1, prefetch=5)
    ids = [queue.enqueue("tests.interlock.consumer_jobs.hold", 0.01, job_id=f"back-{i}").id for i in range(5)]
    worker.work(burst=True, logging_level="WARNING", max_jobs=2)  # stops after two, three still taken
    assert queue.count == 0, "one dequeue took all five"
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


def test_a_stop_requested_while_ending_a_job_stops_before_the_next_blocking_dequeue(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fenced rail worker SIGTERMs itself; if that lands while the worker still looks BUSY (writing a job's end),
    RQ only notes the request. The worker must then stop, not sit in a blocking dequeue for minutes."""
    worker, queue = _worker(redis_client, "consumer-stop", concurrency=1)
    first = queue.enqueue("tests.interlock.consumer_jobs.hold", 0.01, job_id="stop-first").id
    write_end = worker._write_end

    def end_then_sigterm(ended: Any) -> None:
        write_end(ended)
        os.kill(os.getpid(), signal.SIGTERM)  # handled by RQ's warm-shutdown handler, in this (the main) thread

    monkeypatch.setattr(worker, "_write_end", end_then_sigterm)
    # Were the worker blocked in its dequeue, this job would wake it and run before it noticed the request.
    late = threading.Timer(2.0, lambda: queue.enqueue("tests.interlock.consumer_jobs.hold", 0.01, job_id="stop-late"))
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    late.start()
    try:
        worker.work(logging_level="WARNING")  # not burst: the dequeue would block for RQ's dequeue timeout
    finally:
        late.join()
        for sig, handler in handlers.items():  # RQ leaves its own handlers installed
            signal.signal(sig, handler)
    assert _finished(redis_client, first)
    assert queue.get_job_ids() == ["stop-late"], "the worker stopped without taking the job that came later"


def _blocked_in_dequeue(client: redis.Redis) -> bool:
    return any(c.get("cmd") == "blmove" and "b" in c.get("flags", "") for c in client.client_list())


def test_a_sigterm_taken_by_another_thread_stops_an_idle_worker(redis_server: EmbeddedRedis,
                                                                redis_client: redis.Redis) -> None:  # fmt: skip
    """Python runs signal handlers in the main thread only, and the kernel may give a process-directed SIGTERM to any
    thread. The main thread, blocked in its dequeue, must still hear of it: not only once RQ's 405 s dequeue ends."""
    # The worker's own client, every connection of it made with a socket timeout longer than RQ's dequeue: a shorter
    # one would end a blocked dequeue (and the worker) by itself.
    worker, queue = _worker(redis.Redis.from_url(redis_server.url, socket_timeout=600), "consumer-other-thread", 1)
    released = threading.Event()
    # Started while the main thread still takes SIGTERM; the threads started after it inherit the blocked mask.
    threading.Thread(target=released.wait, name="takes-sigterm", daemon=True).start()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def sigterm_while_blocked() -> None:
        # RQ's handler is installed before the loop; the worker is IDLE once its dequeue blocks in Redis.
        while not released.is_set() and not _blocked_in_dequeue(redis_client):
            time.sleep(0.02)
        if not released.is_set():
            os.kill(os.getpid(), signal.SIGTERM)
        # A worker that missed the request is woken by a job long after: it takes it instead of having stopped.
        if not released.wait(60):
            queue.enqueue("tests.interlock.consumer_jobs.hold", 0.01, job_id="missed")

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    sender = threading.Thread(target=sigterm_while_blocked, name="sends-sigterm")
    sender.start()
    try:
        worker.work(logging_level="WARNING")  # not burst: the dequeue would block for RQ's dequeue timeout
    finally:
        released.set()
        sender.join()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        for sig, handler in handlers.items():  # RQ leaves its own handlers installed
            signal.signal(sig, handler)
    assert not Job.exists("missed", connection=redis_client), "the worker stopped on the SIGTERM, not on a job"
