"""The group-commit writer (rail_worker/writer.py): one transaction for what is queued together, a savepoint per
write, and every caller answered — whatever SQLite does to the transaction."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from interlock.errors import LedgerError
from rail_worker.writer import LedgerWriter

WAIT_S = 60  # a deadline here only detects a hang


def _ledger(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB) STRICT")
    return conn


def _batched(writer: LedgerWriter, *fns):  # type: ignore[no-untyped-def]
    """Submit *fns* so that they land in one batch: the writer is held on a first write meanwhile."""
    holding, gate = threading.Event(), threading.Event()
    first = writer.submit(lambda c: (holding.set(), gate.wait(WAIT_S))[1])
    # Queued only once the writer runs the first write (its batch is closed then), however slow the machine.
    assert holding.wait(WAIT_S), "the writer never ran the first write"
    futures = [writer.submit(fn) for fn in fns]
    gate.set()
    first.result(WAIT_S)
    return futures


def _rows(path: Path) -> list[int]:
    return [r[0] for r in sqlite3.connect(path).execute("SELECT k FROM t ORDER BY k")]


def test_a_failing_write_is_rolled_back_alone_and_the_batch_commits_once(tmp_path: Path) -> None:
    writer = LedgerWriter(_ledger(tmp_path / "l.db")).start()
    ok1, bad, ok2 = _batched(
        writer,
        lambda c: c.execute("INSERT INTO t VALUES (1, x'00')").rowcount,
        lambda c: (c.execute("INSERT INTO t VALUES (2, x'00')"), 1 / 0),
        lambda c: c.execute("INSERT INTO t VALUES (3, x'00')").rowcount,
    )
    assert (ok1.result(WAIT_S), ok2.result(WAIT_S)) == (1, 1)
    with pytest.raises(ZeroDivisionError):
        bad.result(WAIT_S)
    assert _rows(tmp_path / "l.db") == [1, 3]
    assert writer.batches == 2 and writer.writes == 4  # the held first write, then one commit for three
    writer.stop()


def test_when_sqlite_rolls_the_whole_batch_back_every_caller_is_answered_and_the_writer_lives(
    tmp_path: Path,
) -> None:
    conn = _ledger(tmp_path / "l.db")
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0] + 3}")
    writer = LedgerWriter(conn).start()
    before, full, after = _batched(
        writer,
        lambda c: c.execute("INSERT INTO t VALUES (1, x'00')").rowcount,
        lambda c: c.execute("INSERT INTO t VALUES (2, ?)", (b"x" * 200_000,)),  # SQLITE_FULL: whole txn gone
        lambda c: c.execute("INSERT INTO t VALUES (3, x'00')").rowcount,
    )
    for future in (before, full, after):
        with pytest.raises(Exception):  # noqa: B017 - each is told it was not written, none hangs
            future.result(WAIT_S)
    assert _rows(tmp_path / "l.db") == []
    assert writer.write(lambda c: c.execute("INSERT INTO t VALUES (4, x'00')").rowcount) == 1
    writer.stop()


def test_a_stopped_writer_refuses_new_writes_and_committed_what_it_had(tmp_path: Path) -> None:
    writer = LedgerWriter(_ledger(tmp_path / "l.db")).start()
    queued = writer.submit(lambda c: c.execute("INSERT INTO t VALUES (1, x'00')").rowcount)
    writer.stop()
    assert queued.result(WAIT_S) == 1
    with pytest.raises(LedgerError, match="not running"):
        writer.write(lambda c: 1)
