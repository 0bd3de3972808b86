"""Read-only questions the gates and the rail worker ask of committed ledger state."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from interlock.fees import FeeRate
from interlock.tools import PAYOUT_TOOL as PAYOUT_TOOL  # the ledger's questions name it beside SETTLEMENT_TOOL
from ledger.states import COUNTS_AGAINST_LIMITS, MAY_MOVE_MONEY, State, unsettled_at

SETTLEMENT_TOOL = "create_instant_settlement"
# Who a payout pays is its fund account's contact, kept in the intent's params (ADR 0028 amendment: a contact with a
# bank account and a UPI id is one payee); every other tool's subject is its own.
PAYEE_PARAM = "contact_id"
_WINDOW_SUBJECT = f"""CASE WHEN tool = '{PAYOUT_TOOL}'
                         THEN COALESCE(json_extract(params_json, '$.{PAYEE_PARAM}'), subject_id) ELSE subject_id END"""


def window_subject(tool: str, subject_id: str, params: dict[str, object]) -> str:
    """What a per_subject G3 window counts apart for this call: a payout's payee (its contact), else the subject."""
    payee = params.get(PAYEE_PARAM) if tool == PAYOUT_TOOL else None
    return payee if isinstance(payee, str) and payee else subject_id


def _placeholders(states: Iterable[State]) -> tuple[str, list[str]]:
    values = sorted(s.value for s in states)
    return ", ".join("?" for _ in values), values


# G2's money in motion (issue 13 item 7): what may still move, plus HELD — a person may release it at any
# moment, so a second call must not be judged as if that money were still there — and QUARANTINED: the rail may
# hold money moved under the intent's stamp (on other terms, say) that a rail read taken before it moved does not
# show, and only a person can say (finding F12: a payout quarantined after the gate's read left the balance to a
# second payout the rail then refused). Counted until resolved; where the read shows it too, that refuses, never pays.
_G2_COUNTED: frozenset[State] = MAY_MOVE_MONEY | {State.HELD, State.QUARANTINED}


# These two run inside the serial admission transaction. Left alone, SQLite's planner takes the primary key
# (merchant_id, sik) because of `sik <> ?` and scans the merchant's intents: 64 ms at 1M intents against
# 0.02 ms by subject (measured in review), so the subject index is named.
def _merchants(merchant_ids: str | Sequence[str]) -> tuple[str, list[str]]:
    ids = [merchant_ids] if isinstance(merchant_ids, str) else sorted(set(merchant_ids))
    return ", ".join("?" for _ in ids), ids


def money_committed_for_subject(
    conn: sqlite3.Connection, merchant_ids: str | Sequence[str], subject_id: str, *, exclude_sik: str,
    currency: str | None = None,
) -> int:
    """Minor units of this subject's *other* intents that may still move money or are HELD (G2's ceiling).

    For a refund the subject is the payment; for a settlement it is "balance", and APPLIED settlements are
    left out because the rail's balance already reflects them. *currency* narrows it (a balance has one).
    *merchant_ids* are every merchant on the one rail account (ADR 0021): they share one payment and one
    balance, so their money in motion is counted together."""
    marks, states = _placeholders(_G2_COUNTED)
    who, merchants = _merchants(merchant_ids)
    row = conn.execute(
        f"""SELECT COALESCE(SUM(amount_minor), 0) FROM intents INDEXED BY intents_by_subject
            WHERE merchant_id IN ({who}) AND subject_id = ? AND sik <> ? AND state IN ({marks})
              AND (? IS NULL OR currency = ?)""",
        (*merchants, subject_id, exclude_sik, *states, currency, currency),
    ).fetchone()
    return int(row[0])


def applied_since(
    conn: sqlite3.Connection, merchant_ids: str | Sequence[str], subject_id: str, *, since_ms: int,
    exclude_sik: str, currency: str | None = None,
) -> int:
    """Minor units of this subject's other intents (of every merchant in *merchant_ids*: one rail account) that
    became APPLIED at or after *since_ms*: money a rail read taken at *since_ms* may not show yet, so a ceiling
    computed from that read must count it."""
    who, merchants = _merchants(merchant_ids)
    row = conn.execute(
        f"""SELECT COALESCE(SUM(amount_minor), 0) FROM intents INDEXED BY intents_by_subject
           WHERE merchant_id IN ({who}) AND subject_id = ? AND sik <> ? AND state = 'APPLIED' AND updated_at >= ?
             AND (? IS NULL OR currency = ?)""",
        (*merchants, subject_id, exclude_sik, since_ms, currency, currency),
    ).fetchone()
    return int(row[0])


def applied_mark(conn: sqlite3.Connection) -> int | None:
    """The ledger's position in the order intents became APPLIED (schema.sql applied_order): read before a rail read
    for G2, so that every intent applied after it — whatever any clock says — is counted as money that read may not
    show (finding F9). None on a ledger whose rail worker has not created the order yet: the caller falls back to
    comparing clocks."""
    try:
        row = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM applied_order").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    return int(row[0])


def applied_after(
    conn: sqlite3.Connection, merchant_ids: str | Sequence[str], *, mark: int, exclude_sik: str, currency: str | None,
    subject_id: str | None = None, tool: str | None = None, per_call_minor: int = 0,
) -> int:
    """Minor units (each with *per_call_minor* added: a payout's fee) of the other intents of every merchant in
    *merchant_ids* (one rail account) that became APPLIED after *mark* (applied_mark) — on *subject_id*, or of
    *tool* on every subject: money a rail read taken after the mark may not show yet. Read from the end of the
    order, so its cost is what was applied since the mark, not the ledger's size."""
    who, merchants = _merchants(merchant_ids)
    row = conn.execute(
        f"""SELECT COALESCE(SUM(i.amount_minor + ?), 0) FROM applied_order o
            JOIN intents i ON i.merchant_id = o.merchant_id AND i.sik = o.sik
            WHERE o.seq > ? AND o.merchant_id IN ({who}) AND i.sik <> ? AND i.state = 'APPLIED'
              AND (? IS NULL OR i.subject_id = ?) AND (? IS NULL OR i.tool = ?) AND (? IS NULL OR i.currency = ?)""",
        (per_call_minor, mark, *merchants, exclude_sik, subject_id, subject_id, tool, tool, currency, currency),
    ).fetchone()
    return int(row[0])


def money_committed_for_tool(
    conn: sqlite3.Connection, merchant_ids: str | Sequence[str], tool: str, *, exclude_sik: str, currency: str,
    applied_since_ms: int | None = None, per_call_minor: int = 0,
) -> int:
    """Minor units of *tool*'s other intents, on every subject, that may still move money or are HELD — and, with
    *applied_since_ms*, those that became APPLIED since then. A payout's basis is the account's one balance,
    whoever the payee (ADR 0028), so its money in motion is counted by tool, not by subject. APPLIED payouts are
    left out otherwise: the rail's balance shows a processing one debited, and its list shows a queued one.
    *per_call_minor* is added for each intent counted: a payout's fee, which the rail debits beside its amount."""
    marks, states = _placeholders(_G2_COUNTED)
    who, merchants = _merchants(merchant_ids)
    row = conn.execute(
        f"""SELECT COALESCE(SUM(amount_minor + ?), 0) FROM intents
            WHERE merchant_id IN ({who}) AND tool = ? AND sik <> ? AND currency = ?
              AND (state IN ({marks}) OR (state = 'APPLIED' AND ? IS NOT NULL AND updated_at >= ?))""",
        (per_call_minor, *merchants, tool, exclude_sik, currency, *states, applied_since_ms, applied_since_ms),
    ).fetchone()
    return int(row[0])


def payouts_not_known_debited(conn: sqlite3.Connection, merchant_ids: str | Sequence[str], *,
                               undebited: Sequence[str], limit: int) -> list[str]:  # fmt: skip
    """Rail ids of the APPLIED payouts of every merchant in *merchant_ids* (one rail account) that this ledger has
    not seen debited or ended: the lifecycle follower has no status for them yet (rail_status_owed), or the last it
    read is one of *undebited* (queued, pending, scheduled). G2's payout read fetches each by id before it reads the
    balance, so our own payout counts whatever the rail's lists show or lag (finding F11). At most *limit* ids: the
    caller asks for one more than it will fetch, to tell when the follower is behind."""
    who, merchants = _merchants(merchant_ids)
    marks = ", ".join("?" for _ in undebited)
    rows = conn.execute(
        f"""SELECT i.rail_entity_id FROM rail_status_owed o JOIN intents i ON i.merchant_id = o.merchant_id
                                                                         AND i.sik = o.sik
            WHERE o.merchant_id IN ({who}) AND i.tool = ? AND i.state = 'APPLIED' AND i.rail_entity_id IS NOT NULL
            UNION
            SELECT entity_id FROM rail_status INDEXED BY rail_status_due
            WHERE final = 0 AND merchant_id IN ({who}) AND tool = ? AND status IN ({marks})
            ORDER BY 1 LIMIT ?""",
        (*merchants, PAYOUT_TOOL, *merchants, PAYOUT_TOOL, *undebited, limit),
    ).fetchall()
    return [str(r[0]) for r in rows]


def money_under_task(conn: sqlite3.Connection, signer: str | None, task_id: str, *, exclude_sik: str,
                     recovered_for: tuple[str, Sequence[str]] | None = None) -> int:  # fmt: skip
    """Minor units of the other intents bound to *task_id* as signed by *signer* that moved or may still move
    (what G3 counts): the sum a task's max_amount_minor caps, however many calls it was split into, across every
    merchant, agent and tool in this ledger (SPEC §10 v2). An intent recorded before the signer was (a v1 task,
    task_signer NULL) counts against every signer's task of that id: over-counting refuses, never pays.

    With *recovered_for* (the merchant and the agents the task is addressed to), every intent a restore recovered
    from the rail for them counts too: a restore cannot tell which task, if any, the lost tail sent a call under
    (the rail's entity does not say), so it counts against each of their tasks — over-counting refuses, never pays
    (finding F-loss-3)."""
    marks, states = _placeholders(COUNTS_AGAINST_LIMITS)
    row = conn.execute(
        f"""SELECT COALESCE(SUM(amount_minor), 0) FROM intents INDEXED BY intents_by_signed_task
            WHERE task_id = ? AND task_id IS NOT NULL AND (task_signer = ? OR task_signer IS NULL) AND sik <> ?
              AND state IN ({marks})""",
        (task_id, signer, exclude_sik, *states),
    ).fetchone()
    counted = int(row[0])
    if recovered_for is not None and recovered_for[1]:
        merchant_id, agents = recovered_for
        who = ", ".join("?" for _ in agents)
        row = conn.execute(
            f"""SELECT COALESCE(SUM(amount_minor), 0) FROM intents
                WHERE merchant_id = ? AND agent_id IN ({who}) AND task_id IS NULL AND sik <> ?
                  AND json_extract(params_json, '$.recovered') IS NOT NULL AND state IN ({marks})""",
            (merchant_id, *agents, exclude_sik, *states),
        ).fetchone()
        counted += int(row[0])
    return counted


@dataclass(frozen=True, slots=True)
class WindowUsage:
    calls: int
    amount_minor: int


def window_usage(
    conn: sqlite3.Connection, merchant_id: str, agent_id: str, *, since_ms: int, currency: str | None,
    exclude_sik: str | None = None, tool: str | None = None, subject_id: str | None = None,
) -> WindowUsage:
    """Money calls (and their minor units in *currency*) first seen at or after *since_ms*: of every tool, or of
    *tool* alone, and of every subject or of *subject_id* alone (a payout's subject here is its payee:
    window_subject)."""
    marks, states = _placeholders(COUNTS_AGAINST_LIMITS)
    sql = f"""SELECT COUNT(*), COALESCE(SUM(CASE WHEN currency = ? THEN amount_minor ELSE 0 END), 0) FROM intents
              WHERE merchant_id = ? AND agent_id = ? AND COALESCE(authorized_at, first_seen_at) >= ?
                AND state IN ({marks}) AND sik <> ? AND (? IS NULL OR tool = ?)
                AND (? IS NULL OR {_WINDOW_SUBJECT} = ?)"""
    row = conn.execute(sql, (currency or "", merchant_id, agent_id, since_ms, *states, exclude_sik or "", tool, tool,
                             subject_id, subject_id)).fetchone()  # fmt: skip
    return WindowUsage(calls=int(row[0]), amount_minor=int(row[1]))


def fees_in_window(
    conn: sqlite3.Connection, merchant_id: str, agent_id: str, *, since_ms: int, currency: str, rate: FeeRate,
    exclude_sik: str | None = None,
) -> int:
    """Fees of settlements and payouts in the window: what the rail charged where recorded, else the projection
    (a settlement's by *rate*, a payout's flat fee)."""
    marks, states = _placeholders(COUNTS_AGAINST_LIMITS)
    rows = conn.execute(
        f"""SELECT i.amount_minor, i.tool,
                   (SELECT a.fee_minor FROM intent_attempts a
                     WHERE a.merchant_id = i.merchant_id AND a.sik = i.sik AND a.fee_minor IS NOT NULL
                     ORDER BY a.attempt_seq DESC LIMIT 1) AS charged
            FROM intents i
            WHERE i.merchant_id = ? AND i.agent_id = ? AND i.tool IN (?, ?) AND i.currency = ?
              AND COALESCE(i.authorized_at, i.first_seen_at) >= ?
              AND i.state IN ({marks}) AND i.sik <> ?""",
        (merchant_id, agent_id, SETTLEMENT_TOOL, PAYOUT_TOOL, currency, since_ms, *states, exclude_sik or ""),
    ).fetchall()
    return sum(int(r["charged"]) if r["charged"] is not None else rate.project_for(r["tool"], int(r["amount_minor"]))
               for r in rows)  # fmt: skip


def intents_by_state(conn: sqlite3.Connection) -> dict[str, int]:
    return {r[0]: int(r[1]) for r in conn.execute("SELECT state, COUNT(*) FROM intents GROUP BY state")}


# A repeat is answered by an existing intent in these states (anything that is not a refusal or a failure).
_REPEATABLE_EXCLUDED = ("BLOCKED", "FAILED_TERMINAL")


def earlier_full_request(
    conn: sqlite3.Connection, merchant_id: str, tool: str, subject_id: str, distinct_reason: str | None, *,
    since_ms: int = 0,
) -> tuple[str, int] | None:
    """(sik, amount) of an earlier "everything" request — a refund without an amount, a full-balance
    settlement — on this subject that was not refused or failed. Its repeat must land on the same
    intent even though "everything" is a different number now (zero, once the first one applied)."""
    row = conn.execute(
        """SELECT sik, amount_minor FROM intents
           WHERE merchant_id = ? AND tool = ? AND subject_id = ? AND json_extract(params_json, '$.full') = 1
             AND distinct_reason IS ? AND state NOT IN (?, ?) AND first_seen_at >= ?
           ORDER BY first_seen_at DESC LIMIT 1""",
        (merchant_id, tool, subject_id, distinct_reason, *_REPEATABLE_EXCLUDED, since_ms),
    ).fetchone()
    return None if row is None else (str(row["sik"]), int(row["amount_minor"]))


def intent_state(conn: sqlite3.Connection, merchant_id: str, sik: str) -> State | None:
    """The intent's state, or None when the SIK has no intent."""
    row = conn.execute("SELECT state FROM intents WHERE merchant_id = ? AND sik = ?", (merchant_id, sik)).fetchone()
    return None if row is None else State(row["state"])


def intent_unsettled_at(conn: sqlite3.Connection, merchant_id: str, sik: str, at_ms: int,
                        clock_skew_ms: int) -> bool | None:  # fmt: skip
    """None when the SIK has no intent; else whether that intent was unsettled, or not yet admitted, at *at_ms*
    (ledger.states.unsettled_at: *at_ms* on another process's clock than the ledger's stamps)."""
    row = conn.execute("SELECT state, first_seen_at, updated_at FROM intents WHERE merchant_id = ? AND sik = ?",
                       (merchant_id, sik)).fetchone()  # fmt: skip
    if row is None:
        return None
    return unsettled_at(State(row["state"]), int(row["first_seen_at"]), int(row["updated_at"]), at_ms, clock_skew_ms)
