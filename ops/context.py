"""What an operator action needs: settings, the ledger (read-write, through the ledger package), the
mandates, the rail (read-only calls) and Redis (to hand released work to the rail worker)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

from interlock.config import Settings, load_settings
from interlock.mandate import MandateStore
from interlock.redis_conn import connect
from ledger.db import open_ledger
from rails.razorpay import RazorpayClient


@dataclass
class OpsContext:
    settings: Settings
    _redis: redis.Redis | None = field(default=None, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> OpsContext:
        settings = settings or load_settings()
        settings.require("ledger")
        MandateStore.from_settings(settings)  # fail at start, naming the file, rather than at the first approval
        return cls(settings=settings)

    def mandates(self) -> MandateStore:
        """Read from disk on every action: a long-running console must judge by the mandate as it is now
        (an approver removed from the file is refused at once, not after a restart)."""
        return MandateStore.from_settings(self.settings)

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
            yield conn
        finally:
            conn.close()

    def rail(self) -> RazorpayClient:
        return RazorpayClient.from_settings(self.settings)

    def redis(self) -> redis.Redis:
        if self._redis is None:
            self._redis = connect(self.settings.redis_url)
        return self._redis
