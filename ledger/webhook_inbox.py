"""The webhook inbox: every event the receiver accepted, stored durably before it is acknowledged (SPEC §17).

One SQLite file (WAL, synchronous=FULL, like the ledger), written by the receiver only: an accepted event is on
disk before Razorpay is answered 200, so a receiver killed after the answer has lost nothing, and one killed
before it is sent the event again. Razorpay delivers an event more than once: the event id
(`x-razorpay-event-id`) is the key, and a repeat only counts a delivery. The raw body is kept exactly as signed,
so that whoever reads it later can verify it again. Refused requests are counted here by reason (nothing of them
is kept). What an event is evidence of, and of what not, is decided by its readers, never here.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from interlock.errors import LedgerError
from interlock.failpoints import failpoint

BUSY_TIMEOUT_MS = 5_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS webhook_events (
    event_id     TEXT PRIMARY KEY,
    received_at  INTEGER NOT NULL,          -- ms, the receiver's clock, at the first delivery
    event        TEXT NOT NULL,             -- e.g. refund.processed
    account_id   TEXT,
    created_at   INTEGER,                   -- the event's own created_at (epoch seconds)
    body         BLOB NOT NULL,             -- the raw bytes as signed
    body_sha256  TEXT NOT NULL,
    deliveries   INTEGER NOT NULL DEFAULT 1,
    processed_at INTEGER                    -- set by the reader that acted on it
);
CREATE INDEX IF NOT EXISTS webhook_events_unprocessed ON webhook_events (received_at) WHERE processed_at IS NULL;
CREATE TABLE IF NOT EXISTS webhook_refusals (
    reason TEXT PRIMARY KEY,
    count  INTEGER NOT NULL
);
-- How far each reader (one per shard's reconciler) has read, by the events' rowid: commits are serialised
-- (BEGIN IMMEDIATE) and rows are never deleted, so a later commit always has a larger rowid.
CREATE TABLE IF NOT EXISTS webhook_readers (
    reader     TEXT PRIMARY KEY,
    last_rowid INTEGER NOT NULL,
    read_at    INTEGER NOT NULL
);
"""


def inbox_path(inbox: str | Path | None, ledger: str | Path | None) -> Path | None:
    """INTERLOCK_WEBHOOK_INBOX, else webhooks.sqlite3 beside the ledger; None when neither is configured."""
    if inbox is not None:
        return Path(inbox)
    return None if ledger is None else Path(ledger).parent / "webhooks.sqlite3"


@dataclass(frozen=True, slots=True)
class Stored:
    new: bool  # False: a delivery of an event already stored
    same_body: bool  # a repeat whose body differs from the first delivery's (kept: the first)


def open_inbox(path: str | Path) -> sqlite3.Connection:
    """Open (creating if needed) the inbox at *path*; LedgerError when the file cannot be made durable."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        conn.execute("PRAGMA synchronous = FULL")
        sync = conn.execute("PRAGMA synchronous").fetchone()[0]
        conn.executescript(SCHEMA)
    except (OSError, sqlite3.Error) as exc:
        raise LedgerError(f"webhook inbox {path}: cannot open it ({exc}); set INTERLOCK_WEBHOOK_INBOX to a "
                          "writable path") from None  # fmt: skip
    if str(mode).lower() != "wal" or sync != 2:
        conn.close()
        raise LedgerError(f"webhook inbox {path}: journal_mode {mode!r}, synchronous {sync}: WAL and FULL are "
                          "required (an acknowledged event must be on disk)")  # fmt: skip
    return conn


def store(conn: sqlite3.Connection, *, event_id: str, body: bytes, event: str, account_id: str | None,
          created_at: int | None, now: int) -> Stored:  # fmt: skip
    """Store one delivery durably (committed, fsynced) before returning; a repeat of a stored event id only
    counts a delivery."""
    digest = hashlib.sha256(body).hexdigest()
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT body_sha256 FROM webhook_events WHERE event_id = ?", (event_id,)).fetchone()
        if row is None:
            conn.execute(
                "INSERT INTO webhook_events (event_id, received_at, event, account_id, created_at, body, body_sha256) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (event_id, now, event, account_id, created_at, body, digest),
            )
        else:
            conn.execute("UPDATE webhook_events SET deliveries = deliveries + 1 WHERE event_id = ?", (event_id,))
        failpoint("webhooks.before_commit")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return Stored(new=row is None, same_body=row is None or row[0] == digest)


def count_refusal(conn: sqlite3.Connection, reason: str) -> None:
    conn.execute("INSERT INTO webhook_refusals (reason, count) VALUES (?, 1) "
                 "ON CONFLICT(reason) DO UPDATE SET count = count + 1", (reason,))  # fmt: skip


def refusals(conn: sqlite3.Connection) -> dict[str, int]:
    return {str(r): int(n) for r, n in conn.execute("SELECT reason, count FROM webhook_refusals")}


def counts(conn: sqlite3.Connection) -> dict[str, int]:
    """Events stored, deliveries beyond the first (duplicates ignored), and events not yet acted on."""
    events, deliveries, unprocessed = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(deliveries), 0), COUNT(*) - COUNT(processed_at) FROM webhook_events"
    ).fetchone()
    return {"events": int(events), "duplicates": int(deliveries) - int(events), "unprocessed": int(unprocessed)}


@dataclass(frozen=True, slots=True)
class Delivered:
    rowid: int
    event_id: str
    event: str
    account_id: str | None
    body: bytes
    received_at: int


def unread(conn: sqlite3.Connection, reader: str, *, limit: int = 500) -> list[Delivered]:
    """The events *reader* has not read yet, oldest first."""
    row = conn.execute("SELECT last_rowid FROM webhook_readers WHERE reader = ?", (reader,)).fetchone()
    after = int(row[0]) if row else 0
    return [Delivered(int(r[0]), str(r[1]), str(r[2]), r[3], bytes(r[4]), int(r[5])) for r in conn.execute(
        "SELECT rowid, event_id, event, account_id, body, received_at FROM webhook_events WHERE rowid > ? "
        "ORDER BY rowid LIMIT ?", (after, limit))]  # fmt: skip


def mark_read(conn: sqlite3.Connection, reader: str, *, through: int, processed: list[str], now: int) -> None:
    """Move *reader*'s cursor to rowid *through* and mark *processed* (events it acted on, or that are evidence
    for nobody) in one commit."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("INSERT INTO webhook_readers (reader, last_rowid, read_at) VALUES (?, ?, ?) "
                     "ON CONFLICT(reader) DO UPDATE SET last_rowid = MAX(last_rowid, excluded.last_rowid), "
                     "read_at = excluded.read_at", (reader, through, now))  # fmt: skip
        conn.executemany("UPDATE webhook_events SET processed_at = ? WHERE event_id = ? AND processed_at IS NULL",
                         [(now, event_id) for event_id in processed])  # fmt: skip
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def last_received_at(conn: sqlite3.Connection) -> int | None:
    """When the newest event was first delivered (the receiver's clock), or None for an empty inbox."""
    row = conn.execute("SELECT received_at FROM webhook_events ORDER BY rowid DESC LIMIT 1").fetchone()
    return None if row is None else int(row[0])
