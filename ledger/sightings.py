"""Stamped rail entities seen outside an attempt's own answer: today, in a signed Razorpay webhook (SPEC §17).

A sighting is evidence of presence, never of absence (ADR 0027): an entity carrying our stamp exists on the rail,
with the terms it states. Kept on the ledger with its source and reference (the webhook's event id) and the entity
as the rail stated it, audit-chained, so that whoever is about to send again or to conclude "not applied" reads it
with the attempts' own answers (`intents.settle_from_evidence`). Nothing reads the absence of a sighting as
anything: a webhook may be late, dropped or never sent.

A sighting of an applied intent is also an observation of what the bank did with the money since (the lifecycle,
`reconciler/lifecycle.py`). It is kept in one transaction and taken by the lifecycle in another, so the second can
fail (a busy ledger, a kill) after the first committed: each sighting says when the lifecycle took it (`taken`), and
the follower takes every kept sighting it has not taken yet (`untaken`), whatever the entity's status.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from ledger import audit
from ledger.db import require_transaction

WEBHOOK = "webhook"


@dataclass(frozen=True, slots=True)
class Sighting:
    source: str
    ref: str  # the webhook's event id
    event: str  # e.g. refund.processed
    entity_id: str
    status: str | None
    entity: dict[str, Any]
    seen_at: int


def record(conn: sqlite3.Connection, *, merchant_id: str, sik: str, source: str, ref: str, event: str,
           entity_id: str, status: str | None, entity: dict[str, Any], now: int) -> bool:  # fmt: skip
    """Keep one sighting of *sik*'s entity, with an audit record; False when this (source, ref) was kept already."""
    require_transaction(conn)
    cur = conn.execute(
        """INSERT INTO rail_sightings (merchant_id, sik, source, ref, event, entity_id, status, entity_json, seen_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING""",
        (merchant_id, sik, source, ref, event, entity_id, status, _as_stated(entity), now),
    )  # fmt: skip
    if cur.rowcount != 1:
        return False
    audit.append(conn, "RAIL_SIGHTING", {
        "merchant_id": merchant_id, "sik": sik, "source": source, "ref": ref, "event": event,
        "rail_entity_id": entity_id, "status": status,
    }, now)  # fmt: skip
    return True


def _as_stated(entity: dict[str, Any]) -> str:
    # Not canonical_json: that refuses a float, and what the rail stated is kept as stated (a float amount is
    # judged, and refused, by the terms check, not by a crash here).
    return json.dumps(entity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def for_intent(conn: sqlite3.Connection, merchant_id: str, sik: str) -> list[Sighting]:
    """Every sighting of the intent's stamp, oldest first."""
    rows = conn.execute(
        """SELECT source, ref, event, entity_id, status, entity_json, seen_at FROM rail_sightings
           WHERE merchant_id = ? AND sik = ? ORDER BY seen_at, ref""",
        (merchant_id, sik),
    ).fetchall()
    return [Sighting(str(r[0]), str(r[1]), str(r[2]), str(r[3]), r[4], json.loads(r[5]), int(r[6])) for r in rows]


def taken(conn: sqlite3.Connection, merchant_id: str, sik: str, refs: list[str], *, now: int) -> None:
    """Mark these webhook sightings of *sik* taken by the lifecycle, in the transaction of the observation."""
    require_transaction(conn)
    conn.executemany("UPDATE rail_sightings SET taken_at = ? WHERE source = ? AND ref = ? AND sik = ? "
                     "AND merchant_id = ? AND taken_at IS NULL",
                     [(now, WEBHOOK, ref, sik, merchant_id) for ref in refs])  # fmt: skip


def untaken(conn: sqlite3.Connection, *, limit: int = 100) -> list[tuple[str, str, Sighting]]:
    """Sightings the lifecycle has not taken yet, of APPLIED intents it follows already (a rail_status row; one it
    does not follow yet takes every sighting when it starts to): (merchant, SIK, sighting), the oldest first."""
    # CROSS JOIN keeps SQLite to this order: a walk of the few untaken sightings (index rail_sightings_untaken),
    # each looked up by key, never a walk of every APPLIED intent. It runs every step of the follower.
    rows = conn.execute(
        """SELECT s.merchant_id, s.sik, s.source, s.ref, s.event, s.entity_id, s.status, s.entity_json, s.seen_at
           FROM rail_sightings s CROSS JOIN intents i ON i.merchant_id = s.merchant_id AND i.sik = s.sik
           WHERE s.taken_at IS NULL AND i.state = 'APPLIED'
             AND EXISTS (SELECT 1 FROM rail_status r WHERE r.merchant_id = s.merchant_id AND r.sik = s.sik)
           ORDER BY s.seen_at, s.rowid LIMIT ?""",
        (limit,),
    ).fetchall()
    return [(str(r[0]), str(r[1]), Sighting(str(r[2]), str(r[3]), str(r[4]), str(r[5]), r[6], json.loads(r[7]),
                                            int(r[8]))) for r in rows]  # fmt: skip


def intents_stamped(conn: sqlite3.Connection, sik: str) -> list[tuple[str, str]]:
    """(merchant_id, tool) of every intent with this SIK on this ledger (a SIK is derived from its merchant, so at
    most one in practice)."""
    return [(str(m), str(t)) for m, t in conn.execute("SELECT merchant_id, tool FROM intents WHERE sik = ?", (sik,))]


def waiting(conn: sqlite3.Connection, states: tuple[str, ...], *, since: int) -> list[tuple[str, str]]:
    """Intents in *states*, changed at or after *since*, that have a sighting: the ones a sighting may still
    settle (it arrived while their attempt was out, and the attempt's answer did not settle them)."""
    marks = ", ".join("?" for _ in states)
    rows = conn.execute(
        f"""SELECT i.merchant_id, i.sik FROM intents i
            WHERE i.state IN ({marks}) AND i.updated_at >= ?
              AND EXISTS (SELECT 1 FROM rail_sightings s WHERE s.merchant_id = i.merchant_id AND s.sik = i.sik)""",
        (*states, since),
    ).fetchall()
    return [(str(m), str(s)) for m, s in rows]
