"""The shard map a ledger accepted: which merchants its shard owns (SPEC §15, ADR 0014).

`interlock shards apply` writes it, under the write lock and with an audit record, after checking that no
merchant leaving this shard has an intent here; the rail worker reads it inside every admit transaction, so a
Decision that waited in this shard's Redis while its merchant moved is refused rather than paid here too.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from interlock.shards import Ownership
from ledger import audit
from ledger.db import require_transaction

ACCEPTED_KIND = "SHARD_MAP_ACCEPTED"


@dataclass(frozen=True, slots=True)
class Accepted:
    shard: str  # the shard this ledger belongs to
    ownership: Ownership
    digest: str
    accepted_at: int

    @property
    def epoch(self) -> int:
        return self.ownership.epoch


def accepted(conn: sqlite3.Connection) -> Accepted | None:
    """The map this ledger accepted, or None (none yet; or a ledger from before the table, opened read-only)."""
    try:
        row = conn.execute("SELECT shard, digest, ownership_json, accepted_at FROM shard_ownership "
                           "WHERE name = 'accepted'").fetchone()  # fmt: skip
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    if row is None:
        return None
    return Accepted(str(row[0]), Ownership.from_json(str(row[2])), str(row[1]), int(row[3]))


def accept(conn: sqlite3.Connection, shard: str, ownership: Ownership, *, now: int) -> Accepted:
    """Record *ownership* as this ledger's map (one audit record in the same transaction)."""
    require_transaction(conn)
    previous = accepted(conn)
    conn.execute(
        """INSERT INTO shard_ownership (name, shard, epoch, digest, ownership_json, accepted_at)
           VALUES ('accepted', ?, ?, ?, ?, ?)
           ON CONFLICT (name) DO UPDATE SET shard = excluded.shard, epoch = excluded.epoch,
               digest = excluded.digest, ownership_json = excluded.ownership_json,
               accepted_at = excluded.accepted_at""",
        (shard, ownership.epoch, ownership.digest, ownership.to_json(), now),
    )
    audit.append(conn, ACCEPTED_KIND, {
        "shard": shard, "epoch": ownership.epoch, "digest": ownership.digest, "ownership": ownership.to_json(),
        "previous": None if previous is None else {"epoch": previous.epoch, "digest": previous.digest},
    }, now)  # fmt: skip
    return Accepted(shard, ownership, ownership.digest, now)


def intents_by_state(conn: sqlite3.Connection, merchant_id: str) -> dict[str, int]:
    """How many intents *merchant_id* has here, per state (a merchant with any may not leave: ADR 0014)."""
    rows = conn.execute("SELECT state, COUNT(*) FROM intents WHERE merchant_id = ? GROUP BY state", (merchant_id,))
    return {str(state): int(count) for state, count in rows}
