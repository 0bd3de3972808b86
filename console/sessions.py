"""Where the console's sessions live: a table in a ledger (ledger/console_sessions.py), so every console process
serving it, and a console restarted, agree on which sessions are open and which were ended.

Without a shard map that is INTERLOCK_LEDGER; with one, the ledger of the first shard in name order — the console
serves every shard, and any one ledger will do as long as every console process picks the same one. A session is
operator state, not money, so it is written even while that ledger's restore is unfinished (the restore revoked
every session the replica held when it started: ops/restore.py)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from pathlib import Path

from interlock.errors import LedgerError
from ledger import console_sessions
from ledger.console_sessions import ConsoleSession
from ledger.db import open_ledger, transaction

SESSION_ID_BYTES = 32


def session_key(session_id: str) -> str:
    """What the ledger keys a session by: a copy of the ledger gives nobody a cookie."""
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


class SessionStore:
    def __init__(self, ledger_path: Callable[[], Path]) -> None:
        self._path = ledger_path  # asked on every call: the shard map may have changed since the last one

    def open(self, *, kind: str, approver_id: str | None, credential_sha256: str, now: int, lifetime_ms: int) -> str:
        """Record a new session and return its id (the cookie's value). Raises LedgerError if the ledger is not
        there: a login never creates one (the rail worker does, and a restore must find the path free)."""
        path = self._path()
        if not path.exists():
            raise LedgerError(f"ledger {path} does not exist yet (the rail worker creates it); no session can be kept")
        session_id = secrets.token_urlsafe(SESSION_ID_BYTES)
        conn = open_ledger(path)
        try:
            with transaction(conn):
                console_sessions.insert(conn, ConsoleSession(
                    session_sha256=session_key(session_id), kind=kind, approver_id=approver_id,
                    credential_sha256=credential_sha256, issued_at=now, expires_at=now + lifetime_ms, revoked_at=None,
                ))  # fmt: skip
        finally:
            conn.close()
        return session_id

    def live(self, session_id: str, now: int) -> ConsoleSession | None:
        """The session if it is open at *now* (not revoked, not expired), else None."""
        conn = open_ledger(self._path(), readonly=True)
        try:
            found = console_sessions.find(conn, session_key(session_id))
        finally:
            conn.close()
        return found if found is not None and found.live(now) else None

    def revoke(self, session_id: str, now: int) -> bool:
        """End the session; False if it was not open (unknown, expired rows aside, or revoked already)."""
        path = self._path()
        if not path.exists():
            return False  # no ledger, so no session either
        conn = open_ledger(path)
        try:
            with transaction(conn):
                return console_sessions.revoke(conn, session_key(session_id), now)
        finally:
            conn.close()
