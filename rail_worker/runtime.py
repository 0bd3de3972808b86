"""What the rail worker holds for its whole life: the ledger (read-write), the lease, the rail
client, mandates and Redis. Built once at boot, in the worker's main process (never across fork)."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis
from redis import Redis

from interlock.clock import owner_id
from interlock.config import Settings
from interlock.fees import DEFAULT_FEE_RATE, FeeRate
from interlock.mandate import MandateStore
from interlock.queues import rail_unrecorded_key, reconcile_hint_key
from ledger.db import open_ledger, transaction
from ledger.leases import Lease
from rail_worker.evidence import SendStop, Unrecorded
from rail_worker.ownership import OwnershipFence
from rail_worker.writer import LedgerWriter
from rails.base import Rail, make_rail

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class RailRuntime:
    settings: Settings
    ledger_path: Path
    ledger: sqlite3.Connection
    mandates: MandateStore
    rail: Rail
    redis: Redis
    owner: str
    lease: Lease | None = None  # as last renewed (the heartbeat thread and execute both renew it)
    fee_rate: FeeRate = field(default=DEFAULT_FEE_RATE)
    # Set by the heartbeat the moment the lease is found superseded or expired: no request may leave after.
    lease_lost: threading.Event = field(default_factory=threading.Event)
    # Rail answers whose write has failed and is being retried: while any is held, no request may leave either.
    unrecorded: Unrecorded = field(default_factory=Unrecorded)
    # With calls in flight on several threads, one writer owns the ledger connection (group commit).
    writer: LedgerWriter | None = None
    # Which merchants this shard may admit (SPEC §15); built from the settings on first use when not given.
    fence: OwnershipFence | None = None
    # An admission that authorizes a call also starts its attempt, in the same transaction (ADR 0011): set by the
    # Dispatcher, which makes the calls its admissions authorize; off for a caller that admits and executes apart.
    start_with_admission: bool = False

    @classmethod
    def build(cls, settings: Settings, redis_client: Redis) -> RailRuntime:
        ledger_path: Path = settings.require("ledger")
        rail = make_rail(settings)
        # The rail call must give up before the IN_FLIGHT lease runs out, or a successor could treat a
        # call that is still in flight as abandoned.
        if settings.rail_timeout_ms >= settings.lease_ttl_ms:
            from interlock.errors import ConfigError

            raise ConfigError(
                f"INTERLOCK_RAIL_TIMEOUT_MS ({settings.rail_timeout_ms}) must be shorter than "
                f"INTERLOCK_LEASE_TTL_MS ({settings.lease_ttl_ms})",
                variable="INTERLOCK_RAIL_TIMEOUT_MS",
            )
        return cls(
            settings=settings, ledger_path=ledger_path, ledger=open_ledger(ledger_path),
            mandates=MandateStore.from_settings(settings), rail=rail, redis=redis_client, owner=owner_id("rail"),
            fence=OwnershipFence.load(settings.shard, settings.shards),
        )  # fmt: skip

    @property
    def send_stop(self) -> SendStop:
        """Set when no request may leave: the lease is lost, or a rail answer is not yet durable (ADR 0005)."""
        return SendStop(self.lease_lost, self.unrecorded)
    def ownership_fence(self) -> OwnershipFence:
        if self.fence is None:
            self.fence = OwnershipFence.load(self.settings.shard, self.settings.shards)
        return self.fence

    def current_lease(self) -> Lease:
        assert self.lease is not None, "the rail worker has not taken its lease"
        return self.lease

    def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run *fn* in a BEGIN IMMEDIATE transaction of the ledger and return once it has committed."""
        if self.writer is not None:
            return self.writer.write(fn)
        with transaction(self.ledger) as conn:
            return fn(conn)

    def hold_unrecorded(self, key: tuple[str, str, int], summary: dict[str, Any]) -> bool:
        """Hold a rail answer whose write failed (no request leaves while any is held) and show it in status (again
        when its summary changed). True when it was not held before."""
        changed, new = self.unrecorded.hold(key, summary)
        if changed:
            self._mirror(lambda r: r.hset(rail_unrecorded_key(self.settings.shard), "|".join(map(str, key)),
                                          json.dumps(summary, sort_keys=True, default=str)))  # fmt: skip
        return new

    def release_unrecorded(self, key: tuple[str, str, int]) -> None:
        """The answer is durable (or was never held): sending may resume once nothing else is held."""
        if self.unrecorded.release(key):
            self._mirror(lambda r: r.hdel(rail_unrecorded_key(self.settings.shard), "|".join(map(str, key))))

    def _mirror(self, fn: Callable[[Redis], object]) -> None:
        try:
            fn(self.redis)
        except Exception as exc:  # noqa: BLE001 - a mirror for status only: the CRITICAL log is the loud channel
            logger.warning("could not show the unrecorded rail answer in Redis: %s", exc)

    def hint_reconciler(self, merchant_id: str, sik: str) -> None:
        try:
            self.redis.rpush(reconcile_hint_key(self.settings.shard), f"{merchant_id}|{sik}")
        except redis.RedisError as exc:  # a lost hint is fine: the reconciler's sweep finds UNKNOWN rows
            logger.warning("could not hint the reconciler about %s: %s", sik, exc)
