"""Whether a ledger restored from its replica has finished the restore protocol (ADR 0029; ops/restore.py).

The mark is the audit chain itself: RESTORE_STARTED, then RESTORE_FINISHED once the rail has been read for what the
lost tail did. Until the second follows the first, no rail worker may take the ledger's lease.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from interlock.errors import RestorePending
from ledger import audit

STARTED, FINISHED = "RESTORE_STARTED", "RESTORE_FINISHED"


def refuse_if_pending(conn: sqlite3.Connection, who: str) -> None:
    """Every writer of a shard's ledger (rail worker, reconciler, operator commands, console) stays off a ledger whose
    restore has not finished: a hold expired or approved, or an intent reconciled, before the rail has been read for
    the lost tail could settle it wrongly, or send it again."""
    started = pending(conn)
    if started is not None:
        raise RestorePending(f"this ledger was restored from its replica (last seq {started.get('last_seq')}) and the "
                             f"restore has not finished: {who} will not use it until `interlock shards restore "
                             "--resume` has read the rail (ADR 0029)")  # fmt: skip


def pending(conn: sqlite3.Connection) -> dict[str, Any] | None:
    """The RESTORE_STARTED record of a restore not yet finished on this ledger, or None."""
    row = conn.execute(f"SELECT kind, payload_json FROM audit_log WHERE kind IN ('{STARTED}', '{FINISHED}') "
                       "ORDER BY seq DESC LIMIT 1").fetchone()  # fmt: skip
    if row is None or row[0] != STARTED:
        return None
    return audit.canonical_payload(row[1])
