"""Intents, attempts, decisions, findings and operation_ref bindings.

Every function here takes an open connection inside `transaction(conn)` and composes into the
caller's transaction: a state change and its audit row commit together or not at all.
`transition()` is the only code that assigns `intents.state`.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from interlock.canonical import canonical_json, sha256_hex
from interlock.errors import IllegalTransition, IntentNotFound, KeyConflict, StaleLease
from interlock.messages import Verdict
from interlock.notes import MERCHANT_STAMP_KEY
from interlock.terms import terms_mismatch
from interlock.verdicts import GateResult
from ledger import audit, sightings
from ledger.db import require_transaction
from ledger.states import OPERATOR_EVENTS, REAUTHORIZING_EVENTS, TRANSITIONS, Event, State, next_state

# Columns transition() may set alongside a state change. attempt_seq moves only in start_attempt(). Each
# TRANSITION record carries what it set under "set", so a bundle's rows can be checked field by field (ADR 0020).
SETTABLE = frozenset({
    "rail_entity_id", "reason_code", "lease_owner", "lease_epoch", "lease_expires_at", "hold_expires_at",
    "mandate_id", "mandate_hash",
    # A not-applied payout reopened or held again is sent as its repeat was judged (ADR 0028): only REOPENED and a
    # repeat's GATES_HELD set them (reopened_params), its fund account too — the same payee's other account.
    "params_json", "params_hash", "subject_id",
})  # fmt: skip

# What an attempt row says when the rail answered it with our stamp: the attempt's own APPLIED, or the
# answer a superseded worker could only keep as evidence (rail_worker.execute.record_fenced).
APPLIED_OUTCOMES = ("APPLIED", "FENCED_APPLIED")
# An answer that carried our stamp but not our terms (ADR 0016): evidence for a person, never of an apply.
MISMATCH_OUTCOMES = ("TERMS_MISMATCH", "FENCED_TERMS_MISMATCH")


@dataclass(frozen=True, slots=True)
class Intent:
    merchant_id: str
    sik: str
    tool: str
    subject_id: str
    amount_minor: int
    currency: str
    params_hash: str
    params: dict[str, Any]
    state: State
    attempt_seq: int
    reconcile_attempts: int
    lease_owner: str | None
    lease_epoch: int | None
    lease_expires_at: int | None
    rail_entity_id: str | None
    reason_code: str | None
    agent_id: str
    mandate_id: str
    mandate_hash: str
    operation_ref: str | None
    distinct_reason: str | None
    hold_expires_at: int | None
    authorized_at: int | None
    first_seen_at: int
    updated_at: int
    task_id: str | None = None
    task_digest: str | None = None
    task_ceiling_minor: int | None = None
    task_signer: str | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Intent:
        data = dict(row)
        data["params"] = json.loads(data.pop("params_json"))
        data["state"] = State(data["state"])
        return cls(**data)

    def terms(self) -> dict[str, Any]:
        return {
            "merchant_id": self.merchant_id,
            "tool": self.tool,
            "subject": self.subject_id,
            "amount_minor": self.amount_minor,
            "currency": self.currency,
        }

    @property
    def full_balance(self) -> bool:
        """A settle-full-balance settlement: its amount_minor is the balance read it was admitted with."""
        return bool(self.params.get("full"))

    def mismatch(self, raw: dict[str, Any]) -> dict[str, Any] | None:
        """None when the stamped entity *raw* is what this intent asked for; else both sets of terms (ADR 0016)."""
        return terms_mismatch(self.tool, self.terms(), raw, full_balance=self.full_balance)


def get_intent(conn: sqlite3.Connection, merchant_id: str, sik: str) -> Intent | None:
    row = conn.execute("SELECT * FROM intents WHERE merchant_id = ? AND sik = ?", (merchant_id, sik)).fetchone()
    return Intent.from_row(row) if row else None


def require_intent(conn: sqlite3.Connection, merchant_id: str, sik: str) -> Intent:
    intent = get_intent(conn, merchant_id, sik)
    if intent is None:
        raise IntentNotFound(merchant_id, sik)
    return intent


def insert_intent(
    conn: sqlite3.Connection,
    *,
    merchant_id: str,
    sik: str,
    tool: str,
    subject_id: str,
    amount_minor: int,
    currency: str,
    params: dict[str, Any],
    params_hash: str,
    agent_id: str,
    mandate_id: str,
    mandate_hash: str,
    operation_ref: str | None,
    distinct_reason: str | None,
    now: int,
    task_id: str | None = None,
    task_digest: str | None = None,
    task_ceiling_minor: int | None = None,
    task_signer: str | None = None,
) -> Intent | None:
    """Insert a PROPOSED intent. Returns None when (merchant_id, sik) already exists (I1: the PK decides)."""
    require_transaction(conn)
    params_json = canonical_json(params).decode("utf-8")
    cur = conn.execute(
        """INSERT INTO intents (merchant_id, sik, tool, subject_id, amount_minor, currency, params_hash, params_json,
                                state, agent_id, mandate_id, mandate_hash, operation_ref, distinct_reason,
                                first_seen_at, updated_at, task_id, task_digest, task_ceiling_minor, task_signer)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'PROPOSED', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (merchant_id, sik) DO NOTHING""",
        (
            merchant_id, sik, tool, subject_id, amount_minor, currency, params_hash, params_json, agent_id,
            mandate_id, mandate_hash, operation_ref, distinct_reason, now, now, task_id, task_digest,
            task_ceiling_minor, task_signer,
        ),
    )  # fmt: skip
    if cur.rowcount == 0:
        return None
    payload: dict[str, Any] = {
        "merchant_id": merchant_id, "sik": sik, "tool": tool, "subject": subject_id,
        "amount_minor": amount_minor, "currency": currency, "agent_id": agent_id,
        "mandate_hash": mandate_hash, "operation_ref": operation_ref, "distinct_reason": distinct_reason,
        "mandate_id": mandate_id, "params_hash": params_hash, "params_sha256": sha256_hex(params_json),
    }  # fmt: skip
    if task_id is not None:  # only then: the records of calls without a task keep their shape
        payload.update(task_id=task_id, task_digest=task_digest, task_ceiling_minor=task_ceiling_minor)
        if task_signer is not None:  # v2 tasks: the ceiling's key is (task_signer, task_id)
            payload["task_signer"] = task_signer
    audit.append(conn, "INTENT_PROPOSED", payload, now)
    return require_intent(conn, merchant_id, sik)


def transition(
    conn: sqlite3.Connection,
    merchant_id: str,
    sik: str,
    event: Event,
    *,
    now: int,
    detail: dict[str, Any] | None = None,
    actor: str | None = None,
    expect_epoch: int | None = None,
    expect_attempt_seq: int | None = None,
    set_fields: dict[str, Any] | None = None,
    reasserted: GateResult | None = None,
) -> Intent:
    """Apply *event* to the intent, append its audit row, and return the updated intent.

    Raises IllegalTransition for an edge not in TRANSITIONS and StaleLease when the caller's
    (lease_epoch, attempt_seq) fence no longer matches the row: a superseded worker's write is refused.
    A re-entry into AUTHORIZED (HOLD_RELEASED, RETRY_AUTHORIZED, REOPENED) needs *reasserted*: the ALLOW of
    `ledger.limits.reassert` made in this same transaction, so no window, range or mandate check is skipped.
    """
    if event is Event.ATTEMPT_STARTED:
        raise IllegalTransition(sik, "?", "ATTEMPT_STARTED outside start_attempt()")
    if event in REAUTHORIZING_EVENTS:
        if reasserted is None or reasserted.verdict is not Verdict.ALLOW:
            why = f"{event} without a re-assertion of the mandate and limits that allowed it"
            raise IllegalTransition(sik, "?", why)
        detail = {**(detail or {}), "reasserted": reasserted.reason_code}
    return _apply(conn, merchant_id, sik, event, now=now, detail=detail, actor=actor, expect_epoch=expect_epoch,
                  expect_attempt_seq=expect_attempt_seq, set_fields=set_fields)  # fmt: skip


def _apply(
    conn: sqlite3.Connection,
    merchant_id: str,
    sik: str,
    event: Event,
    *,
    now: int,
    detail: dict[str, Any] | None,
    actor: str | None,
    expect_epoch: int | None,
    expect_attempt_seq: int | None,
    set_fields: dict[str, Any] | None,
    bump_attempt: bool = False,
    bump_reconcile: bool = False,
    recorded: dict[str, Any] | None = None,
) -> Intent:
    require_transaction(conn)
    intent = require_intent(conn, merchant_id, sik)
    target = next_state(intent.state, event)
    if target is None:
        raise IllegalTransition(sik, intent.state, event)
    if event in OPERATOR_EVENTS and (not actor or not (detail or {}).get("evidence")):
        raise IllegalTransition(sik, intent.state, f"{event} without an operator and evidence text")
    if expect_epoch is not None and intent.lease_epoch != expect_epoch:
        raise StaleLease(sik, f"lease epoch is {intent.lease_epoch}, writer holds {expect_epoch}")
    if expect_attempt_seq is not None and intent.attempt_seq != expect_attempt_seq:
        raise StaleLease(sik, f"attempt_seq is {intent.attempt_seq}, writer holds {expect_attempt_seq}")
    fields = dict(set_fields or {})
    unknown = set(fields) - SETTABLE
    if unknown:
        raise ValueError(f"transition() cannot set {sorted(unknown)}")
    # state, updated_at, authorized_at, attempt_seq and reconcile_attempts follow from the record itself.
    recorded_set = dict(fields)
    fields["state"] = target.value
    fields["updated_at"] = now
    if target is State.AUTHORIZED:
        # Limits count an intent from its last authorisation, so reopening an old intent or releasing an
        # old hold counts in today's window, not in the window it was first proposed in.
        fields["authorized_at"] = now
    assignments = ", ".join(f"{name} = ?" for name in fields)
    if bump_attempt:
        assignments += ", attempt_seq = attempt_seq + 1"
    if bump_reconcile:
        assignments += ", reconcile_attempts = reconcile_attempts + 1"
    # The WHERE on the old state and attempt_seq makes the write conditional on what we read.
    cur = conn.execute(
        f"UPDATE intents SET {assignments} WHERE merchant_id = ? AND sik = ? AND state = ? AND attempt_seq = ?",
        (*fields.values(), merchant_id, sik, intent.state.value, intent.attempt_seq),
    )
    if cur.rowcount != 1:
        raise StaleLease(sik, "row changed underneath the transition")
    payload: dict[str, Any] = {
        "merchant_id": merchant_id,
        "sik": sik,
        "event": event.value,
        "from": intent.state.value,
        "to": target.value,
        "attempt_seq": intent.attempt_seq + (1 if bump_attempt else 0),
    }
    if actor:
        payload["actor"] = actor
    if detail:
        payload["detail"] = detail
    if "rail_entity_id" in fields:
        payload["rail_entity_id"] = fields["rail_entity_id"]
    payload["set"] = recorded_set  # always, even empty: a record without it is from before ADR 0020
    payload.update(recorded or {})
    audit.append(conn, "TRANSITION", payload, now)
    return require_intent(conn, merchant_id, sik)


# Attempts the rail answered with a refusal: a first attempt's (REJECTED), or a retry's (REJECTED_AFTER_RETRY,
# reconciled by stamp before anyone trusts it). RazorpayX keeps the first answer to a payout key, refusals too.
REFUSED_OUTCOMES = ("REJECTED", "REJECTED_AFTER_RETRY")


def reopened_params(params: dict[str, Any], params_hash: str) -> dict[str, str]:
    """The set_fields of a REOPENED that sends *params* from now on (a payout: its mode, account, queueing rule)."""
    return {"params_json": canonical_json(params).decode("utf-8"), "params_hash": params_hash}


def refused_attempts(conn: sqlite3.Connection, merchant_id: str, sik: str) -> int:
    """How many of the intent's attempts the rail refused (REFUSED_OUTCOMES): the keys they were sent under hold
    that refusal, so a payout's next attempt after each is sent under a key of its own (ADR 0028)."""
    row = conn.execute("SELECT COUNT(*) FROM intent_attempts WHERE merchant_id = ? AND sik = ? AND outcome IN (?, ?)",
                       (merchant_id, sik, *REFUSED_OUTCOMES)).fetchone()  # fmt: skip
    return int(row[0])


def sent_without_owner(conn: sqlite3.Connection, merchant_id: str, sik: str) -> bool:
    """True when the intent's first attempt went out without the owner stamp (sent before owners were stamped):
    its retries must send that same body, so they go without it too (SPEC §14: same key, other body is a 400)."""
    row = conn.execute("SELECT request_json FROM intent_attempts WHERE merchant_id = ? AND sik = ? "
                       "ORDER BY attempt_seq LIMIT 1", (merchant_id, sik)).fetchone()  # fmt: skip
    if row is None or not row["request_json"]:
        return False
    notes = json.loads(row["request_json"]).get("notes")
    return not (isinstance(notes, dict) and MERCHANT_STAMP_KEY in notes)


def start_attempt(
    conn: sqlite3.Connection,
    merchant_id: str,
    sik: str,
    *,
    now: int,
    lease_owner: str,
    lease_epoch: int,
    lease_expires_at: int,
    request: dict[str, Any],
) -> Intent:
    """AUTHORIZED -> IN_FLIGHT with attempt_seq + 1 and a fresh attempt row (I5). The caller commits
    this transaction before any byte goes to the rail (I2)."""
    request_json = canonical_json(request).decode("utf-8")
    intent = _apply(
        conn, merchant_id, sik, Event.ATTEMPT_STARTED, now=now, detail=None, actor=lease_owner,
        expect_epoch=None, expect_attempt_seq=None, bump_attempt=True,
        set_fields={"lease_owner": lease_owner, "lease_epoch": lease_epoch, "lease_expires_at": lease_expires_at},
        recorded={"request_sha256": sha256_hex(request_json)},
    )  # fmt: skip
    conn.execute(
        """INSERT INTO intent_attempts (merchant_id, sik, attempt_seq, lease_epoch, lease_expires_at, started_at,
                                        request_json)
           VALUES (?, ?, ?, ?, ?, ?, ?)""",
        (merchant_id, sik, intent.attempt_seq, lease_epoch, lease_expires_at, now, request_json),
    )  # fmt: skip
    return intent


def applied_evidence(conn: sqlite3.Connection, merchant_id: str, sik: str) -> tuple[int, str] | None:
    """(attempt_seq, rail entity id) of the first attempt the rail answered with our stamp, or None.

    Evidence of an apply is never outvoted by a later "absent" from a list read (ADR 0005): whoever is
    about to send again or to conclude "not applied" asks this first."""
    row = conn.execute(
        f"""SELECT attempt_seq, rail_entity_id FROM intent_attempts
            WHERE merchant_id = ? AND sik = ? AND rail_entity_id IS NOT NULL
              AND outcome IN ({", ".join("?" for _ in APPLIED_OUTCOMES)})
            ORDER BY attempt_seq LIMIT 1""",
        (merchant_id, sik, *APPLIED_OUTCOMES),
    ).fetchone()
    return None if row is None else (int(row["attempt_seq"]), str(row["rail_entity_id"]))


def settle_from_evidence(conn: sqlite3.Connection, merchant_id: str, sik: str, *, now: int,
                         actor: str) -> Intent | None:  # fmt: skip
    """Settle the intent on what an attempt row kept of the rail's answer, or on a stamped entity a signed webhook
    showed (a sighting, ADR 0027), where its state allows it (not IN_FLIGHT: that attempt's own answer is pending;
    not QUARANTINED: a person decides).

    A stamped entity whose terms are the intent's → EARLIER_ATTEMPT_APPLIED (an attempt's answer) or WEBHOOK_APPLIED
    (a sighting, once an attempt has been started: before one, no entity of ours can exist) → APPLIED. A stamped
    entity with other terms, and none with ours → TERMS_MISMATCH → QUARANTINED, both sets of terms on the audit
    record (ADR 0016). The terms are judged again here from the kept answer, so a row recorded APPLIED before the
    check existed is judged by it too (a row that kept no answer is taken at its word). Returns the settled intent,
    or None when there is no such evidence or the state does not allow acting on it."""
    require_transaction(conn)
    intent = require_intent(conn, merchant_id, sik)
    if intent.state not in _EVIDENCE_SETTLES:
        return None  # the common case (a first attempt) costs one read of the row
    rows = conn.execute(
        f"""SELECT attempt_seq, rail_entity_id, outcome, response_json FROM intent_attempts
            WHERE merchant_id = ? AND sik = ? AND rail_entity_id IS NOT NULL
              AND outcome IN ({", ".join("?" for _ in APPLIED_OUTCOMES + MISMATCH_OUTCOMES)})
            ORDER BY attempt_seq""",
        (merchant_id, sik, *APPLIED_OUTCOMES, *MISMATCH_OUTCOMES),
    ).fetchall()
    applied: tuple[int, str] | None = None
    mismatched: dict[str, Any] | None = None
    for row in rows:
        raw = json.loads(row["response_json"]) if row["response_json"] else None
        differs = intent.mismatch(raw) if isinstance(raw, dict) else None
        if row["outcome"] in MISMATCH_OUTCOMES and differs is None:
            differs = {"outcome": row["outcome"]}  # kept as a mismatch, whatever the kept answer now says
        if differs is None:
            applied = applied or (int(row["attempt_seq"]), str(row["rail_entity_id"]))
        elif mismatched is None:
            mismatched = {"evidence_attempt_seq": int(row["attempt_seq"]), "rail_entity_id": row["rail_entity_id"],
                          **differs}  # fmt: skip
    if applied is not None and next_state(intent.state, Event.EARLIER_ATTEMPT_APPLIED) is not None:
        attempt_seq, entity_id = applied
        return _apply(
            conn, merchant_id, sik, Event.EARLIER_ATTEMPT_APPLIED, now=now, actor=actor,
            detail={"evidence_attempt_seq": attempt_seq}, expect_epoch=None, expect_attempt_seq=None,
            set_fields={"rail_entity_id": entity_id, "reason_code": None, "lease_owner": None,
                        "lease_expires_at": None},
        )  # fmt: skip
    seen: sightings.Sighting | None = None
    for sighting in sightings.for_intent(conn, merchant_id, sik) if intent.attempt_seq > 0 else ():
        differs = intent.mismatch(sighting.entity)
        if differs is None:
            seen = seen or sighting
        elif mismatched is None:
            mismatched = {"evidence_source": sighting.source, "evidence_ref": sighting.ref,
                          "rail_entity_id": sighting.entity_id, **differs}  # fmt: skip
    if applied is None and seen is not None and next_state(intent.state, Event.WEBHOOK_APPLIED) is not None:
        return _apply(
            conn, merchant_id, sik, Event.WEBHOOK_APPLIED, now=now, actor=actor,
            detail={"evidence_source": seen.source, "evidence_ref": seen.ref, "event": seen.event,
                    "status": seen.status},
            expect_epoch=None, expect_attempt_seq=None,
            set_fields={"rail_entity_id": seen.entity_id, "reason_code": None, "lease_owner": None,
                        "lease_expires_at": None},
        )  # fmt: skip
    if (applied is None and seen is None and mismatched is not None
            and next_state(intent.state, Event.TERMS_MISMATCH) is not None):  # fmt: skip
        return _apply(
            conn, merchant_id, sik, Event.TERMS_MISMATCH, now=now, actor=actor, detail=mismatched,
            expect_epoch=None, expect_attempt_seq=None,
            set_fields={"reason_code": "RAIL_TERMS_MISMATCH", "lease_owner": None, "lease_expires_at": None},
        )  # fmt: skip
    return None


# The states kept evidence may settle: those EARLIER_ATTEMPT_APPLIED, WEBHOOK_APPLIED or TERMS_MISMATCH leave,
# except IN_FLIGHT (its attempt's own answer is pending, and that is fenced).
_EVIDENCE_SETTLES = frozenset(
    state for (state, event) in TRANSITIONS
    if event in (Event.EARLIER_ATTEMPT_APPLIED, Event.WEBHOOK_APPLIED, Event.TERMS_MISMATCH)
) - {State.IN_FLIGHT}  # fmt: skip


def abandon_after(conn: sqlite3.Connection, intent: Intent, call_deadline_ms: int, clock_skew_ms: int) -> int:
    """The earliest instant, on the caller's clock, anyone may treat the intent's current attempt as abandoned: its
    own IN_FLIGHT lease plus the call's total deadline (ADR 0005). A send is allowed only while the row's lease
    outlives it by the deadline, so by then the request has either left and ended, or never left. The lease is a
    reading of the worker's clock; the caller (a standby's boot, a reconciler) reads its own, which may run up to
    *clock_skew_ms* ahead (INTERLOCK_CLOCK_SKEW_MS), so that is waited too (finding F7, ADR 0032)."""
    lease_until = attempt_lease_expires_at(conn, intent.merchant_id, intent.sik, intent.attempt_seq)
    if lease_until is None:  # an attempt row from before the column existed: the row's own lease
        lease_until = intent.lease_expires_at or intent.updated_at
    return lease_until + call_deadline_ms + clock_skew_ms


def attempt_lease_expires_at(conn: sqlite3.Connection, merchant_id: str, sik: str, attempt_seq: int) -> int | None:
    """The IN_FLIGHT lease the attempt was started under: no one may treat it as abandoned before this
    (plus the call's deadline), whatever has since been written on the intent row."""
    row = conn.execute(
        "SELECT lease_expires_at FROM intent_attempts WHERE merchant_id = ? AND sik = ? AND attempt_seq = ?",
        (merchant_id, sik, attempt_seq),
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def finish_attempt(
    conn: sqlite3.Connection,
    merchant_id: str,
    sik: str,
    attempt_seq: int,
    *,
    now: int,
    outcome: str,
    rail_entity_id: str | None = None,
    http_status: int | None = None,
    fee_minor: int | None = None,
    tax_minor: int | None = None,
    error_code: str | None = None,
    response: Any = None,
    sent_at: int | None = None,
) -> None:
    """Write the rail's answer on the attempt row, once, with an ATTEMPT_FINISHED record of every field it set
    (ADR 0020). An attempt that already has its answer is left as it is."""
    require_transaction(conn)
    response_json = None if response is None else json.dumps(response, sort_keys=True, default=str)
    cur = conn.execute(
        """UPDATE intent_attempts SET finished_at = ?, outcome = ?, rail_entity_id = ?, http_status = ?,
                  fee_minor = ?, tax_minor = ?, error_code = ?, response_json = ?, sent_at = ?
           WHERE merchant_id = ? AND sik = ? AND attempt_seq = ? AND finished_at IS NULL""",
        (
            now, outcome, rail_entity_id, http_status, fee_minor, tax_minor, error_code, response_json, sent_at,
            merchant_id, sik, attempt_seq,
        ),
    )  # fmt: skip
    if cur.rowcount == 1:
        audit.append(conn, "ATTEMPT_FINISHED", {
            "merchant_id": merchant_id, "sik": sik, "attempt_seq": attempt_seq, "outcome": outcome,
            "rail_entity_id": rail_entity_id, "http_status": http_status, "fee_minor": fee_minor,
            "tax_minor": tax_minor, "error_code": error_code, "sent_at": sent_at,
            "response_sha256": None if response_json is None else sha256_hex(response_json),
        }, now)  # fmt: skip


def begin_reconcile(
    conn: sqlite3.Connection, merchant_id: str, sik: str, *, now: int, owner: str, lease_expires_at: int
) -> Intent:
    """UNKNOWN -> RECONCILING under a per-intent lease; counts the pass."""
    return _apply(
        conn, merchant_id, sik, Event.RECONCILE_STARTED, now=now, detail=None, actor=owner, expect_epoch=None,
        expect_attempt_seq=None, set_fields={"lease_owner": owner, "lease_expires_at": lease_expires_at},
        bump_reconcile=True,
    )  # fmt: skip


def record_decision(
    conn: sqlite3.Connection,
    *,
    request_id: str,
    merchant_id: str,
    sik: str,
    agent_id: str,
    mandate_hash: str,
    verdict: str,
    reason_code: str,
    results: list[dict[str, Any]],
    now: int,
    task_id: str | None = None,
    task_digest: str | None = None,
    task_signer: str | None = None,
) -> bool:
    """Record a gate decision once per request_id; False when this request was already decided
    (a redelivered Decision). Race-free because the caller holds BEGIN IMMEDIATE."""
    require_transaction(conn)
    if decision_exists(conn, request_id):
        return False
    payload: dict[str, Any] = {
        "request_id": request_id, "merchant_id": merchant_id, "sik": sik, "agent_id": agent_id, "verdict": verdict,
        "reason_code": reason_code, "mandate_hash": mandate_hash, "results": results,
    }  # fmt: skip
    if task_id is not None:  # the task this call was bound to (SPEC §10); absent otherwise
        payload.update(task_id=task_id, task_digest=task_digest)
        if task_signer is not None:
            payload["task_signer"] = task_signer
    seq = audit.append(conn, "DECISION", payload, now)
    conn.execute(
        """INSERT INTO decisions (request_id, merchant_id, sik, agent_id, mandate_hash, verdict, reason_code,
                                  results_json, decided_at, audit_seq, task_id, task_digest, task_signer)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        (request_id, merchant_id, sik, agent_id, mandate_hash, verdict, reason_code,
         canonical_json(results).decode("utf-8"), now, seq, task_id, task_digest, task_signer),
    )  # fmt: skip
    return True


def decision_exists(conn: sqlite3.Connection, request_id: str) -> bool:
    return conn.execute("SELECT 1 FROM decisions WHERE request_id = ?", (request_id,)).fetchone() is not None


@dataclass(frozen=True)
class RecordedDecision:
    """What admission recorded for a request: the first Decision of it that reached the ledger."""

    merchant_id: str
    sik: str | None  # None: the call never resolved to a key
    verdict: str
    reason_code: str


def recorded_decision(conn: sqlite3.Connection, request_id: str) -> RecordedDecision | None:
    row = conn.execute("SELECT merchant_id, sik, verdict, reason_code FROM decisions WHERE request_id = ?",
                       (request_id,)).fetchone()  # fmt: skip
    if row is None:
        return None
    return RecordedDecision(str(row[0]), str(row[1]) or None, str(row[2]), str(row[3]))


def record_finding(
    conn: sqlite3.Connection,
    *,
    merchant_id: str,
    sik: str,
    attempt_seq: int,
    outcome: str,
    pages_scanned: int,
    pagination_exhausted: bool,
    matched_entity_id: str | None,
    now: int,
    detail: dict[str, Any] | None = None,
) -> int:
    require_transaction(conn)
    cur = conn.execute(
        """INSERT INTO recon_findings (merchant_id, sik, attempt_seq, outcome, pages_scanned, pagination_exhausted,
                                       matched_entity_id, queried_at, detail_json)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        (merchant_id, sik, attempt_seq, outcome, pages_scanned, 1 if pagination_exhausted else 0,
         matched_entity_id, now, canonical_json(detail or {}).decode("utf-8")),
    )  # fmt: skip
    audit.append(
        conn,
        "RECON_FINDING",
        {"merchant_id": merchant_id, "sik": sik, "attempt_seq": attempt_seq, "outcome": outcome,
         "pages_scanned": pages_scanned, "pagination_exhausted": pagination_exhausted,
         "matched_entity_id": matched_entity_id, "detail": detail or {}},
        now,
    )  # fmt: skip
    return int(cur.lastrowid or 0)


def bind_operation_ref(conn: sqlite3.Connection, merchant_id: str, operation_ref: str, sik: str, *, now: int) -> None:
    """Bind operation_ref to sik on first use; a later use for another sik raises KeyConflict."""
    require_transaction(conn)
    row = conn.execute(
        "SELECT sik FROM operation_refs WHERE merchant_id = ? AND operation_ref = ?", (merchant_id, operation_ref)
    ).fetchone()
    if row is not None:
        if row["sik"] != sik:
            raise KeyConflict(operation_ref, row["sik"], sik)
        return
    conn.execute(
        "INSERT INTO operation_refs (merchant_id, operation_ref, sik, bound_at) VALUES (?, ?, ?, ?)",
        (merchant_id, operation_ref, sik, now),
    )
    audit.append(
        conn, "OPERATION_REF_BOUND", {"merchant_id": merchant_id, "operation_ref": operation_ref, "sik": sik}, now
    )


def sik_for_operation_ref(conn: sqlite3.Connection, merchant_id: str, operation_ref: str) -> str | None:
    row = conn.execute(
        "SELECT sik FROM operation_refs WHERE merchant_id = ? AND operation_ref = ?", (merchant_id, operation_ref)
    ).fetchone()
    return None if row is None else str(row["sik"])
