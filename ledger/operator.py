"""Ledger writes and reads for operator actions: releasing or rejecting a hold, expiring stale holds,
resolving a quarantine, and the read-only views the operator tools show (queues, timelines, snapshots).

Every write composes into the caller's `transaction(conn)` and goes through `intents.transition()`,
so the state change and its audit record (naming who and why) commit together or not at all. The
checks that decide *whether* an operator may act live in `ops/`; this module only records.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from interlock.config import DEFAULT_CLOCK_SKEW_MS
from interlock.errors import OperatorRefused
from interlock.fees import DEFAULT_FEE_RATE, FeeRate
from interlock.mandate import Mandate
from interlock.messages import Verdict
from ledger import intents
from ledger.db import require_transaction
from ledger.intents import Intent
from ledger.limits import reassert
from ledger.states import Event, State

HOLD_EXPIRY_ACTOR = "interlock:hold-expiry"
HOLD_EXPIRED = "HOLD_EXPIRED"
HOLD_REJECTED = "HOLD_REJECTED"

# The tables an audit bundle carries besides the chain itself, with the key that orders each.
SNAPSHOT_TABLES: dict[str, str] = {
    "intents": "merchant_id, sik",
    "intent_attempts": "merchant_id, sik, attempt_seq",
    "decisions": "decided_at, request_id",
    "recon_findings": "id",
    "operation_refs": "merchant_id, operation_ref",
}


# -- reads ---------------------------------------------------------------------------------------------------


def intents_in_state(conn: sqlite3.Connection, state: State | None = None, *, limit: int = 500) -> list[Intent]:
    if state is None:
        rows = conn.execute("SELECT * FROM intents ORDER BY updated_at DESC LIMIT ?", (limit,))
    else:
        rows = conn.execute("SELECT * FROM intents WHERE state = ? ORDER BY updated_at DESC LIMIT ?",
                            (state.value, limit))  # fmt: skip
    return [Intent.from_row(r) for r in rows]


def intents_with_sik(conn: sqlite3.Connection, sik: str) -> list[Intent]:
    """Every intent with this SIK (one per merchant at most; the SIK hashes the merchant id in)."""
    return [Intent.from_row(r) for r in conn.execute("SELECT * FROM intents WHERE sik = ?", (sik,))]


def expired_holds(conn: sqlite3.Connection, now: int) -> list[Intent]:
    rows = conn.execute(
        "SELECT * FROM intents WHERE state = 'HELD' AND hold_expires_at IS NOT NULL AND hold_expires_at <= ?", (now,)
    )
    return [Intent.from_row(r) for r in rows]


def timeline(conn: sqlite3.Connection, merchant_id: str, sik: str) -> dict[str, list[dict[str, Any]]]:
    """Everything the ledger knows about one intent: decisions, attempts, findings and audit records."""
    key = (merchant_id, sik)
    decisions = conn.execute(
        "SELECT * FROM decisions WHERE merchant_id = ? AND sik = ? ORDER BY decided_at, audit_seq", key
    )
    attempts = conn.execute(
        "SELECT * FROM intent_attempts WHERE merchant_id = ? AND sik = ? ORDER BY attempt_seq", key
    )
    findings = conn.execute("SELECT * FROM recon_findings WHERE merchant_id = ? AND sik = ? ORDER BY id", key)
    records = conn.execute(
        """SELECT seq, ts, kind, payload_json, hash FROM audit_log
           WHERE json_extract(payload_json, '$.sik') = ? AND json_extract(payload_json, '$.merchant_id') = ?
           ORDER BY seq""",
        (sik, merchant_id),
    )
    audit_rows = []
    for row in records:
        item = dict(row)
        item["payload"] = json.loads(item.pop("payload_json"))
        audit_rows.append(item)
    return {
        "decisions": [dict(r) for r in decisions],
        "attempts": [dict(r) for r in attempts],
        "findings": [dict(r) for r in findings],
        "audit": audit_rows,
    }


def snapshot(conn: sqlite3.Connection) -> dict[str, list[dict[str, Any]]]:
    """The audit chain, its head and the rows it covers, read in one transaction so they agree."""
    started = not conn.in_transaction
    if started:
        conn.execute("BEGIN")  # a read transaction: one consistent WAL snapshot across every table
    try:
        tables = {"audit_log": [dict(r) for r in conn.execute(
            "SELECT seq, ts, kind, payload_json, prev_hash, hash FROM audit_log ORDER BY seq")]}  # fmt: skip
        tables["audit_head"] = [dict(r) for r in conn.execute("SELECT seq, hash FROM audit_head WHERE id = 1")]
        for table, order in SNAPSHOT_TABLES.items():
            tables[table] = [dict(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY {order}")]
        return tables
    finally:
        if started:
            conn.execute("COMMIT")


# -- writes --------------------------------------------------------------------------------------------------


def release_hold(
    conn: sqlite3.Connection, intent: Intent, *, approver: str, reason: str, approved_terms: dict[str, Any], now: int,
    mandate: Mandate | None, credential: str | None = None, rate: FeeRate = DEFAULT_FEE_RATE,
    clock_skew_ms: int = DEFAULT_CLOCK_SKEW_MS,
) -> Intent:  # fmt: skip
    """HELD -> AUTHORIZED (HOLD_RELEASED). The audit record names the approver (the identity their credential
    proved, ADR 0015), which credential, the reason and the exact terms approved, so the approval can be
    checked against what was later sent to the rail.

    The mandate and G3 are re-asserted now, in this transaction: a hold approved after its window filled
    up would otherwise add a call past max_calls. Raises OperatorRefused (nothing written) when they refuse."""
    require_transaction(conn)
    check = reassert(conn, intent, mandate, now_ms=now, rate=rate, clock_skew_ms=clock_skew_ms)
    if check.verdict is not Verdict.ALLOW:
        why = f"releasing it now would break the mandate: {check.reason_code} {check.detail}"
        raise OperatorRefused(intent.sik, why + "; it stays HELD until the limit allows it or the hold expires")
    return intents.transition(
        conn, intent.merchant_id, intent.sik, Event.HOLD_RELEASED, now=now, actor=approver,
        detail=_with_credential({"reason": reason, "approved_terms": approved_terms}, credential),
        expect_attempt_seq=intent.attempt_seq, set_fields={"reason_code": None}, reasserted=check,
    )  # fmt: skip


def reject_hold(
    conn: sqlite3.Connection, intent: Intent, *, actor: str, reason: str, now: int, code: str = HOLD_REJECTED,
    credential: str | None = None,
) -> Intent:  # fmt: skip
    """HELD -> BLOCKED (HOLD_REJECTED); *code* is HOLD_REJECTED for a person, HOLD_EXPIRED for the clock."""
    require_transaction(conn)
    return intents.transition(
        conn, intent.merchant_id, intent.sik, Event.HOLD_REJECTED, now=now, actor=actor,
        detail=_with_credential({"reason": reason, "reason_code": code}, credential),
        expect_attempt_seq=intent.attempt_seq, set_fields={"reason_code": code},
    )  # fmt: skip


def _with_credential(detail: dict[str, Any], credential: str | None) -> dict[str, Any]:
    # Only when given: the clock's expiry has no credential, and older records keep their shape.
    return {**detail, "credential": credential} if credential else detail


def expire_holds(conn: sqlite3.Connection, now: int) -> list[Intent]:
    """Every HELD intent whose hold ran out becomes BLOCKED with reason HOLD_EXPIRED."""
    require_transaction(conn)
    expired = []
    for intent in expired_holds(conn, now):
        reason = f"hold expired at {intent.hold_expires_at} without an approval"
        expired.append(reject_hold(conn, intent, actor=HOLD_EXPIRY_ACTOR, reason=reason, now=now, code=HOLD_EXPIRED))
    return expired


def stamped_answers(conn: sqlite3.Connection, merchant_id: str, sik: str) -> list[tuple[int, str, str]]:
    """(attempt_seq, outcome, rail entity id) of every attempt the rail answered with an entity of ours: first-hand
    evidence that money moved under this intent (ADR 0005), on its terms or not (ADR 0016)."""
    rows = conn.execute(
        "SELECT attempt_seq, outcome, rail_entity_id FROM intent_attempts WHERE merchant_id = ? AND sik = ? "
        "AND rail_entity_id IS NOT NULL ORDER BY attempt_seq", (merchant_id, sik),
    ).fetchall()
    return [(int(seq), str(outcome), str(entity)) for seq, outcome, entity in rows]


def resolve_quarantine(
    conn: sqlite3.Connection,
    intent: Intent,
    *,
    operator: str,
    evidence: str,
    applied: bool,
    rail_entity_id: str | None,
    pages_scanned: int,
    pagination_exhausted: bool,
    now: int,
    credential: str | None = None,
) -> Intent:
    """QUARANTINED -> APPLIED | CONFIRMED_NOT_APPLIED, with the operator's own look at the rail recorded as a
    finding beside the transition (the evidence a later reader needs to trust the resolution). *credential*
    names the credential that proved who the operator is; without one the name is only what they typed."""
    require_transaction(conn)
    intents.record_finding(
        conn, merchant_id=intent.merchant_id, sik=intent.sik, attempt_seq=intent.attempt_seq,
        outcome="APPLIED" if applied else "CONFIRMED_NOT_APPLIED", pages_scanned=pages_scanned,
        pagination_exhausted=pagination_exhausted, matched_entity_id=rail_entity_id, now=now,
        detail={"by": operator, "evidence": evidence, "credential": credential or "none: name as typed"},
    )  # fmt: skip
    event = Event.OPERATOR_RESOLVED_APPLIED if applied else Event.OPERATOR_RESOLVED_NOT_APPLIED
    fields: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None, "reason_code": None}
    if applied:
        fields["rail_entity_id"] = rail_entity_id
    return intents.transition(
        conn, intent.merchant_id, intent.sik, event, now=now, actor=operator,
        detail={"evidence": evidence, "pages_scanned": pages_scanned,
                "credential": credential or "none: name as typed"}, expect_attempt_seq=intent.attempt_seq,
        set_fields=fields,
    )  # fmt: skip
