"""The operator console's sessions as the ledger keeps them (schema.sql console_sessions; console/auth.py decides
what a row means). Rows are keyed by the sha256 of the cookie's session id: the id itself is never stored."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from ledger.db import require_transaction

APPROVER, CONSOLE = "approver", "console"


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    session_sha256: str
    kind: str  # APPROVER or CONSOLE
    approver_id: str | None
    credential_sha256: str
    issued_at: int
    expires_at: int
    revoked_at: int | None

    def live(self, now: int) -> bool:
        """Not revoked, and *now* inside [issued_at, expires_at)."""
        return self.revoked_at is None and self.issued_at <= now < self.expires_at


def insert(conn: sqlite3.Connection, session: ConsoleSession) -> None:
    """Record a new session; sessions past their expiry go in the same transaction (nothing else removes them)."""
    require_transaction(conn)
    conn.execute("DELETE FROM console_sessions WHERE expires_at <= ?", (session.issued_at,))
    conn.execute("INSERT INTO console_sessions (session_sha256, kind, approver_id, credential_sha256, issued_at, "
                 "expires_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                 (session.session_sha256, session.kind, session.approver_id, session.credential_sha256,
                  session.issued_at, session.expires_at, session.revoked_at))  # fmt: skip


def find(conn: sqlite3.Connection, session_sha256: str) -> ConsoleSession | None:
    """The session with this key, live or not; None also on a ledger no login has written to yet (read-only, the
    table may not be there)."""
    try:
        row = conn.execute("SELECT * FROM console_sessions WHERE session_sha256 = ?", (session_sha256,)).fetchone()
    except sqlite3.OperationalError:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'console_sessions'").fetchone() is None:
            return None
        raise
    return ConsoleSession(**dict(row)) if row is not None else None


def revoke(conn: sqlite3.Connection, session_sha256: str, now: int) -> bool:
    """Mark one session revoked; False if there was no live one to revoke."""
    require_transaction(conn)
    cursor = conn.execute("UPDATE console_sessions SET revoked_at = ? WHERE session_sha256 = ? AND revoked_at IS NULL",
                          (now, session_sha256))  # fmt: skip
    return cursor.rowcount > 0


def revoke_all(conn: sqlite3.Connection, now: int) -> int:
    """Revoke every session still open; returns how many."""
    require_transaction(conn)
    return conn.execute("UPDATE console_sessions SET revoked_at = ? WHERE revoked_at IS NULL", (now,)).rowcount
