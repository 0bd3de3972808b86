"""How a message goes onto an RQ queue on the hot path: RQ's own job hash and queue list, in two commands.

`Queue.enqueue` on a pipeline writes the job hash twice (its fields, then its status), adds the queue's name to
RQ's set of queues, and wraps it all in MULTI/EXEC: six commands where two do. Here the job is the one RQ
builds (`Queue.create_job`: the same fields, serializer, origin, timeout and TTLs, status QUEUED), saved with
one HSET and pushed with one RPUSH on the caller's pipeline. The job's hash is written before its id is
pushed, so a worker never dequeues an id whose hash is missing; a connection lost between the two leaves at
most a hash no one will run, which expires with nothing paid (the queue delivers; the ledger decides, ADR 0007:
the agent's repeat of the call brings it back). A queue's name is added to RQ's set once per worker, when it
starts (runtime.consumer.LeanWorker), not once per message.
"""

from __future__ import annotations

from typing import Any

from rq.job import Job
from rq.queue import Queue
from rq.utils import now


def enqueue(queue: Queue, func: str, *args: Any, job_id: str, result_ttl: int, failure_ttl: int,
            pipeline: Any) -> Job:  # fmt: skip
    """Add the job and push its id on *pipeline* (the caller executes it); returns the job."""
    job = queue.create_job(func, args=args, job_id=job_id, result_ttl=result_ttl, failure_ttl=failure_ttl)
    job.enqueued_at = now()
    job.save(pipeline=pipeline)
    queue.push_job_id(job.id, pipeline=pipeline)
    return job
