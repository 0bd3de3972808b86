"""The ledger files under the scheduler: real SQLite in WAL mode, one file per shard, opened through a
connection class that makes every transaction's BEGIN a scheduler point and lets the seed fail a write.

A write fails the way a full disk, an I/O error, a lock held past busy_timeout or a group commit's rollback do
to a real process: BEGIN IMMEDIATE raises SQLITE_BUSY, or COMMIT raises SQLITE_FULL / SQLITE_IOERR after the
transaction was rolled back. No point is ever placed inside a transaction, so no other actor can find the
write lock taken (one OS thread runs every actor: a wait for the lock would wait for ever).
"""

from __future__ import annotations

import sqlite3
import weakref
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


class WriteTimes:
    """When each audit record was committed, by three clocks: the run's true one, the shared wall clock (true time
    plus the steps of every clock at once: a process with no skew of its own reads it), and its writer's own wall
    clock. The checker's evidence for judging the ledger's times when every process has its own clock. A
    transaction holds no point, so no clock moves from its BEGIN to its COMMIT."""

    def __init__(self) -> None:
        self.records: dict[Path, dict[int, tuple[int, int, int]]] = {}  # ledger -> seq -> (true, shared, writer's)

    def of(self, path: Path) -> dict[int, tuple[int, int, int]]:
        return dict(self.records.get(Path(path), {}))


_WRITE_TIMES: weakref.WeakKeyDictionary[Scheduler, WriteTimes] = weakref.WeakKeyDictionary()


def write_times(sched: Scheduler) -> WriteTimes:
    """The run's record of audit write times (every simulated ledger connection of *sched* adds to it)."""
    found = _WRITE_TIMES.get(sched)
    if found is None:
        found = _WRITE_TIMES[sched] = WriteTimes()
    return found


class SimConnection(sqlite3.Connection):
    """sqlite3.Connection with the scheduler's hooks on BEGIN and COMMIT (set by `open_sim_ledger`)."""

    sched: Scheduler | None = None
    faults: WriteFaults | None = None
    process: Process | None = None
    path: Path | None = None
    _seq_at_begin: int | None = None

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:  # type: ignore[override]
        sched = self.sched
        if sched is not None and sql[:5] in ("BEGIN", "COMMI"):
            if sql.startswith("BEGIN"):
                sched.point("ledger.begin")
                if self.faults and self.faults.begin_busy and sched.rng.random() < self.faults.begin_busy:
                    sched.counters.fault("ledger_busy")
                    raise sqlite3.OperationalError("database is locked")
                cursor = super().execute(sql, parameters)
                if self.faults is not None:  # a writer: the audit records past this one are this transaction's
                    self._seq_at_begin = _last_seq(self)
                return cursor
            elif self.faults and self.faults.commit_error and sched.rng.random() < self.faults.commit_error:
                sched.counters.fault("ledger_commit_error")
                super().execute("ROLLBACK")
                raise sqlite3.OperationalError(sched.rng.choice(WRITE_ERRORS))
            cursor = super().execute(sql, parameters)
            self._committed(sched)
            if self.faults and self.faults.committed is not None and self.path is not None:
                self.faults.committed(self.path)  # a replica's copy of this commit (simulation.machine_loss)
            return cursor
        return super().execute(sql, parameters)

    def _committed(self, sched: Scheduler) -> None:
        since, self._seq_at_begin = self._seq_at_begin, None
        if since is None or self.path is None:
            return
        written = write_times(sched).records.setdefault(self.path, {})
        clock = sched.clock
        at = (clock.true_ms(), clock.wall_ms(None), clock.wall_ms(self.process.name if self.process else None))
        for (seq,) in super().execute("SELECT seq FROM audit_log WHERE seq > ?", (since,)).fetchall():
            written[int(seq)] = at


def _last_seq(conn: sqlite3.Connection) -> int:
    return int(sqlite3.Connection.execute(conn, "SELECT COALESCE(MAX(seq), 0) FROM audit_log").fetchone()[0])


def open_sim_ledger(path: Path, sched: Scheduler, process: Process, faults: WriteFaults | None, *,
                    readonly: bool = False) -> sqlite3.Connection:  # fmt: skip
    """A connection of *process*: closed when it crashes (an open transaction is rolled back, as on SIGKILL)."""
    conn = open_ledger(path, readonly=readonly, factory=SimConnection)
    assert isinstance(conn, SimConnection)
    conn.sched, conn.faults = sched, None if readonly else (faults or WriteFaults())
    conn.process, conn.path = process, Path(path)
    process.on_crash.append(conn.close)
    return conn
