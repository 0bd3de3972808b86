"""`interlock reconciler`: the reconcile loop as a process. Several may run; each intent is leased."""

from __future__ import annotations

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
from interlock.queues import gates_queue, rail_queue, reconcile_hint_key, rq_queue
from interlock.redis_conn import connect
from ledger import audit
from ledger.db import open_ledger
from rails.base import make_rail
from reconciler.loop import Reconciler

logger = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 0.5
REGISTRY_CLEANUP_S = 5.0


@click.command("reconciler")
@click.option("--once", is_flag=True, help="one sweep, then exit")
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
    while not stopping:
        if time.monotonic() - last_cleanup > REGISTRY_CLEANUP_S:
            _clean_rq_registries(client, settings.shard)
            last_cleanup = time.monotonic()
        rec.sweep()
        if once:
            break
        try:
            # A hint only wakes us early; the sweep above finds everything that is due either way.
            client.blpop([reconcile_hint_key(settings.shard)], timeout=SWEEP_INTERVAL_S)
        except redis.RedisError as exc:
            logger.warning("redis unavailable (%s); sweeping the ledger without hints", exc)
            time.sleep(SWEEP_INTERVAL_S)


def _clean_rq_registries(client: redis.Redis, shard: str) -> None:
    """Move jobs of SIGKILLed workers out of STARTED so they do not sit there for minutes (SPEC §9)."""
    for name in (gates_queue(), rail_queue(shard)):
        try:
            clean_registries(rq_queue(name, client))
        except redis.RedisError as exc:
            logger.warning("registry cleanup of %s failed: %s", name, exc)
