"""An in-memory stand-in for one shard's Redis and its RQ queues, which can lose, duplicate, delay and reorder.

Only what the actors ask of Redis is here: lists (the outcome hand-off, the reconciler's hints), hashes (the
unrecorded-answer mirror), EXPIRE, pipelines, and `SimQueue.enqueue` in place of an RQ queue. Every command is a
scheduler point. A partitioned process gets `redis.ConnectionError`; a restart without persistence (`flush`)
loses every key and every queued job at once, as SPEC §2 allows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from simulation.scheduler import Scheduler


@dataclass
class QueueFaults:
    lose: float = 0.0
    duplicate: float = 0.0
    delay: float = 0.0
    delay_ms: tuple[int, int] = (100, 5_000)
    reorder: float = 0.0


@dataclass
class Job:
    func: str
    args: tuple[Any, ...]
    job_id: str | None
    deliver_at: int


class SimRedis:
    def __init__(self, sched: Scheduler, name: str, faults: QueueFaults) -> None:
        self.sched = sched
        self.name = name
        self.faults = faults
        self.lists: dict[str, list[str]] = {}
        self.hashes: dict[str, dict[str, str]] = {}
        self.strings: dict[str, tuple[str, int | None]] = {}  # value, expiry (simulated mono ms)
        self.queues: dict[str, SimQueue] = {}
        self.partitioned_until: dict[str, int] = {}

    # -- faults ----------------------------------------------------------------------------------------------

    def flush(self) -> None:
        """A restart without persistence: every key and every queued job is gone."""
        self.sched.counters.fault("redis_flush")
        self.sched.note(f"redis {self.name} flushed")
        self.lists.clear()
        self.hashes.clear()
        self.strings.clear()
        for queue in self.queues.values():
            queue.jobs.clear()

    def partition(self, process: str, until_mono_ms: int) -> None:
        self.partitioned_until[process] = until_mono_ms

    def _command(self, name: str) -> None:
        self.sched.point(f"redis.{name}")
        self.reachable()

    def reachable(self) -> None:
        actor = self.sched.current
        if actor is not None and self.partitioned_until.get(actor.process.name, -1) > self.sched.clock.mono_ms:
            raise redis.ConnectionError(f"Error 111 connecting to redis {self.name}: Connection refused (partitioned)")

    # -- commands --------------------------------------------------------------------------------------------

    def lpush(self, key: str, *values: str) -> int:
        self._command("lpush")
        return self._lpush(key, *values)

    def _lpush(self, key: str, *values: str) -> int:
        items = self.lists.setdefault(key, [])
        for value in values:
            items.insert(0, value)
        return len(items)

    def rpush(self, key: str, *values: str) -> int:
        self._command("rpush")
        return self._rpush(key, *values)

    def _rpush(self, key: str, *values: str) -> int:
        items = self.lists.setdefault(key, [])
        items.extend(values)
        return len(items)

    def blpop(self, keys: list[str], timeout: float = 0) -> tuple[str, str] | None:
        self._command("blpop")

        def any_item() -> bool:
            return any(self.lists.get(k) for k in keys)

        if not any_item():
            self.sched.wait(any_item, max(int(timeout * 1000), 1) if timeout else None)
            self.reachable()
        for key in keys:
            items = self.lists.get(key)
            if items:
                return key, items.pop(0)
        return None

    def lrange(self, key: str, start: int, end: int) -> list[str]:
        self._command("lrange")
        return self._lrange(key, start, end)

    def _lrange(self, key: str, start: int, end: int) -> list[str]:
        items = self.lists.get(key, [])
        return items[start: None if end == -1 else end + 1]

    def _ltrim(self, key: str, start: int, end: int) -> bool:
        items = self.lists.get(key, [])
        self.lists[key] = items[start: None if end == -1 else end + 1]
        return True

    def set(self, key: str, value: str, *, nx: bool = False, px: int | None = None) -> bool | None:
        self._command("set")
        now = self.sched.clock.mono_ms
        held = self.strings.get(key)
        if nx and held is not None and (held[1] is None or held[1] > now):
            return None
        self.strings[key] = (value, None if px is None else now + px)
        return True

    def get(self, key: str) -> str | None:
        self._command("get")
        held = self.strings.get(key)
        if held is None or held[1] is not None and held[1] <= self.sched.clock.mono_ms:
            return None
        return held[0]

    def expire(self, key: str, seconds: int) -> bool:
        self._command("expire")
        return True

    def hset(self, key: str, field_name: str, value: str) -> int:
        self._command("hset")
        self.hashes.setdefault(key, {})[field_name] = value
        return 1

    def hdel(self, key: str, *fields: str) -> int:
        self._command("hdel")
        table = self.hashes.get(key, {})
        return sum(1 for f in fields if table.pop(f, None) is not None)

    def hgetall(self, key: str) -> dict[str, str]:
        self._command("hgetall")
        return dict(self.hashes.get(key, {}))

    def pipeline(self, transaction: bool = True) -> SimPipeline:
        return SimPipeline(self)

    def queue(self, name: str) -> SimQueue:
        queue = self.queues.get(name)
        if queue is None:
            queue = self.queues[name] = SimQueue(self, name)
        return queue


class SimPipeline:
    """Commands queued and applied together at `execute()`: one point, all or nothing."""

    def __init__(self, client: SimRedis) -> None:
        self.client = client
        self.ops: list[Callable[[], Any]] = []

    def lpush(self, key: str, *values: str) -> SimPipeline:
        self.ops.append(lambda: self.client._lpush(key, *values))
        return self

    def rpush(self, key: str, *values: str) -> SimPipeline:
        self.ops.append(lambda: self.client._rpush(key, *values))
        return self

    def expire(self, key: str, seconds: int) -> SimPipeline:
        self.ops.append(lambda: True)
        return self

    def lrange(self, key: str, start: int, end: int) -> SimPipeline:
        self.ops.append(lambda: self.client._lrange(key, start, end))
        return self

    def ltrim(self, key: str, start: int, end: int) -> SimPipeline:
        self.ops.append(lambda: self.client._ltrim(key, start, end))
        return self

    def execute(self) -> list[Any]:
        self.client._command("pipeline")
        ops, self.ops = self.ops, []
        return [op() for op in ops]


class _MadeJob:
    """A job as `create_job` returns it: saved on its queue, delivered once its id is pushed."""

    def __init__(self, queue: SimQueue, job: Job) -> None:
        self.queue, self.job = queue, job
        self.id = str(job.job_id)
        self.enqueued_at: Any = None

    def save(self, pipeline: SimPipeline | None = None) -> None:
        self.queue._saved[self.id] = self.job


class SimQueue:
    """An RQ queue's part that the actors see: `enqueue(func, *args, job_id=..., pipeline=...)`, or the producer's
    `create_job` + `push_job_id` (interlock.producer). Consumers take
    jobs with `take()`; the shard's QueueFaults decide at enqueue time whether a job is lost, doubled or late, and
    at take time whether it jumps the line."""

    def __init__(self, client: SimRedis, name: str) -> None:
        self.client = client
        self.name = name
        self.jobs: list[Job] = []
        self._saved: dict[str, Job] = {}  # made and saved by the producer, not yet pushed

    def enqueue(self, func: str, *args: Any, job_id: str | None = None, pipeline: SimPipeline | None = None,
                **_options: Any) -> Job:  # fmt: skip
        job = Job(func, args, job_id, 0)
        if pipeline is not None:
            pipeline.ops.append(lambda: self._deliver(job))
        else:
            self.client._command("enqueue")
            self._deliver(job)
        return job

    # interlock.producer's two steps, as on RQ's Queue: the job made and saved, then its id pushed.
    def create_job(self, func: str, *, args: tuple[Any, ...], job_id: str, **_options: Any) -> _MadeJob:
        return _MadeJob(self, Job(func, tuple(args), job_id, 0))

    def push_job_id(self, job_id: str, pipeline: SimPipeline | None = None) -> None:
        job = self._saved.pop(job_id)
        if pipeline is not None:
            pipeline.ops.append(lambda: self._deliver(job))
        else:
            self.client._command("enqueue")
            self._deliver(job)

    def _deliver(self, job: Job) -> None:
        sched, faults = self.client.sched, self.client.faults
        if faults.lose and sched.rng.random() < faults.lose:
            sched.counters.fault("queue_lost")
            return
        copies = 2 if faults.duplicate and sched.rng.random() < faults.duplicate else 1
        if copies == 2:
            sched.counters.fault("queue_duplicated")
        for _ in range(copies):
            at = sched.clock.mono_ms
            if faults.delay and sched.rng.random() < faults.delay:
                sched.counters.fault("queue_delayed")
                at += sched.rng.randint(*faults.delay_ms)
            self.jobs.append(Job(job.func, job.args, job.job_id, at))

    def ready(self) -> bool:
        now = self.client.sched.clock.mono_ms
        return any(j.deliver_at <= now for j in self.jobs)

    def take(self, timeout_ms: int | None = None) -> Job | None:
        """The next deliverable job (sometimes not the oldest one), waiting up to *timeout_ms* for one."""
        sched = self.client.sched
        self.client._command("dequeue")
        if not self.ready():
            later = [j.deliver_at for j in self.jobs]
            wait_ms = timeout_ms
            if later:
                soonest = max(min(later) - sched.clock.mono_ms, 1)
                wait_ms = soonest if wait_ms is None else min(wait_ms, soonest)
            sched.wait(self.ready, wait_ms)
            self.client.reachable()
            if not self.ready():
                return None
        now = sched.clock.mono_ms
        deliverable = [i for i, j in enumerate(self.jobs) if j.deliver_at <= now]
        pick = deliverable[0]
        faults = self.client.faults
        if len(deliverable) > 1 and faults.reorder and sched.rng.random() < faults.reorder:
            sched.counters.fault("queue_reordered")
            pick = deliverable[sched.rng.randrange(len(deliverable))]
        return self.jobs.pop(pick)
