"""`interlock gate-worker`: one stateless RQ worker on queue "gates". Run as many as you like.

It is RQ's non-forking SimpleWorker: the ledger connection (read-only) is opened in this process
and never carried across a fork.
"""

from __future__ import annotations

import logging

import click
from rq import SimpleWorker
from rq.serializers import JSONSerializer

from gate_workers.jobs import GateRuntime, install_runtime
from interlock.config import load_settings
from interlock.queues import gates_queue, rq_queue

logger = logging.getLogger(__name__)


@click.command("gate-worker")
@click.option("--burst", is_flag=True, help="exit when the queue is empty")
@click.option("--name", default=None, help="worker name (default: RQ's)")
def gate_worker_command(burst: bool, name: str | None) -> None:
    """Evaluate proposals from queue "gates" and send decisions to the rail worker."""
    runtime = GateRuntime.from_settings(load_settings())
    install_runtime(runtime)
    queue = rq_queue(gates_queue(), runtime.redis)
    worker = SimpleWorker([queue], connection=runtime.redis, serializer=JSONSerializer, name=name)
    logger.info("gate worker %s on queue %s (ledger read-only)", worker.name, queue.name)
    worker.work(burst=burst, logging_level="WARNING", with_scheduler=False)
