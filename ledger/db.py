"""Opening the ledger: one SQLite file in WAL mode with synchronous=FULL, schema applied, both asserted.

Connections are opened in autocommit mode (isolation_level=None) so that every write is an explicit
`BEGIN IMMEDIATE ... COMMIT` via `transaction()`: the write lock is taken before the first read of
the transaction, which is what makes read-check-write sequences (audit head, PK insert, limits)
race-free across processes.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from interlock.clock import now_ms
from interlock.errors import LedgerError

BUSY_TIMEOUT_MS = 10_000


def schema_sql() -> str:
    return resources.files("ledger").joinpath("schema.sql").read_text(encoding="utf-8")


def open_ledger(path: str | Path, *, readonly: bool = False,
                factory: type[sqlite3.Connection] = sqlite3.Connection) -> sqlite3.Connection:  # fmt: skip
    """Open (creating if needed, unless *readonly*) the ledger at *path*.

    *factory* is the connection class (sqlite3.connect's own argument): the simulator's subclass sees every
    transaction begin and commit, to schedule around them and to fail them. Raises LedgerError when the file
    cannot give the durability Interlock depends on.
    """
    path = Path(path)
    if readonly:
        if not path.exists():
            raise LedgerError(f"ledger {path} does not exist (set INTERLOCK_LEDGER to the rail worker's ledger file)")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False,
                               factory=factory)  # fmt: skip
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, factory=factory)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    if not readonly:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            conn.close()
            raise LedgerError(f"ledger {path}: journal_mode is {mode!r}, WAL is required")
    conn.execute("PRAGMA synchronous = FULL")
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    if sync != 2:  # 2 == FULL: the commit before a rail call must be on disk (I2)
        conn.close()
        raise LedgerError(f"ledger {path}: synchronous is {sync}, FULL (2) is required")
    if not readonly:
        conn.executescript(schema_sql())
        _add_missing_columns(conn)
        _fill_once(conn)
    elif conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE name IN ('intents', 'audit_head', 'leases')"
                      ).fetchone()[0] < 3:  # fmt: skip
        conn.close()
        raise LedgerError(f"ledger {path} exists but its schema is not there yet (the rail worker creates it)")
    return conn


# Columns added after the first release, so a ledger file created before them opens unchanged otherwise.
_ADDED_COLUMNS = {
    ("intent_attempts", "lease_expires_at"): "INTEGER", ("intent_attempts", "sent_at"): "INTEGER",
    ("intents", "task_id"): "TEXT", ("intents", "task_digest"): "TEXT", ("intents", "task_ceiling_minor"): "INTEGER",
    ("decisions", "task_id"): "TEXT", ("decisions", "task_digest"): "TEXT",
    ("intents", "task_signer"): "TEXT", ("decisions", "task_signer"): "TEXT",
    ("rail_sightings", "taken_at"): "INTEGER",
    ("rail_status", "raised_seq"): "INTEGER", ("rail_attention_acks", "raised_seq"): "INTEGER",
}  # fmt: skip


def _sightings_observed(conn: sqlite3.Connection) -> None:
    """rail_sightings.taken_at: a sighting the lifecycle observed left a history row with its event id, so it was
    taken. Any other is taken by the follower's next step, which adds nothing where the status was seen already."""
    conn.execute("""UPDATE rail_sightings SET taken_at = seen_at WHERE EXISTS (
                      SELECT 1 FROM rail_status_history h WHERE h.merchant_id = rail_sightings.merchant_id
                        AND h.sik = rail_sightings.sik AND h.ref = rail_sightings.ref)""")  # fmt: skip


def _lifecycle_records(conn: sqlite3.Connection) -> Iterator[tuple[int, str, tuple[str, str], dict[str, Any]]]:
    """The RAIL_STATUS and RAIL_ATTENTION_ACK audit records (ledger/lifecycle.py), in order: seq, kind, the intent."""
    for seq, kind, payload_json in conn.execute("SELECT seq, kind, payload_json FROM audit_log "
                                                "WHERE kind IN ('RAIL_STATUS', 'RAIL_ATTENTION_ACK') ORDER BY seq"):
        payload = json.loads(payload_json)
        yield int(seq), str(kind), (str(payload.get("merchant_id")), str(payload.get("sik"))), payload


def _raised_by_last_change(conn: sqlite3.Connection) -> None:
    """rail_status.raised_seq: which observation raised an attention was not recorded before; the record of the
    row's last change stands for it (the last thing a person could have seen of it)."""
    wanted = {(str(m), str(s)) for m, s in conn.execute("SELECT merchant_id, sik FROM rail_status "
                                                        "WHERE attention IS NOT NULL")}  # fmt: skip
    last = {key: seq for seq, kind, key, _ in _lifecycle_records(conn) if kind == "RAIL_STATUS" and key in wanted}
    conn.executemany("UPDATE rail_status SET raised_seq = ? WHERE merchant_id = ? AND sik = ?",
                     [(seq, m, s) for (m, s), seq in last.items()])  # fmt: skip


def _acks_cover_what_was_seen(conn: sqlite3.Connection) -> None:
    """rail_attention_acks.raised_seq: an acknowledgement covers the row as it was when it was given, the record of
    its last change before the acknowledgement's own. An attention whose row changed after it waits again."""
    last: dict[tuple[str, str], int] = {}
    seen: dict[tuple[str, str, str], int | None] = {}
    for seq, kind, key, payload in _lifecycle_records(conn):
        if kind == "RAIL_STATUS":
            last[key] = seq
        else:
            seen[(*key, str(payload.get("attention")))] = last.get(key)
    conn.executemany("UPDATE rail_attention_acks SET raised_seq = ? WHERE merchant_id = ? AND sik = ? "
                     "AND attention = ?", [(seq, m, s, a) for (m, s, a), seq in seen.items()])  # fmt: skip


# What an added column holds for the rows already there, written in the transaction that adds it.
_FILLED_WHEN_ADDED: dict[tuple[str, str], Callable[[sqlite3.Connection], None]] = {
    ("rail_sightings", "taken_at"): _sightings_observed,
    ("rail_status", "raised_seq"): _raised_by_last_change,
    ("rail_attention_acks", "raised_seq"): _acks_cover_what_was_seen,
}
# Indexes over added columns: created after the columns exist (schema.sql runs first, on an old file too).
_ADDED_INDEXES = (
    # The task ceiling (SPEC §10) sums a task's intents inside the serial admission transaction.
    # Per (task_signer, task_id) across merchants and tools since task v2 (issue 25, item 5; ADR 0013); the
    # per-merchant index it replaces goes.
    "DROP INDEX IF EXISTS intents_by_task",
    "CREATE INDEX IF NOT EXISTS intents_by_signed_task ON intents (task_id, task_signer) WHERE task_id IS NOT NULL",
    # The lifecycle follower replays, each step, every sighting it has not taken yet (ledger/sightings.untaken).
    "CREATE INDEX IF NOT EXISTS rail_sightings_untaken ON rail_sightings (seen_at) WHERE taken_at IS NULL",
)


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    for (table, column), kind in _ADDED_COLUMNS.items():
        if column in _columns(conn, table):
            continue
        with transaction(conn):  # the column and what it holds for the rows already there, or neither
            if column not in _columns(conn, table):  # another process may have added it while we waited
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                if (table, column) in _FILLED_WHEN_ADDED:
                    _FILLED_WHEN_ADDED[(table, column)](conn)
    for statement in _ADDED_INDEXES:
        conn.execute(statement)


# Rows a table added after the first release starts with, implied by what an older ledger already holds; each fill
# runs once. `PRAGMA user_version` counts the fills done, moved in the transaction that does each (schema.sql
# creates the table on its own first, so the table's presence cannot say whether its fill was done).
_FILLS: tuple[tuple[str, Callable[[], dict[str, int]]], ...] = (
    # 1: the APPLIED intents the lifecycle follower does not follow yet. Those of the last 7 days: what it looked for
    # at its start before rail_status_owed existed; an older one was not followed then, and following it now would
    # fetch it from the rail for nothing.
    ("""INSERT OR IGNORE INTO rail_status_owed (merchant_id, sik)
        SELECT i.merchant_id, i.sik FROM intents i WHERE i.state = 'APPLIED' AND i.updated_at >= :since
          AND NOT EXISTS (SELECT 1 FROM rail_status s WHERE s.merchant_id = i.merchant_id AND s.sik = i.sik)
        ORDER BY i.updated_at""", lambda: {"since": now_ms() - 7 * 86_400_000}),
)  # fmt: skip


def _fill_once(conn: sqlite3.Connection) -> None:
    for done, (statement, params) in enumerate(_FILLS):
        if _fills_done(conn) > done:
            continue
        with transaction(conn):
            if _fills_done(conn) > done:  # another process did it while we waited
                continue
            conn.execute(statement, params())
            conn.execute(f"PRAGMA user_version = {done + 1}")


def _fills_done(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT, rolling back on any exception. Writes compose inside one of these."""
    if conn.in_transaction:
        raise LedgerError("nested ledger transaction: pass the open connection instead of opening another")
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def require_transaction(conn: sqlite3.Connection) -> None:
    if not conn.in_transaction:
        raise LedgerError("this ledger write must run inside transaction(conn) so it commits with its audit row")
