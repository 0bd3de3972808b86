"""The ledger files under the scheduler: real SQLite in WAL mode, one file per shard, opened through a
connection class that makes every transaction's BEGIN a scheduler point and lets the seed fail a write.

A write fails the way a full disk, an I/O error, a lock held past busy_timeout or a group commit's rollback do
to a real process: BEGIN IMMEDIATE raises SQLITE_BUSY, or COMMIT raises SQLITE_FULL / SQLITE_IOERR after the
transaction was rolled back. No point is ever placed inside a transaction, so no other actor can find the
write lock taken (one OS thread runs every actor: a wait for the lock would wait for ever).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.db import open_ledger
from simulation.scheduler import Process, Scheduler

WRITE_ERRORS = ("database or disk is full", "disk I/O error")


@dataclass
class WriteFaults:
    begin_busy: float = 0.0
    commit_error: float = 0.0
    # Not a fault: called with the ledger's path after each COMMIT that succeeded (the replica's copies of a shard's
    # ledger at commit points, simulation.machine_loss). Outside every transaction, and no scheduler point.
    committed: Callable[[Path], None] | None = None


class SimConnection(sqlite3.Connection):
    """sqlite3.Connection with the scheduler's hooks on BEGIN and COMMIT (set by `open_sim_ledger`)."""

    sched: Scheduler | None = None
    faults: WriteFaults | None = None
    path: Path | None = None

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:  # type: ignore[override]
        sched = self.sched
        if sched is not None and sql[:5] in ("BEGIN", "COMMI"):
            if sql.startswith("BEGIN"):
                sched.point("ledger.begin")
                if self.faults and self.faults.begin_busy and sched.rng.random() < self.faults.begin_busy:
                    sched.counters.fault("ledger_busy")
                    raise sqlite3.OperationalError("database is locked")
            elif self.faults and self.faults.commit_error and sched.rng.random() < self.faults.commit_error:
                sched.counters.fault("ledger_commit_error")
                super().execute("ROLLBACK")
                raise sqlite3.OperationalError(sched.rng.choice(WRITE_ERRORS))
            else:
                cursor = super().execute(sql, parameters)
                if self.faults and self.faults.committed is not None and self.path is not None:
                    self.faults.committed(self.path)
                return cursor
        return super().execute(sql, parameters)


def open_sim_ledger(path: Path, sched: Scheduler, process: Process, faults: WriteFaults | None, *,
                    readonly: bool = False) -> sqlite3.Connection:  # fmt: skip
    """A connection of *process*: closed when it crashes (an open transaction is rolled back, as on SIGKILL)."""
    conn = open_ledger(path, readonly=readonly, factory=SimConnection)
    assert isinstance(conn, SimConnection)
    conn.sched, conn.faults, conn.path = sched, None if readonly else faults, path
    process.on_crash.append(conn.close)
    return conn
