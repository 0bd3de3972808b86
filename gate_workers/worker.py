"""`interlock gate-worker`: one stateless RQ worker on queue "gates". Run as many as you like.

It is a non-forking RQ worker (runtime.consumer.LeanWorker) that evaluates up to
INTERLOCK_GATE_CONCURRENCY proposals at once on a thread pool: a proposal spends most of its time waiting
on its rail read, so one process keeps many reads out. Each thread opens its own read-only ledger
connection; none is ever carried across a fork or shared between threads.
"""

from __future__ import annotations

import logging

import click
from rq.serializers import JSONSerializer

from gate_workers.jobs import GateRuntime, install_runtime
from interlock.config import load_settings
from interlock.errors import PurposeModelUnavailable
from interlock.queues import gates_queue, rq_queue
from runtime.consumer import LeanWorker

logger = logging.getLogger(__name__)

PREFETCH = 4


@click.command("gate-worker")
@click.option("--burst", is_flag=True, help="exit when the queue is empty")
@click.option("--name", default=None, help="worker name (default: RQ's)")
def gate_worker_command(burst: bool, name: str | None) -> None:
    """Evaluate proposals from this shard's queue ("gates", "gates:<shard>") and send decisions to the rail worker."""
    settings = load_settings()
    try:
        runtime = GateRuntime.from_settings(settings)
    except PurposeModelUnavailable as exc:
        raise click.ClickException(f"gate worker not started: {exc}") from exc
    install_runtime(runtime)
    queue = rq_queue(gates_queue(settings.shard), runtime.redis)
    # Prefetch stays small: a proposal taken here waits for this worker's pool while another worker may idle.
    concurrency = settings.gate_concurrency
    worker = LeanWorker([queue], connection=runtime.redis, serializer=JSONSerializer, name=name,
                        concurrency=concurrency, prefetch=min(PREFETCH, concurrency))  # fmt: skip
    logger.info("gate worker %s on queue %s, %d proposals at once (ledger read-only)", worker.name, queue.name,
                settings.gate_concurrency)  # fmt: skip
    try:
        worker.work(burst=burst, logging_level="WARNING", with_scheduler=False)
    finally:
        worker.drain()
