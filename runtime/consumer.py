"""The RQ worker that gate workers and the rail worker consume their queues with: RQ's loop, a lean job.

RQ stays the transport. Jobs are enqueued as RQ jobs and dequeued the way RQ dequeues them (moved onto the
queue's intermediate list, where RQ's own maintenance finds any that a dead worker left behind); the
worker registers, heartbeats, honours `rq suspend` and shuts down warm on SIGTERM through RQ's own loop.
What changes is the bookkeeping around one job. RQ's SimpleWorker spends about 21 Redis round trips on it
(an Execution record, the started registry, a job heartbeat, a results stream, the finished registry):
3–4.4 ms, more than the work of admitting a Decision. Here:

* a job's end is written once, in three commands: its status, the worker that ran it and when it ended
  (one HSET), its expiry, and its removal from the intermediate list (a failure also goes to RQ's failed
  registry and its traceback to RQ's results) — jobs run inline from one prefetched batch share one
  pipeline, written before the worker next waits on Redis;
* with *prefetch* above 1, a dequeue that found a job waiting takes up to prefetch − 1 more in one script
  that stops at the first empty pop; a dequeue that had to wait for its job does not look for more (the
  queue was empty a moment ago: looking would cost two commands a job at low load, for nothing);
* the queues' names are added to RQ's set of queues once, when the worker starts (interlock.producer
  no longer does it per message);
* the worker's own heartbeat, its state (idle / busy) and the suspension flag are written and read at
  most once per second, not once per job;
* an idle worker's blocking dequeue waits IDLE_WAIT_S at a time, not RQ's 405 s, so that a SIGTERM is acted
  on within that time whichever thread the kernel gave it to (see `dequeue_timeout`).

Nothing in Interlock reads a job's return value: the ledger owns every outcome (ADR 0007) and the Redis
outcome list carries answers. With *concurrency* above 1, jobs run on a pool of that many threads and the
loop dequeues the next job as soon as a thread is free. What a SIGKILL loses is what RQ's worker loses:
the jobs taken and not finished (they stay on the intermediate list until RQ's maintenance fails them).
The agent's repeat of the call brings them back (SPEC §9).
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rq import SimpleWorker
from rq.defaults import DEFAULT_FAILURE_TTL
from rq.exceptions import StopRequested
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.results import Result
from rq.utils import as_text, get_version, now, utcformat
from rq.worker import WorkerStatus

logger = logging.getLogger(__name__)

DEFAULT_RESULT_TTL_S = 500  # RQ's own default, for jobs enqueued without one
LAZY_S = 1.0  # the worker's heartbeat, state and suspension check: at most this often
IDLE_WAIT_S = 1  # the longest one blocking dequeue waits in Redis for a job (whole seconds: RQ's type)
# A dequeue that took longer than this waited for its job: the queue was empty, so no prefetch follows it.
WAITED_S = 0.005
# Up to ARGV[1] more ids from the queue (KEYS[1]) to its intermediate list (KEYS[2]), as RQ's own dequeue moves
# them; stops at the first empty pop, so an empty queue costs one LMOVE, not prefetch − 1.
_TAKE_MORE = """
local ids = {}
for _ = 1, tonumber(ARGV[1]) do
  local id = redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
  if not id then break end
  ids[#ids + 1] = id
end
return ids
"""
_PER_JOB_STATES = (WorkerStatus.IDLE, WorkerStatus.BUSY)


class LeanWorker(SimpleWorker):
    """A non-forking RQ worker with one pipeline of bookkeeping per job, prefetch, and an optional pool."""

    def __init__(self, queues: Any, *, concurrency: int = 1, prefetch: int = 1, **kwargs: Any) -> None:
        if concurrency < 1 or prefetch < 1:
            raise ValueError("concurrency and prefetch must be at least 1")
        super().__init__(queues, **kwargs)
        self.concurrency, self.prefetch = concurrency, prefetch
        self._slots = threading.BoundedSemaphore(concurrency)
        self._pool = (ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=f"{self.name}-job")
                      if concurrency > 1 else None)  # fmt: skip
        self._taken: deque[tuple[Job, Queue]] = deque()
        self._ended: list[tuple[Job, Queue, str | None]] = []  # inline jobs whose end is not written yet
        self._beat_at = self._state_at = self._suspension_at = float("-inf")
        self._take_more_script = self.connection.register_script(_TAKE_MORE)

    def register_birth(self) -> None:
        super().register_birth()
        # What RQ's enqueue does per message (`rq info` lists queues from this set): here once, per worker.
        self.connection.sadd(Queue.redis_queues_keys, *(queue.key for queue in self.queues))

    def subscribe(self) -> None:
        """RQ's command channel (stop-job, kill-horse), read IDLE_WAIT_S at a time instead of RQ's 60 s. redis-py 8's
        PubSubWorkerThread.stop() waits for the thread, which leaves only once its read returns: with RQ's 60 s every
        stop of a worker (a SIGTERM, a fenced rail worker, the end of a burst) lasted up to a minute."""
        self.log.info("Worker %s: subscribing to channel %s", self.name, self.pubsub_channel_name)
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        self.pubsub_thread = self.pubsub.run_in_thread(  # type: ignore[assignment]
            sleep_time=IDLE_WAIT_S, daemon=True, exception_handler=self._pubsub_exception_handler)

    # --- dequeue -------------------------------------------------------------------------------------------

    @property
    def dequeue_timeout(self) -> int:
        """IDLE_WAIT_S, not RQ's 405 s. A Python signal handler runs only in the main thread, between two bytecodes,
        and the kernel may give a process-directed SIGTERM to another thread (it passes over a main thread that has a
        signal pending and is not on a CPU: one just woken by SIGCONT, say). The C handler then only notes it, and a
        main thread blocked in the dequeue's socket read is not interrupted: RQ's warm-shutdown handler runs once the
        read returns. A rail worker that SIGTERMed itself on losing its lease so stayed up for minutes (the chaos
        pause cells' NOT_STOPPED). Coming back every IDLE_WAIT_S bounds that, at one empty BLMOVE a second idle."""
        return IDLE_WAIT_S

    @property
    def connection_timeout(self) -> int:
        """RQ's socket timeout, as it was (RQ derives it from dequeue_timeout): a Redis stalled for longer than one
        dequeue must not make the worker quit."""
        timeout: int = super().dequeue_timeout + 10
        return timeout

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None) -> Any:
        if self._taken:
            return self._taken.popleft()
        self._write_ends()
        # A SIGTERM that landed since the loop last looked (while we were still BUSY, writing the ends above) only
        # set _stop_requested; RQ's dequeue would then block for its whole timeout. From IDLE on, a SIGTERM raises
        # StopRequested at once, so setting IDLE first and then looking closes the window.
        self.set_state(WorkerStatus.IDLE)
        if self._stop_requested:
            raise StopRequested()
        started = time.monotonic()
        result = super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
        if result is not None and self.prefetch > 1 and time.monotonic() - started < WAITED_S:
            self._taken.extend(self._take_more(result[1], self.prefetch - 1))
        return result

    def _take_more(self, queue: Queue, count: int) -> list[tuple[Job, Queue]]:
        """Up to *count* more jobs of *queue*, without blocking: moved to its intermediate list as RQ's own
        dequeue moves them (Redis 6.2+), or popped on an older server, where RQ pops too."""
        if get_version(self.connection) >= (6, 2, 0):
            taken = self._take_more_script(keys=[queue.key, queue.intermediate_queue_key], args=[count])
        else:
            with self.connection.pipeline(transaction=False) as pipe:
                for _ in range(count):
                    pipe.lpop(queue.key)
                taken = pipe.execute()
        ids = [as_text(job_id) for job_id in taken if job_id is not None]
        if not ids:
            return []
        jobs = Job.fetch_many(ids, connection=self.connection, serializer=self.serializer)
        gone = [job_id for job_id, job in zip(ids, jobs, strict=True) if job is None]
        if gone:  # an expired or deleted job: RQ's dequeue skips it the same way
            with self.connection.pipeline() as pipe:
                for job_id in gone:
                    pipe.lrem(queue.intermediate_queue_key, 1, job_id)
                pipe.execute()
        return [(job, queue) for job in jobs if job is not None]

    # --- run -----------------------------------------------------------------------------------------------

    def execute_job(self, job: Job, queue: Queue) -> None:
        # BUSY defers a SIGTERM to the end of this job (RQ's warm shutdown) instead of raising inside it.
        self.set_state(WorkerStatus.BUSY)
        if self._pool is None:
            self._perform(job, queue)
            return
        self._slots.acquire()
        try:
            self._pool.submit(self._perform_on_pool, job, queue)
        except BaseException:
            self._slots.release()
            raise

    def drain(self) -> None:
        """Wait for the jobs already running on the pool; call it once work() has returned. Jobs prefetched
        and not started are put back on their queue."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._write_ends()
        while self._taken:
            job, queue = self._taken.pop()
            with self.connection.pipeline() as pipe:
                pipe.lrem(queue.intermediate_queue_key, 1, job.id)
                pipe.lpush(queue.key, job.id)
                pipe.execute()

    def _perform_on_pool(self, job: Job, queue: Queue) -> None:
        try:
            self._perform(job, queue)
        finally:
            self._slots.release()

    def _perform(self, job: Job, queue: Queue) -> None:
        failure = None
        try:
            job.perform()
        except Exception:  # noqa: BLE001 - a job's failure is recorded, never the worker's end
            failure = traceback.format_exc()
            logger.error("job %s (%s) failed:\n%s", job.id, job.func_name, failure)
        if self._pool is None:
            self._ended.append((job, queue, failure))  # written with the rest of its batch
        else:
            self._write_end([(job, queue, failure)])

    def _write_ends(self) -> None:
        ended, self._ended = self._ended, []
        if ended:
            self._write_end(ended)

    def _write_end(self, ended: list[tuple[Job, Queue, str | None]]) -> None:
        try:
            # Not a transaction: each job's end is bookkeeping (ADR 0007), so one half-written is harmless.
            with self.connection.pipeline(transaction=False) as pipe:
                for job, queue, failure in ended:
                    ended_by: dict[Any, Any] = {"worker_name": self.name, "ended_at": utcformat(now())}
                    if failure is None:
                        pipe.hset(job.key, mapping={**ended_by, "status": JobStatus.FINISHED.value})
                        ttl = job.result_ttl if job.result_ttl is not None else DEFAULT_RESULT_TTL_S
                        if ttl > 0:
                            pipe.expire(job.key, ttl)
                        elif ttl == 0:
                            pipe.delete(job.key)
                    else:
                        pipe.hset(job.key, mapping=ended_by)
                        ttl = job.failure_ttl if job.failure_ttl is not None else DEFAULT_FAILURE_TTL
                        job.set_status(JobStatus.FAILED, pipeline=pipe)
                        queue.failed_job_registry.add(job, ttl=ttl, exc_string=failure, pipeline=pipe)
                        Result.create_failure(job, ttl, failure, worker_name=self.name, pipeline=pipe)
                    pipe.lrem(queue.intermediate_queue_key, 1, job.id)
                pipe.execute()
        except StopRequested:
            raise  # RQ's warm shutdown, raised from the SIGTERM handler while the worker looks idle
        except Exception as exc:  # noqa: BLE001 - bookkeeping only: the jobs' effects are already in the ledger
            logger.warning("could not record the end of %d job(s): %s", len(ended), exc)

    # --- the worker's own keys, at most once per LAZY_S ---------------------------------------------------

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        if timeout is None and pipeline is None and time.monotonic() - self._beat_at < LAZY_S:
            return
        self._beat_at = time.monotonic()
        super().heartbeat(timeout, pipeline)

    def set_state(self, state: str, pipeline: Any = None) -> None:
        if state in _PER_JOB_STATES and pipeline is None and time.monotonic() - self._state_at < LAZY_S:
            self._state = state  # what RQ's warm shutdown reads; Redis hears of it within LAZY_S
            return
        self._state_at = time.monotonic()
        super().set_state(state, pipeline)

    def check_for_suspension(self, burst: bool) -> None:
        if time.monotonic() - self._suspension_at < LAZY_S:
            return
        self._suspension_at = time.monotonic()
        super().check_for_suspension(burst)
