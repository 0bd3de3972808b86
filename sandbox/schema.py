"""The journal's tables, and how a journal written by an older sandbox is brought up to them.

SQLite cannot change a CHECK constraint or a primary key in place, so a table whose definition changed is
rebuilt: created under a new name, filled with the old rows, the old one dropped and the new one renamed, in
one transaction (SQLite's documented procedure). Columns the old table lacked take their defaults, so every old
row reads as it did. A journal is never downgraded: an older sandbox refuses nothing, it simply cannot write
the kinds it does not know.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Mapping, Sequence

logger = logging.getLogger(__name__)

# Every kind of money entity the sandbox journals. The entities table's CHECK follows this list; a journal
# written before a kind existed is rebuilt on open (see ensure_tables).
ENTITY_KINDS = ("refund", "settlement", "payout")
_KINDS_SQL = ", ".join(f"'{kind}'" for kind in ENTITY_KINDS)

TABLES: dict[str, str] = {
    "meta": "(key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT",
    "payments": """(
    id TEXT PRIMARY KEY,
    amount INTEGER NOT NULL,
    currency TEXT NOT NULL,
    amount_refunded INTEGER NOT NULL,
    notes_json TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    details_json TEXT NOT NULL DEFAULT '{}'
) STRICT""",
    "balances": "(currency TEXT PRIMARY KEY, amount INTEGER NOT NULL) STRICT",
    "entities": f"""(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL CHECK (kind IN ({_KINDS_SQL})),
    payment_id TEXT,
    stamp_sik TEXT,
    receipt TEXT,
    created_ms INTEGER NOT NULL,
    origin TEXT NOT NULL CHECK (origin IN ('api', 'seed')),
    fault TEXT,
    idempotency_key TEXT,
    entity_json TEXT NOT NULL,
    request_json TEXT NOT NULL,
    headers_json TEXT NOT NULL
) STRICT""",
    # Refund and payout keys are separate key spaces, as on Razorpay (two headers, two APIs).
    "idempotency_keys": """(
    scope TEXT NOT NULL DEFAULT 'refund' CHECK (scope IN ('refund', 'payout')),
    key TEXT NOT NULL,
    body_hash TEXT NOT NULL,
    entity_id TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
) STRICT""",
    "events": """(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    detail_json TEXT NOT NULL
) STRICT""",
    # RazorpayX: the payees (contacts and their fund accounts) and the business account's balance. Not money
    # entities: they are created through the control surface or the seed, never by a money call.
    "contacts": "(id TEXT PRIMARY KEY, created_ms INTEGER NOT NULL, entity_json TEXT NOT NULL) STRICT",
    "fund_accounts": """(
    id TEXT PRIMARY KEY,
    contact_id TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    entity_json TEXT NOT NULL
) STRICT""",
    "banking_balances": """(
    account_number TEXT PRIMARY KEY,
    amount INTEGER NOT NULL,
    refreshed_ms INTEGER NOT NULL
) STRICT""",
}
INDEXES = (
    "CREATE INDEX IF NOT EXISTS entities_by_payment ON entities (payment_id, seq)",
    "CREATE INDEX IF NOT EXISTS entities_by_stamp ON entities (stamp_sik)",
    "CREATE INDEX IF NOT EXISTS entities_by_receipt ON entities (receipt)",
    "CREATE INDEX IF NOT EXISTS entities_by_kind ON entities (kind, seq)",
)


def ensure_tables(conn: sqlite3.Connection, tables: Mapping[str, str], indexes: Sequence[str] = ()) -> None:
    """Create each missing table, rebuild each whose definition changed, then create the indexes.

    Runs in one transaction: a journal is either fully brought up to date or left as it was.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        for name, definition in tables.items():
            _ensure_table(conn, name, definition)
        for statement in indexes:
            conn.execute(statement)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _ensure_table(conn: sqlite3.Connection, name: str, definition: str) -> None:
    row = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
    wanted = f"CREATE TABLE {name} {definition}"
    if row is None:
        conn.execute(wanted)
    elif _normal(row[0]) != _normal(wanted):
        _rebuild(conn, name, definition)


def _rebuild(conn: sqlite3.Connection, name: str, definition: str) -> None:
    old_columns = _columns(conn, name)
    staging = f"{name}__rebuilt"
    conn.execute(f"CREATE TABLE {staging} {definition}")
    kept = [c for c in _columns(conn, staging) if c in old_columns]
    listed = ", ".join(kept)
    conn.execute(f"INSERT INTO {staging} ({listed}) SELECT {listed} FROM {name}")
    count = conn.execute(f"SELECT count(*) FROM {staging}").fetchone()[0]
    conn.execute(f"DROP TABLE {name}")  # its indexes go with it; the caller creates them again
    conn.execute(f"ALTER TABLE {staging} RENAME TO {name}")
    logger.warning("journal table %s rebuilt to its current definition (%s rows kept)", name, count)


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def _normal(sql: str) -> str:
    # Whitespace aside, ALTER TABLE ADD COLUMN's " ," splice and the quotes RENAME puts around the table's name,
    # two definitions are the same text.
    flat = re.sub(r"\s+", " ", sql.replace("IF NOT EXISTS ", "").replace('"', ""))
    return flat.replace("( ", "(").replace(" )", ")").replace(" ,", ",").strip()
