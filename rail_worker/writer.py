"""Group commit: one thread owns the rail worker's ledger connection and commits what is ready together.

Admissions, attempt starts and outcome records are submitted as small functions of the open connection.
The writer takes whatever is queued when it looks, runs each inside its own SAVEPOINT of one
BEGIN IMMEDIATE, and commits once: one fsync for many intents, each still with its own audit records
in the order they ran. A function that raises is rolled back to its savepoint alone and its caller gets
the exception; the others commit. Nothing waits on a timer: a lone write is committed at once, and a
batch forms only from what queued up while the previous commit was on disk (SPEC §8 step 6).

A caller learns its result only after COMMIT returned, so "committed before the request leaves" (I2)
holds for every call that waits on its future.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from interlock.errors import LedgerError

logger = logging.getLogger(__name__)

T = TypeVar("T")
MAX_BATCH = 256


@dataclass
class _Write:
    fn: Callable[[sqlite3.Connection], Any]
    future: Future[Any]


class LedgerWriter:
    """The only user of *conn* while it runs. `write(fn)` blocks until fn's transaction has committed."""

    def __init__(self, conn: sqlite3.Connection, *, max_batch: int = MAX_BATCH) -> None:
        self.conn = conn
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="ledger-writer", daemon=True)
        self._accepting = threading.Lock()
        self._stopped = False
        self.batches = 0
        self.writes = 0

    def start(self) -> LedgerWriter:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Commit what is queued, then stop (writes submitted afterwards fail with LedgerError)."""
        with self._accepting:
            if self._stopped:
                return
            self._stopped = True
            self._queue.put(None)  # after every write accepted so far: they are all committed first
        self._thread.join()

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> Future[T]:
        future: Future[T] = Future()
        with self._accepting:  # atomic with stop(): a write is either queued before the sentinel or refused
            if self._stopped or not self._thread.is_alive():
                future.set_exception(LedgerError("the ledger writer is not running"))
                return future
            self._queue.put(_Write(fn, future))
        return future

    def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return self.submit(fn).result()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stopping = False
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            try:
                self._commit(batch)
            except BaseException as exc:  # noqa: BLE001 - the thread must outlive any failure of one batch
                logger.exception("group commit of %d writes failed unexpectedly", len(batch))
                self._fail(batch, exc)
            if stopping:
                return

    def _commit(self, batch: list[_Write]) -> None:
        results: list[tuple[bool, Any]] = []
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except Exception as exc:  # noqa: BLE001 - every caller learns that nothing was written
            self._fail(batch, exc)
            return
        for index, item in enumerate(batch):
            self.conn.execute("SAVEPOINT w")
            try:
                value = item.fn(self.conn)
            except BaseException as exc:  # noqa: BLE001 - one caller's failure must not undo the others' writes
                if not self.conn.in_transaction:
                    # SQLite rolled the whole transaction back itself (disk full, I/O error, interrupt):
                    # nothing of this batch is written, including what already returned.
                    logger.error("the ledger rolled back a whole batch of %d writes: %s", len(batch), exc)
                    self._fail(batch[:index], LedgerError(f"rolled back with a later write of its batch: {exc}"))
                    self._fail(batch[index:], exc)
                    return
                self.conn.execute("ROLLBACK TO w")
                self.conn.execute("RELEASE w")
                results.append((False, exc))
            else:
                self.conn.execute("RELEASE w")
                results.append((True, value))
        try:
            self.conn.execute("COMMIT")
        except Exception as exc:  # noqa: BLE001 - the disk said no: nothing of this batch is durable
            logger.exception("group commit of %d writes failed", len(batch))
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            self._fail(batch, exc)
            return
        self.batches += 1
        self.writes += len(batch)
        for item, (ok, value) in zip(batch, results, strict=True):
            if ok:
                item.future.set_result(value)
            else:
                item.future.set_exception(value)

    def _fail(self, batch: list[_Write], exc: BaseException) -> None:
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except Exception:  # noqa: BLE001 - already rolled back by SQLite
                logger.exception("rollback after a failed batch")
        for item in batch:
            if not item.future.done():
                item.future.set_exception(exc)
