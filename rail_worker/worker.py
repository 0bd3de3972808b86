"""`interlock rail-worker`: the only process that moves money. Exactly one per shard holds the lease."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

import click
from rq.serializers import JSONSerializer

from interlock.clock import now_ms
from interlock.config import load_settings
from interlock.errors import LeaseHeld
from interlock.queues import rail_queue, rq_queue
from interlock.redis_conn import connect
from ledger import leases
from rail_worker import jobs
from rail_worker.dispatch import Dispatcher
from rail_worker.lease import Heartbeat, boot
from rail_worker.runtime import RailRuntime
from rail_worker.writer import LedgerWriter
from runtime.consumer import LeanWorker

logger = logging.getLogger(__name__)

PREFETCH = 32  # Decisions taken off the queue per dequeue, at most


@click.command("rail-worker")
@click.option("--burst", is_flag=True, help="exit when the rail queue is empty")
@click.option("--wait-lease", type=float, default=0.0, show_default=True,
              help="seconds to keep trying while another worker's lease is still fresh (e.g. after a crash)")
def rail_worker_command(burst: bool, wait_lease: float) -> None:
    """Admit decisions and execute authorized intents, committing IN_FLIGHT before every rail call."""
    settings = load_settings()
    rt = RailRuntime.build(settings, connect(settings.redis_url))
    stranded = _boot_when_free(rt, wait_lease)  # LeaseHeld / AuditChainBroken stop us with a clear message
    rt.writer = LedgerWriter(rt.ledger).start()  # from here on only the writer thread touches rt.ledger
    lost = rt.lease_lost
    heartbeat = Heartbeat(rt)
    heartbeat.start()
    threading.Thread(target=_stop_when_lost, args=(lost,), daemon=True, name="lease-watch").start()
    dispatcher = Dispatcher(rt, settings.rail_concurrency)
    jobs.install(dispatcher)
    try:
        for merchant_id, sik in stranded:
            logger.info("executing intent %s left AUTHORIZED by a previous worker", sik)
            dispatcher.execute(merchant_id, sik, None)
        queue = rq_queue(rail_queue(settings.shard), rt.redis)
        # The main thread only hands Decisions to call slots, so it takes them a few at a time.
        worker = LeanWorker([queue], connection=rt.redis, serializer=JSONSerializer,
                            prefetch=min(PREFETCH, settings.rail_concurrency))  # fmt: skip
        logger.info("rail worker %s (epoch %d) consuming %s with up to %d calls in flight", rt.owner,
                    rt.current_lease().epoch, queue.name, settings.rail_concurrency)  # fmt: skip
        try:
            worker.work(burst=burst, logging_level="WARNING", with_scheduler=False)
        finally:
            worker.drain()  # Decisions taken and not yet handed over go back on the queue
    finally:
        dispatcher.drain()  # every call already out is recorded (or fenced) while the lease still beats
        heartbeat.stopping.set()
        if not lost.is_set():
            rt.write(lambda conn: leases.release(conn, rt.current_lease(), now=now_ms()))
        rt.writer.stop()
    if lost.is_set():
        sys.exit(3)


def _boot_when_free(rt: RailRuntime, wait_s: float) -> list[tuple[str, str]]:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return boot(rt)
        except LeaseHeld as exc:
            if time.monotonic() >= deadline:
                raise
            logger.info("%s; retrying until %.0fs have passed", exc, wait_s)
            time.sleep(0.25)


def _stop_when_lost(lost: threading.Event) -> None:
    lost.wait()
    # Warm shutdown: the running job finishes its ledger write, which the epoch fence refuses. Any thread may take
    # the signal; the main thread, idle in its dequeue, acts on it within the consumer's IDLE_WAIT_S.
    os.kill(os.getpid(), signal.SIGTERM)
