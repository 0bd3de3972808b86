"""The lifecycle after APPLIED: what the rail says has become of the money since it accepted the call.

APPLIED means the rail created the refund, the instant settlement or the payout; it is absorbing (I4) and stays so.
What the bank does next is kept beside it, one row per applied intent in `rail_status`, never as a state of the money
machine: a refund goes `pending` → `processed` or `failed` (pending can last days), an instant settlement goes
`created` → `initiated` → `processed`, `partially_processed` or `reversed` (SPEC §17), a RazorpayX payout goes
`pending` (approval) → `queued` or `scheduled` → `processing` → `processed`, `failed`, `cancelled`, `rejected` or
`reversed` — and a bank may still reverse a processed payout (SPEC §18). Observations come from the call's own
answer, from signed webhooks and from a poller that fetches entities not final yet (`reconciler/lifecycle.py`), in
any order and more than once, so each status has a rank and an observation is taken only when it moves the entity
forward: a final status is never overwritten by an earlier one, and a second, different final status (processed,
then failed) is kept in the history and raised for a person, not taken. The one exception is written in
`_AFTER_FINAL`: a payout `reversed` after `processed` is the bank's real next step, taken (and raised).

A status a person must look at sets `attention`: a refund the bank failed (REFUND_FAILED: the customer has not
been paid), a settlement reversed in whole or part (SETTLEMENT_REVERSED: the money came back to the balance), a
payout failed (PAYOUT_FAILED) or reversed (PAYOUT_REVERSED: the payee was not paid, or the bank sent the money
back), a payout cancelled or rejected (PAYOUT_NOT_PAID: it never went out; the agent was told the call was
accepted), two final statuses that disagree (CONFLICTING_FINAL), or a second entity carrying this intent's stamp
(SECOND_ENTITY). The agent's next interlock_status is told ESCALATE_TO_OPERATOR for any of these
(ingress/status.py); nothing here retries or reverses anything: a new refund after a failed one, or a new payout
after a reversed one, is a new business action.

An attention is raised by one observation (`raised_seq`: the seq of its RAIL_STATUS audit record), and a person's
acknowledgement covers that raising, the status and amounts they saw. A later observation that changes the money at
stake — another attention, another status that calls for a person itself, another amount reversed, another
conflicting final status — raises the attention afresh, and it waits for a person again; one that does not (a
settlement settling more of what it had not reversed, the same contradiction seen again, the entity moving on under
an attention its status did not raise) keeps the raising, and the acknowledgement with it.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from interlock.errors import OperatorRefused
from interlock.mandate import REFUND_TOOL
from ledger import audit
from ledger.db import require_transaction
from ledger.queries import PAYOUT_TOOL, SETTLEMENT_TOOL

# Where an observation was read.
ANSWER, WEBHOOK, POLL = "answer", "webhook", "poll"

# A status's place in its entity's lifecycle; the highest ranks are final. A status the rail may add later ranks 0:
# kept if nothing is known yet, never over a known one.
_RANKS: dict[str, dict[str, int]] = {
    REFUND_TOOL: {"pending": 1, "processed": 3, "failed": 3},
    SETTLEMENT_TOOL: {"created": 1, "initiated": 2, "partially_processed": 3, "processed": 4, "reversed": 4},
    # pending is RazorpayX's approval workflow, before a payout may be queued (low balance) or scheduled; reversed
    # comes after processed (a bank reverses a processed payout). Between final statuses the rank decides nothing:
    # _AFTER_FINAL does.
    PAYOUT_TOOL: {"pending": 1, "queued": 2, "scheduled": 2, "processing": 3, "processed": 4, "failed": 4,
                  "cancelled": 4, "rejected": 4, "reversed": 5},
}
_FINAL: dict[str, frozenset[str]] = {
    REFUND_TOOL: frozenset({"processed", "failed"}),
    SETTLEMENT_TOOL: frozenset({"processed", "reversed"}),
    PAYOUT_TOOL: frozenset({"processed", "reversed", "failed", "cancelled", "rejected"}),
}
# A final status that a later one may still follow: the rail's own next step, not a contradiction. A processed
# payout is final for the poller (SPEC §18: ignore what comes after processed) except for the bank's reversal,
# which is taken; nothing follows reversed. Seen the other way round (processed after reversed), it is the earlier
# step arriving late: stale, not a conflict.
_AFTER_FINAL: dict[str, dict[str, frozenset[str]]] = {
    PAYOUT_TOOL: {"processed": frozenset({"reversed"})},
}
# How long after a final status that a later one may still follow (a processed payout's reversal) the poller goes on
# fetching it: webhooks first, polls as the safety net — a payout.reversed lost for good (the receiver unreachable
# for Razorpay's 24 hours of retries) would otherwise leave money back on the account that no person was told of.
WATCHED_FOR_MS = 7 * 86_400_000
# The amounts kept with each status (integers in minor units, as the rail stated them).
_AMOUNTS: dict[str, tuple[str, ...]] = {
    REFUND_TOOL: ("amount",),
    SETTLEMENT_TOOL: ("amount_requested", "amount_settled", "amount_pending", "amount_reversed", "fees", "tax"),
    PAYOUT_TOOL: ("amount", "fees", "tax"),
}

REFUND_FAILED = "REFUND_FAILED"
SETTLEMENT_REVERSED = "SETTLEMENT_REVERSED"
PAYOUT_FAILED = "PAYOUT_FAILED"
PAYOUT_REVERSED = "PAYOUT_REVERSED"
PAYOUT_NOT_PAID = "PAYOUT_NOT_PAID"
CONFLICTING_FINAL = "CONFLICTING_FINAL"
SECOND_ENTITY = "SECOND_ENTITY"
ATTENTIONS = (REFUND_FAILED, SETTLEMENT_REVERSED, PAYOUT_FAILED, PAYOUT_REVERSED, PAYOUT_NOT_PAID, CONFLICTING_FINAL,
              SECOND_ENTITY)  # fmt: skip
# The attention a payout's status raises: each is money the payee does not have although the rail accepted the call.
_PAYOUT_ATTENTIONS = {"failed": PAYOUT_FAILED, "reversed": PAYOUT_REVERSED, "cancelled": PAYOUT_NOT_PAID,
                      "rejected": PAYOUT_NOT_PAID}  # fmt: skip


@dataclass(frozen=True, slots=True)
class RailStatus:
    merchant_id: str
    sik: str
    tool: str
    entity_id: str
    status: str
    final: bool
    attention: str | None
    amounts: dict[str, int]
    source: str
    updated_at: int
    next_poll_at: int | None
    polls: int
    raised_seq: int | None  # the audit record of the observation that raised the attention (None: no attention)

    @classmethod
    def from_row(cls, row: sqlite3.Row | tuple[Any, ...]) -> RailStatus:
        (merchant_id, sik, tool, entity_id, status, final, attention, amounts, source, updated_at, next_poll_at,
         polls, raised_seq) = tuple(row)  # fmt: skip
        return cls(str(merchant_id), str(sik), str(tool), str(entity_id), str(status), bool(final), attention,
                   json.loads(amounts), str(source), int(updated_at), next_poll_at, int(polls),
                   None if raised_seq is None else int(raised_seq))  # fmt: skip

    def view(self) -> dict[str, Any]:
        """What interlock_status, the console and `interlock status` show of it."""
        return {"status": self.status, "final": self.final, "attention": self.attention, "amounts": self.amounts,
                "source": self.source, "updated_at": self.updated_at}  # fmt: skip


_COLUMNS = ("merchant_id, sik, tool, entity_id, status, final, attention, amounts_json, source, updated_at, "
            "next_poll_at, polls, raised_seq")  # fmt: skip
# An acknowledgement (aliased a) that covers a rail_status row's (aliased s) attention as it was raised.
_COVERS_BY_NAME = "a.merchant_id = s.merchant_id AND a.sik = s.sik AND a.attention = s.attention"
_COVERS = _COVERS_BY_NAME + " AND a.raised_seq IS s.raised_seq"
# (_COVERS_BY_NAME alone on a ledger from before raised_seq: there it covered its attention whatever came after.)
# The amounts whose change within one status puts other money before a person: what a settlement has reversed (a
# partially processed settlement is observed again as it is worked on; a refund's or a payout's amount stays).
_AT_STAKE: dict[str, tuple[str, ...]] = {SETTLEMENT_TOOL: ("amount_reversed",)}


def follows(tool: str) -> bool:
    return tool in _RANKS


def is_final(tool: str, status: str) -> bool:
    return status in _FINAL.get(tool, frozenset())


def watched(tool: str, status: str) -> bool:
    """Final, and still fetched for a while: the rail may yet take its own next step (`_AFTER_FINAL`)."""
    return status in _AFTER_FINAL.get(tool, {})


def amounts_of(tool: str, entity: dict[str, Any]) -> dict[str, int]:
    return {k: v for k in _AMOUNTS.get(tool, ()) if type(v := entity.get(k)) is int}


def attention_for(tool: str, status: str, amounts: dict[str, int]) -> str | None:
    if tool == REFUND_TOOL and status == "failed":
        return REFUND_FAILED
    if tool == SETTLEMENT_TOOL and (status == "reversed" or amounts.get("amount_reversed", 0) > 0):
        return SETTLEMENT_REVERSED
    if tool == PAYOUT_TOOL:
        return _PAYOUT_ATTENTIONS.get(status)
    return None


@dataclass(frozen=True, slots=True)
class Acknowledgement:
    operator: str
    credential: str | None
    note: str
    at: int

    def view(self) -> dict[str, Any]:
        return {"operator": self.operator, "note": self.note, "at": self.at,
                "credential": self.credential or "none: name as typed"}  # fmt: skip


def _acks_kept(conn: sqlite3.Connection) -> bool:
    """Whether this ledger has the acknowledgements table yet (see _kept)."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'rail_attention_acks'").fetchone() is not None


def _raised_kept(conn: sqlite3.Connection) -> bool:
    """Whether this ledger records which observation raised an attention and which raising an acknowledgement
    covers (raised_seq, in both tables; see _kept)."""
    found = conn.execute("SELECT (SELECT COUNT(*) FROM pragma_table_info('rail_status') WHERE name = 'raised_seq') "
                         "+ (SELECT COUNT(*) FROM pragma_table_info('rail_attention_acks') WHERE name = 'raised_seq')"
                         ).fetchone()[0]  # fmt: skip
    return int(found) == 2


def _covers(conn: sqlite3.Connection) -> str:
    return _COVERS if _raised_kept(conn) else _COVERS_BY_NAME


def _not_acked(conn: sqlite3.Connection) -> str:
    """A rail_status row (aliased s) whose attention, as raised, no acknowledgement covers."""
    return f"NOT EXISTS (SELECT 1 FROM rail_attention_acks a WHERE {_covers(conn)})" if _acks_kept(conn) else "1"


def _columns(conn: sqlite3.Connection, alias: str = "") -> str:
    """_COLUMNS as this ledger holds them (raised_seq read as NULL on a ledger from before it)."""
    names = [alias + name.strip() for name in _COLUMNS.split(",")]
    if not _raised_kept(conn):
        names[-1] = "NULL"
    return ", ".join(names)


def _kept(conn: sqlite3.Connection) -> bool:
    """Whether this ledger has the lifecycle tables yet: a reader (the ingress, `interlock status`, metrics) may open
    read-only a ledger whose rail worker, which creates the schema, has not been restarted on this version."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'rail_status'").fetchone() is not None


def current(conn: sqlite3.Connection, merchant_id: str, sik: str) -> RailStatus | None:
    if not _kept(conn):
        return None
    row = conn.execute(f"SELECT {_columns(conn)} FROM rail_status WHERE merchant_id = ? AND sik = ?",
                       (merchant_id, sik)).fetchone()  # fmt: skip
    return None if row is None else RailStatus.from_row(row)


def observe(conn: sqlite3.Connection, *, merchant_id: str, sik: str, tool: str, entity_id: str, status: str,
            entity: dict[str, Any], source: str, ref: str | None, now: int, next_poll_at: int | None,
            actor: str) -> RailStatus | None:  # fmt: skip
    """Take one observation of the intent's entity; returns the row when it changed, else None.

    Taken when it is the first, or ranks above the current status, or (not final) states the same status with more
    of the money accounted for (a partially processed settlement settling more). Never over a final status but the
    rail's own next step (a processed payout reversed, `_AFTER_FINAL`): a different final one is kept in the history
    as a conflict and raised (CONFLICTING_FINAL)."""
    require_transaction(conn)
    amounts = amounts_of(tool, entity)
    was = current(conn, merchant_id, sik)
    if was is not None and was.entity_id != entity_id:
        return _second_entity(conn, was, entity_id, status, source, ref, now, actor)
    taken = "moved" if was is None else _judge(tool, was, status, amounts)
    if taken is None:
        return None  # the same thing seen again: nothing to add
    # A contradiction raised before (this final status, under another event id) puts nothing new before a person.
    seen_conflict = taken == "conflict" and _conflicted_before(conn, merchant_id, sik, status)
    conn.execute(
        """INSERT INTO rail_status_history (merchant_id, sik, status, source, ref, amounts_json, taken, observed_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
        (merchant_id, sik, status, source, ref, _dump(amounts), taken, now),
    )  # fmt: skip
    if taken == "stale":
        return None
    final = is_final(tool, status)
    if taken == "conflict":
        assert was is not None
        raised = was.attention != CONFLICTING_FINAL or not seen_conflict
        seq = _audit(conn, merchant_id, sik, tool, entity_id, status=was.status, previous=was.status, final=True,
                     attention=CONFLICTING_FINAL, source=source, ref=ref, amounts=was.amounts, now=now, actor=actor,
                     raised=raised, conflicting=status)  # fmt: skip
        conn.execute("UPDATE rail_status SET attention = ?, raised_seq = ?, updated_at = ? "
                     "WHERE merchant_id = ? AND sik = ?",
                     (CONFLICTING_FINAL, seq if raised else was.raised_seq, now, merchant_id, sik))  # fmt: skip
        return current(conn, merchant_id, sik)
    # An attention this status raises (not one carried over from an earlier observation, such as a SECOND_ENTITY
    # while the entity moves on) is raised afresh when the money at stake is not what it was.
    fresh = attention_for(tool, status, amounts)
    attention = fresh or (was.attention if was is not None else None)
    raised = fresh is not None and (was is None or was.attention != fresh
                                    or _stake(tool, was.status, was.amounts) != _stake(tool, status, amounts))
    seq = _audit(conn, merchant_id, sik, tool, entity_id, status=status, previous=None if was is None else was.status,
                 final=final, attention=attention, source=source, ref=ref, amounts=amounts, now=now, actor=actor,
                 raised=raised)  # fmt: skip
    if raised:
        raised_seq: int | None = seq
    else:  # the raising it had stands (none without an attention)
        raised_seq = None if attention is None or was is None else was.raised_seq
    conn.execute(
        f"""INSERT INTO rail_status ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?)
            ON CONFLICT (merchant_id, sik) DO UPDATE SET status = excluded.status, final = excluded.final,
              attention = excluded.attention, amounts_json = excluded.amounts_json, source = excluded.source,
              updated_at = excluded.updated_at, next_poll_at = excluded.next_poll_at,
              raised_seq = excluded.raised_seq""",
        (merchant_id, sik, tool, entity_id, status, int(final), attention, _dump(amounts), source, now,
         None if final and not watched(tool, status) else next_poll_at, raised_seq),
    )  # fmt: skip
    if was is None:
        drop_owed(conn, merchant_id, sik)  # followed from now on
    return current(conn, merchant_id, sik)


def _judge(tool: str, was: RailStatus, status: str, amounts: dict[str, int]) -> str | None:
    """moved, stale, conflict, or None (nothing new)."""
    ranks = _RANKS[tool]
    old, new = ranks.get(was.status, 0), ranks.get(status, 0)
    if status == was.status:
        if was.final or _progress(amounts) <= _progress(was.amounts):
            return None
        return "moved"
    if was.final:
        after = _AFTER_FINAL.get(tool, {})
        if status in after.get(was.status, ()):
            return "moved"
        if was.status in after.get(status, ()):
            return "stale"  # the step before it, arriving late
        return "conflict" if is_final(tool, status) else "stale"
    return "moved" if new > old else "stale"


def _stake(tool: str, status: str, amounts: dict[str, int]) -> tuple[Any, ...]:
    """What an attention puts before a person: the status, and the amounts at stake in it."""
    return status, *(amounts.get(name) for name in _AT_STAKE.get(tool, ()))


def _conflicted_before(conn: sqlite3.Connection, merchant_id: str, sik: str, status: str) -> bool:
    return conn.execute("SELECT 1 FROM rail_status_history WHERE merchant_id = ? AND sik = ? AND taken = 'conflict' "
                        "AND status = ? LIMIT 1", (merchant_id, sik, status)).fetchone() is not None  # fmt: skip


def _progress(amounts: dict[str, int]) -> int:
    # How much of a settlement the rail has accounted for, settled or reversed: only grows as it is worked on.
    return amounts.get("amount_settled", 0) + amounts.get("amount_reversed", 0)


def _second_entity(conn: sqlite3.Connection, was: RailStatus, entity_id: str, status: str, source: str,
                   ref: str | None, now: int, actor: str) -> RailStatus | None:  # fmt: skip
    """Another entity carries this intent's stamp: the rail may hold the money twice. Never followed as if it were
    the intent's; raised for a person with both ids on the audit record."""
    if was.attention == SECOND_ENTITY:
        return None
    seq = _audit(conn, was.merchant_id, was.sik, was.tool, was.entity_id, status=was.status, previous=was.status,
                 final=was.final, attention=SECOND_ENTITY, source=source, ref=ref, amounts=was.amounts, now=now,
                 actor=actor, raised=True, second_entity_id=entity_id, second_status=status)  # fmt: skip
    conn.execute("UPDATE rail_status SET attention = ?, raised_seq = ?, updated_at = ? "
                 "WHERE merchant_id = ? AND sik = ?", (SECOND_ENTITY, seq, now, was.merchant_id, was.sik))  # fmt: skip
    return current(conn, was.merchant_id, was.sik)


def _audit(conn: sqlite3.Connection, merchant_id: str, sik: str, tool: str, entity_id: str, *, status: str,
           previous: str | None, final: bool, attention: str | None, source: str, ref: str | None,
           amounts: dict[str, int], now: int, actor: str, raised: bool, **extra: Any) -> int:  # fmt: skip
    """The RAIL_STATUS record of one change; its seq. *raised*: this observation raises the attention afresh (an
    acknowledgement names the record that raised what it acknowledges)."""
    return audit.append(conn, "RAIL_STATUS", {
        "merchant_id": merchant_id, "sik": sik, "tool": tool, "rail_entity_id": entity_id, "status": status,
        "previous": previous, "final": final, "attention": attention, "source": source, "ref": ref,
        "amounts": amounts, "actor": actor, **({"raised": True} if raised else {}), **extra,
    }, now)  # fmt: skip


def _dump(amounts: dict[str, int]) -> str:
    return json.dumps(amounts, sort_keys=True, separators=(",", ":"))


def history(conn: sqlite3.Connection, merchant_id: str, sik: str) -> list[dict[str, Any]]:
    """Every observation kept for the intent, oldest first (repeats of the current status are not kept)."""
    if not _kept(conn):
        return []
    rows = conn.execute(
        """SELECT status, source, ref, amounts_json, taken, observed_at FROM rail_status_history
           WHERE merchant_id = ? AND sik = ? ORDER BY id""",
        (merchant_id, sik),
    ).fetchall()
    return [{"status": r[0], "source": r[1], "ref": r[2], "amounts": json.loads(r[3]), "taken": r[4],
             "observed_at": int(r[5])} for r in rows]  # fmt: skip


def schedule(conn: sqlite3.Connection, merchant_id: str, sik: str, *, next_poll_at: int | None, polled: bool) -> None:
    """When the poller fetches the entity next. A final one is not fetched again, but one the rail may still take
    a step from (a processed payout) is, until WATCHED_FOR_MS after it became final."""
    require_transaction(conn)
    row = conn.execute("SELECT tool, status, final, updated_at FROM rail_status WHERE merchant_id = ? AND sik = ?",
                       (merchant_id, sik)).fetchone()  # fmt: skip
    if row is not None and row["final"] and (not watched(row["tool"], row["status"]) or next_poll_at is None
                                             or next_poll_at > row["updated_at"] + WATCHED_FOR_MS):  # fmt: skip
        next_poll_at = None
    conn.execute("UPDATE rail_status SET next_poll_at = ?, polls = polls + ? WHERE merchant_id = ? AND sik = ?",
                 (next_poll_at, int(polled), merchant_id, sik))  # fmt: skip


def due(conn: sqlite3.Connection, now: int, *, limit: int = 100) -> list[RailStatus]:
    """Entities whose next fetch is due (not final, or final and still watched), the longest-waiting first."""
    rows = conn.execute(
        f"""SELECT {_columns(conn)} FROM rail_status WHERE next_poll_at <= ?
            ORDER BY next_poll_at LIMIT ?""",
        (now, limit),
    ).fetchall()  # fmt: skip
    return [RailStatus.from_row(r) for r in rows]


def not_final(conn: sqlite3.Connection, *, since: int) -> int:
    """How many followed entities, applied at or after *since*, are not final yet."""
    row = conn.execute("SELECT COUNT(*) FROM rail_status WHERE final = 0 AND updated_at >= ?", (since,)).fetchone()
    return int(row[0])


def poll_soon(conn: sqlite3.Connection, *, since: int, at: int) -> int:
    """Bring forward to *at* the next fetch of every entity not final, last changed at or after *since* (the backfill
    when webhooks stop coming); returns how many."""
    require_transaction(conn)
    cur = conn.execute("UPDATE rail_status SET next_poll_at = ? WHERE final = 0 AND updated_at >= ? "
                       "AND (next_poll_at IS NULL OR next_poll_at > ?)", (at, since, at))  # fmt: skip
    return cur.rowcount


def untracked(conn: sqlite3.Connection, *, after: int = 0, limit: int = 500) -> list[tuple[int, str, str]]:
    """APPLIED intents the lifecycle does not follow yet: (position, merchant, SIK), from the one after *after*, the
    oldest first. They are owed a rail_status row from the transaction that made them APPLIED (rail_status_owed, by a
    trigger), so none is missed whatever the clock of the actor that applied it (an updated_at below one already
    seen is no reason to be passed over)."""
    rows = conn.execute("SELECT rowid, merchant_id, sik FROM rail_status_owed WHERE rowid > ? ORDER BY rowid LIMIT ?",
                        (after, limit)).fetchall()  # fmt: skip
    return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]


def drop_owed(conn: sqlite3.Connection, merchant_id: str, sik: str) -> None:
    """The intent is owed no rail_status row any more: followed from now on, or nothing the lifecycle can follow."""
    require_transaction(conn)
    conn.execute("DELETE FROM rail_status_owed WHERE merchant_id = ? AND sik = ?", (merchant_id, sik))


def needs_attention(conn: sqlite3.Connection, *, limit: int = 200) -> list[RailStatus]:
    """Every followed entity a person must look at and no acknowledgement covers (none given, or one given for an
    earlier raising of its attention), the most recent first."""
    if not _kept(conn):
        return []
    rows = conn.execute(
        f"SELECT {_columns(conn)} FROM rail_status s WHERE attention IS NOT NULL AND {_not_acked(conn)} "
        "ORDER BY updated_at DESC LIMIT ?", (limit,)
    ).fetchall()  # fmt: skip
    return [RailStatus.from_row(r) for r in rows]


def acknowledged(conn: sqlite3.Connection, *, limit: int = 200) -> list[tuple[RailStatus, Acknowledgement]]:
    """Attentions a person has acknowledged as they stand (raised by the observation the acknowledgement was given
    for), with who and what they said, the most recently acknowledged first."""
    if not _kept(conn) or not _acks_kept(conn):
        return []
    rows = conn.execute(
        f"""SELECT {_columns(conn, "s.")}, a.operator, a.credential, a.note, a.acknowledged_at
            FROM rail_status s JOIN rail_attention_acks a ON {_covers(conn)}
            ORDER BY a.acknowledged_at DESC LIMIT ?""",
        (limit,),
    ).fetchall()  # fmt: skip
    return [(RailStatus.from_row(r[:13]), Acknowledgement(str(r[13]), r[14], str(r[15]), int(r[16]))) for r in rows]


def acknowledgement(conn: sqlite3.Connection, row: RailStatus) -> Acknowledgement | None:
    """Who acknowledged *row*'s current attention as it was raised, or None (also when it has none, and when the
    acknowledgement given was for an earlier raising of it)."""
    if row.attention is None or not _acks_kept(conn):
        return None
    by_raising = _raised_kept(conn)
    found = conn.execute(
        "SELECT operator, credential, note, acknowledged_at FROM rail_attention_acks "
        "WHERE merchant_id = ? AND sik = ? AND attention = ?" + (" AND raised_seq IS ?" if by_raising else ""),
        (row.merchant_id, row.sik, row.attention, *((row.raised_seq,) if by_raising else ())),
    ).fetchone()  # fmt: skip
    return None if found is None else Acknowledgement(str(found[0]), found[1], str(found[2]), int(found[3]))


def acknowledge(conn: sqlite3.Connection, *, merchant_id: str, sik: str, attention: str, operator: str, note: str,
                credential: str | None, now: int, raised_seq: int | None = None) -> RailStatus:  # fmt: skip
    """Record that *operator* has taken *attention* on the intent in hand (in the caller's transaction). Refused
    unless that is the attention the row has now — an acknowledgement names what the person saw, so one given for a
    failed refund does not silence a conflicting final status raised after it — raised by the observation they saw
    (*raised_seq*, when the caller knows it: the page or list they acted on), and unless nobody has already.

    It covers that raising only: the status and amounts it was given for, named on its audit record. A later
    observation that changes the money at stake raises the attention afresh, and it waits for a person again; the
    acknowledgement given then takes this one's place (this one stays on the audit chain)."""
    require_transaction(conn)
    row = current(conn, merchant_id, sik)
    if row is None or row.attention is None:
        raise OperatorRefused(sik, "nothing about it needs a person: there is no attention to acknowledge")
    if row.attention != attention:
        raise OperatorRefused(sik, f"its attention is {row.attention}, not {attention}: acknowledge what it is now")
    if raised_seq is not None and raised_seq != row.raised_seq:
        raise OperatorRefused(sik, f"{attention} was raised again since (now {row.status}, {row.amounts}; audit "
                                   f"record {row.raised_seq}): look at it again and acknowledge what it is now")
    if not operator.strip():
        raise OperatorRefused(sik, "an acknowledgement names the person (--as NAME)")
    if not note.strip():
        raise OperatorRefused(sik, "an acknowledgement says what is being done about it (--note TEXT)")
    done = acknowledgement(conn, row)
    if done is not None:
        raise OperatorRefused(sik, f"{attention} was already acknowledged by {done.operator}: {done.note}")
    conn.execute(
        """INSERT INTO rail_attention_acks (merchant_id, sik, attention, operator, credential, note, acknowledged_at,
                                            raised_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (merchant_id, sik, attention) DO UPDATE SET operator = excluded.operator,
             credential = excluded.credential, note = excluded.note, acknowledged_at = excluded.acknowledged_at,
             raised_seq = excluded.raised_seq""",
        (merchant_id, sik, attention, operator, credential, note.strip(), now, row.raised_seq),
    )  # fmt: skip
    audit.append(conn, "RAIL_ATTENTION_ACK", {
        "merchant_id": merchant_id, "sik": sik, "tool": row.tool, "rail_entity_id": row.entity_id,
        "status": row.status, "amounts": row.amounts, "raised_seq": row.raised_seq, "attention": attention,
        "operator": operator, "credential": credential or "none: name as typed", "note": note.strip(),
    }, now)  # fmt: skip
    return row


def counts(conn: sqlite3.Connection) -> list[tuple[str, str, int]]:
    """(tool, status, how many) over every followed entity."""
    if not _kept(conn):
        return []
    return [(str(t), str(s), int(n)) for t, s, n in
            conn.execute("SELECT tool, status, COUNT(*) FROM rail_status GROUP BY tool, status")]  # fmt: skip


def attentions_waiting(conn: sqlite3.Connection, *, limit: int = 1000) -> list[dict[str, Any]]:
    """The attentions waiting for a person (raised, acknowledged by nobody), each with what raised it: merchant,
    sik, tool, entity, status, attention, raised_seq (None on a ledger from before it) and when it was observed."""
    if not _kept(conn):
        return []
    raised = "s.raised_seq" if _raised_kept(conn) else "NULL"
    rows = conn.execute(
        f"""SELECT s.merchant_id, s.sik, s.tool, s.entity_id, s.status, s.attention, {raised}, s.updated_at
            FROM rail_status s WHERE s.attention IS NOT NULL AND {_not_acked(conn)} ORDER BY s.updated_at LIMIT ?""",
        (limit,),
    ).fetchall()
    names = ("merchant_id", "sik", "tool", "entity_id", "status", "attention", "raised_seq", "updated_at")
    return [dict(zip(names, tuple(row), strict=True)) for row in rows]


def attentions_waiting_by_merchant(conn: sqlite3.Connection) -> list[tuple[str, int, int]]:
    """(merchant, how many, when the oldest was last observed) of the attentions waiting for a person: raised and
    acknowledged by nobody."""
    if not _kept(conn):
        return []
    return [(str(m), int(n), int(oldest)) for m, n, oldest in conn.execute(
        f"""SELECT merchant_id, COUNT(*), MIN(updated_at) FROM rail_status s
            WHERE attention IS NOT NULL AND {_not_acked(conn)} GROUP BY merchant_id""")]  # fmt: skip


def attention_counts(conn: sqlite3.Connection, *, acknowledged: bool = False) -> list[tuple[str, int]]:
    """(attention, how many) of those waiting for a person, or with *acknowledged*, of those a person has taken."""
    if not _kept(conn):
        return []
    if acknowledged and not _acks_kept(conn):
        return []
    which = _not_acked(conn) if not acknowledged else f"NOT {_not_acked(conn)}"
    return [(str(a), int(n)) for a, n in conn.execute(
        f"SELECT attention, COUNT(*) FROM rail_status s WHERE attention IS NOT NULL AND {which} GROUP BY attention")]
