"""`interlock reconciler`: the reconcile loop as a process. Several may run; each intent is leased."""

from __future__ import annotations

import heapq
import logging
import signal
import sqlite3
import time
from types import FrameType

import click
import redis
from rq.registry import clean_registries

from interlock.clock import owner_id
from interlock.config import Settings, load_settings
from interlock.errors import AuditChainBroken, LedgerError
from interlock.mandate import MandateStore
from interlock.queues import reconcile_hint_key, rq_queue, shard_queues
from interlock.rail_account import effective_account
from interlock.redis_conn import connect
from ledger import audit, restore, webhook_inbox
from ledger.db import open_ledger
from ledger.intents import Intent
from rails.base import Rail, make_rail
from reconciler.inbox import InboxReader
from reconciler.lifecycle import LifecycleFollower
from reconciler.loop import Reconciler
from reconciler.notify import Notifier
from reconciler.withdrawal import PayoutWithdrawal

logger = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 0.5
# How often the webhook inbox is read when nothing else wakes us (a read of an index past this reader's cursor:
# microseconds when idle). Redis ends a BLPOP's wait on its own cron, about every 100 ms: asking less is not sooner.
WEBHOOK_POLL_S = 0.1
MIN_WAIT_S = 0.01
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
    restore.refuse_if_pending(ledger, "the reconciler")
    client = connect(settings.redis_url)
    rail = make_rail(settings)
    rec = Reconciler(settings=settings, ledger=ledger, rail=rail, redis=client,
                     owner=owner_id("reconciler"), mandates=MandateStore.from_settings(settings))  # fmt: skip
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    reader = _inbox_reader(settings, rec)
    follower = _follower(settings, rec, rail, reader)
    assert rec.mandates is not None
    withdrawal = PayoutWithdrawal(ledger=rec.ledger, rail=rail, mandates=rec.mandates, owner=rec.owner)
    # What waits for a person, told to the operator's channel (issue 48 item 5), when one is configured.
    notifier = (Notifier(ledger=rec.ledger, url=settings.notify_url, secret=settings.require("notify_secret"))
                if settings.notify_url else None)  # fmt: skip
    logger.info("reconciler %s started (min delay %d ms; webhook inbox %s)", rec.owner,
                settings.reconcile_min_delay_ms, "read" if reader else "not configured")  # fmt: skip
    last_cleanup = 0.0
    last_sweep = float("-inf")
    sweep_now = True
    wakes: list[float] = []  # monotonic instants at which a hinted intent becomes due (a min-heap)
    delay_s = settings.reconcile_min_delay_ms / 1000 + DUE_SLACK_S
    while not stopping:
        if time.monotonic() - last_cleanup > REGISTRY_CLEANUP_S:
            _clean_rq_registries(client, settings.shard)
            last_cleanup = time.monotonic()
        if reader is not None:
            _read_inbox(reader)
        now = time.monotonic()
        while wakes and wakes[0] <= now:
            heapq.heappop(wakes)
            sweep_now = True
        if sweep_now or now - last_sweep >= SWEEP_INTERVAL_S:
            rec.sweep()
            _follow(follower)
            _follow(withdrawal)
            if notifier is not None:
                _follow(notifier)
            last_sweep, sweep_now = time.monotonic(), False
        if once:
            break
        now = time.monotonic()
        # Sleep until the next hinted intent is due, not a whole interval past it: a refund the rail worker
        # answered is due min_delay after its answer (loop._due), and this wait is the agent's wait. With an
        # inbox, wake at least every WEBHOOK_POLL_S to read it: a webhook settles an intent at once (ADR 0027).
        timeout = max(last_sweep + SWEEP_INTERVAL_S - now, 0.0)
        if wakes:
            timeout = min(timeout, wakes[0] - now)
        if reader is not None:
            timeout = min(timeout, WEBHOOK_POLL_S)
        try:
            # A hint only wakes us early; the sweep above finds everything that is due either way.
            hints = _wait_for_hints(client, settings.shard, timeout)
        except redis.RedisError as exc:
            logger.warning("redis unavailable (%s); sweeping the ledger without hints", exc)
            time.sleep(SWEEP_INTERVAL_S)
            continue
        if hints:
            # Each hint is an intent just recorded UNKNOWN: sweep now (an unfinished or key-less one may already
            # be due, and a webhook seen while its attempt was out settles it) and again when its min delay has
            # passed. One wake-up per batch: they arrived together.
            sweep_now = True
            heapq.heappush(wakes, time.monotonic() + delay_s)


def _inbox_reader(settings: Settings, rec: Reconciler) -> InboxReader | None:
    """The reader of the webhook inbox, when webhooks are configured (a secret, or an inbox path)."""
    if settings.webhook_secrets is None and settings.webhook_inbox is None:
        return None
    path = webhook_inbox.inbox_path(settings.webhook_inbox, settings.ledger)
    if path is None:
        return None
    mandates = rec.mandates

    def account_of(intent: Intent) -> str | None:
        mandate = mandates.get(intent.agent_id) if mandates is not None else None
        return settings.rail_account_id if mandate is None else effective_account(mandate, settings.rail_account_id)

    return InboxReader(ledger=rec.ledger, inbox=webhook_inbox.open_inbox(path), reader=f"shard:{settings.shard}",
                       owner=rec.owner, account_of=account_of)  # fmt: skip


def _follower(settings: Settings, rec: Reconciler, rail: Rail, reader: InboxReader | None) -> LifecycleFollower:
    """The follower of applied money to its final status; told of webhooks by the inbox reader when there is one."""
    follower = LifecycleFollower(ledger=rec.ledger, rail=rail, owner=rec.owner,
                                 first_poll_ms=settings.lifecycle_poll_ms, webhooks=reader is not None,
                                 silence_ms=settings.webhook_silence_ms)  # fmt: skip
    if reader is not None:
        inbox = reader.inbox
        follower.last_webhook_at = lambda: webhook_inbox.last_received_at(inbox)
        reader.on_sighting = lambda merchant_id, sik, seen, ref: follower.sighted(
            merchant_id, sik, entity_id=seen.entity_id, status=seen.status, entity=seen.entity, ref=ref)
    return follower


def _follow(follower: LifecycleFollower | PayoutWithdrawal | Notifier) -> None:
    """One step of the lifecycle follower, the payout withdrawal or the notifier: none may stop the reconcile loop."""
    try:
        follower.step()
    except (sqlite3.Error, LedgerError) as exc:  # the ledger busy past its timeout: the next step goes on
        logger.warning("lifecycle not followed this time: %s", exc)
    except Exception:  # a read of the rail or one entity this code cannot handle must not stop the reconcile loop
        logger.exception("lifecycle step failed; the next one goes on")


def _read_inbox(reader: InboxReader) -> None:
    try:
        reader.read()
    except (sqlite3.Error, LedgerError) as exc:  # the inbox or the ledger busy past its timeout: read again next time
        logger.warning("webhook inbox not read this time: %s", exc)


def _wait_for_hints(client: redis.Redis, shard: str, timeout_s: float) -> int:
    """Block up to *timeout_s* for hints; returns how many were taken. Drains every hint already queued, so a
    burst of UNKNOWN answers costs one sweep, not one sweep per hint."""
    key = reconcile_hint_key(shard)
    # Never below 10 ms: BLPOP's 0 blocks for ever, and Redis 6.2 turns a timeout in seconds into whole
    # milliseconds by truncation, so 0.001 s (0.999... ms) is 0 and blocks too, until the client's socket timeout
    # (10 s) gives up. Redis ends a blocking wait on its own cron (about every 100 ms), so shorter is not sooner.
    first = client.blpop([key], timeout=max(timeout_s, MIN_WAIT_S))
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
