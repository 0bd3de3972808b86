"""`interlock reconciler`: the reconcile loop as a process. Several may run; each intent is leased."""

from __future__ import annotations

import heapq
import logging
import signal
import time
from types import FrameType

import click
import redis
from rq.registry import clean_registries

from interlock.clock import owner_id
from interlock.config import load_settings
from interlock.errors import AuditChainBroken
from interlock.mandate import MandateStore
from interlock.queues import reconcile_hint_key, rq_queue, shard_queues
from interlock.redis_conn import connect
from ledger import audit
from ledger.db import open_ledger
from rails.base import make_rail
from reconciler.loop import Reconciler

logger = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 0.5
REGISTRY_CLEANUP_S = 5.0
# A hinted intent is looked at this long after its min delay has passed, so clock granularity between the
# rail worker's recorded end of the call and this process's monotonic clock cannot wake us a hair early.
DUE_SLACK_S = 0.02
HINTS_PER_DRAIN = 1000


@click.command("reconciler")
@click.option("--once", is_flag=True,
              help="one sweep, then exit (it settles no ambiguous intent: it has watched none long enough, ADR 0023)")
def reconciler_command(once: bool) -> None:
    """Settle every UNKNOWN intent by reading the rail; re-enqueue confirmed-absent ones for a retry."""
    settings = load_settings()
    ledger = open_ledger(settings.require("ledger"))
    bad = audit.verify_chain(ledger)
    if bad is not None:
        raise AuditChainBroken(bad)
    client = connect(settings.redis_url)
    rec = Reconciler(settings=settings, ledger=ledger, rail=make_rail(settings), redis=client,
                     owner=owner_id("reconciler"), mandates=MandateStore.from_settings(settings))  # fmt: skip
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logger.info("reconciler %s started (min delay %d ms)", rec.owner, settings.reconcile_min_delay_ms)
    last_cleanup = 0.0
    wakes: list[float] = []  # monotonic instants at which a hinted intent becomes due (a min-heap)
    delay_s = settings.reconcile_min_delay_ms / 1000 + DUE_SLACK_S
    while not stopping:
        if time.monotonic() - last_cleanup > REGISTRY_CLEANUP_S:
            _clean_rq_registries(client, settings.shard)
            last_cleanup = time.monotonic()
        rec.sweep()
        if once:
            break
        now = time.monotonic()
        while wakes and wakes[0] <= now:
            heapq.heappop(wakes)
        # Sleep until the next hinted intent is due, not a whole interval past it: a refund the rail worker
        # answered is due min_delay after its answer (loop._due), and this wait is the agent's wait.
        timeout = min(SWEEP_INTERVAL_S, wakes[0] - now) if wakes else SWEEP_INTERVAL_S
        try:
            # A hint only wakes us early; the sweep above finds everything that is due either way.
            hints = _wait_for_hints(client, settings.shard, timeout)
        except redis.RedisError as exc:
            logger.warning("redis unavailable (%s); sweeping the ledger without hints", exc)
            time.sleep(SWEEP_INTERVAL_S)
            continue
        if hints:
            # Each hint is an intent just recorded UNKNOWN: sweep now (an unfinished or key-less one may already
            # be due) and again when its min delay has passed. One wake-up per batch: they arrived together.
            heapq.heappush(wakes, time.monotonic() + delay_s)


def _wait_for_hints(client: redis.Redis, shard: str, timeout_s: float) -> int:
    """Block up to *timeout_s* for hints; returns how many were taken. Drains every hint already queued, so a
    burst of UNKNOWN answers costs one sweep, not one sweep per hint."""
    key = reconcile_hint_key(shard)
    # Never 0: BLPOP's 0 blocks for ever.
    first = client.blpop([key], timeout=max(timeout_s, 0.001))
    if first is None:
        return 0
    pipe = client.pipeline(transaction=True)  # LRANGE + LTRIM, not LPOP with a count: any Redis version
    pipe.lrange(key, 0, HINTS_PER_DRAIN - 1)
    pipe.ltrim(key, HINTS_PER_DRAIN, -1)
    rest, _ = pipe.execute()
    return 1 + len(rest)


def _clean_rq_registries(client: redis.Redis, shard: str) -> None:
    """Move jobs of SIGKILLed workers out of STARTED so they do not sit there for minutes (SPEC §9)."""
    for name in shard_queues(shard):
        try:
            clean_registries(rq_queue(name, client))
        except redis.RedisError as exc:
            logger.warning("registry cleanup of %s failed: %s", name, exc)
