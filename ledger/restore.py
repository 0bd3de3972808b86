"""Whether a ledger restored from its replica has finished the restore protocol (ADR 0029; ops/restore.py).

The mark is the audit chain itself: RESTORE_STARTED, then RESTORE_FINISHED once the rail has been read for what the
lost tail did. Until the second follows the first, no rail worker may take the ledger's lease.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from ledger import audit

STARTED, FINISHED = "RESTORE_STARTED", "RESTORE_FINISHED"


def pending(conn: sqlite3.Connection) -> dict[str, Any] | None:
    """The RESTORE_STARTED record of a restore not yet finished on this ledger, or None."""
    row = conn.execute(f"SELECT kind, payload_json FROM audit_log WHERE kind IN ('{STARTED}', '{FINISHED}') "
                       "ORDER BY seq DESC LIMIT 1").fetchone()  # fmt: skip
    if row is None or row[0] != STARTED:
        return None
    return audit.canonical_payload(row[1])
