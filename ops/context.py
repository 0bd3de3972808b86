"""What an operator action needs: settings, the ledger (read-write, through the ledger package), the
mandates, the rail (read-only calls) and Redis (to hand released work to the rail worker).

With a shard map (INTERLOCK_SHARDS, SPEC §15) an action on an intent runs in a context for the shard of
its merchant (`for_merchant`): that shard's ledger and Redis, and no other shard's."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from interlock.config import Settings, load_settings
from interlock.errors import ConfigError
from interlock.mandate import MandateStore
from interlock.queues import rail_queue, rq_queue
from interlock.redis_conn import connect
from interlock.shards import Shard, load_shard_map
from ledger import restore
from ledger.db import open_ledger
from ops.approvers import VARIABLE, ApproverTable
from rails.razorpay import RazorpayClient


@dataclass
class OpsContext:
    settings: Settings
    _redis: redis.Redis | None = field(default=None, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> OpsContext:
        settings = settings or load_settings()
        if settings.shards is None:
            settings.require("ledger")
        else:
            load_shard_map(settings.shards)  # a bad map fails here, naming the file
        MandateStore.from_settings(settings)  # fail at start, naming the file, rather than at the first approval
        return cls(settings=settings)

    @property
    def shard(self) -> str:
        return self.settings.shard

    def shards(self) -> list[OpsContext]:
        """A context per shard of the map, in name order; without a map, just this one."""
        if self.settings.shards is None:
            return [self]
        return [self._for(s) for s in load_shard_map(self.settings.shards).shards]

    def for_merchant(self, merchant_id: str) -> OpsContext:
        """The context of the one shard whose ledger holds *merchant_id*'s intents."""
        if self.settings.shards is None:
            return self
        return self._for(load_shard_map(self.settings.shards).for_merchant(merchant_id))

    def _for(self, shard: Shard) -> OpsContext:
        if shard.name == self.settings.shard and self.settings.ledger == shard.ledger:
            return self
        return OpsContext(self.settings.model_copy(update={"ledger": shard.ledger, "redis_url": shard.redis_url,
                                                           "shard": shard.name}))  # fmt: skip

    def mandates(self) -> MandateStore:
        """Read from disk on every action: a long-running console must judge by the mandate as it is now
        (an approver removed from the file is refused at once, not after a restart)."""
        return MandateStore.from_settings(self.settings)

    def approvers(self) -> ApproverTable:
        """Read from disk on every action, like the mandates: a removed or rotated credential stops at once."""
        if self.settings.approvers is None:
            raise ConfigError(f"{VARIABLE} is not set: nobody can approve or reject a hold until it names the "
                              "approvers' credentials (`interlock approver new ID` mints one)", variable=VARIABLE)
        return ApproverTable.load(self.settings.approvers)

    @property
    def ledger_path(self) -> Path:
        path: Path = self.settings.require("ledger")
        return path

    @contextmanager
    def ledger(self, *, readonly: bool = False) -> Iterator[sqlite3.Connection]:
        # One connection per action: the console serves requests on several threads, and a connection
        # opened here is never shared with another request.
        conn = open_ledger(self.ledger_path, readonly=readonly)
        try:
            if not readonly:
                restore.refuse_if_pending(conn, "this operator command")
            yield conn
        finally:
            conn.close()

    def rail(self) -> RazorpayClient:
        return RazorpayClient.from_settings(self.settings)

    def rail_jobs(self) -> Any:
        """This shard's rail queue, where released work goes to the rail worker (the normal execute job)."""
        return rq_queue(rail_queue(self.settings.shard), self.redis())

    def redis(self) -> redis.Redis:
        if self._redis is None:
            self._redis = connect(self.settings.redis_url)
        return self._redis
