"""Payees an approver added to a mandate's allow-list (ADR 0034): read by G2 and by a hold's release, written with
their PAYEE_ALLOWED audit record in the transaction that releases the held call.

An amendment is bound to the mandate version it amends (merchant, agent, mandate_hash): a replaced mandate — any
other hash — finds none, so a person who signs a new mandate lists the payee there or it is unlisted again.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from ledger import audit
from ledger.db import require_transaction

PAYEE_ALLOWED = "PAYEE_ALLOWED"


@dataclass(frozen=True, slots=True)
class MandateVersion:
    """Whose allow-list an amendment extends: one agent's mandate of one merchant, as hashed."""

    merchant_id: str
    agent_id: str
    mandate_hash: str


def allowed_fund_accounts(conn: sqlite3.Connection, version: MandateVersion) -> frozenset[str]:
    """The fund accounts approvers added to *version*'s payees."""
    try:
        rows = conn.execute(
            "SELECT fund_account_id FROM payee_amendments WHERE merchant_id = ? AND agent_id = ? AND mandate_hash = ?",
            (version.merchant_id, version.agent_id, version.mandate_hash),
        ).fetchall()
    except sqlite3.OperationalError as exc:
        # A read-only reader of a ledger no rail worker of this version has opened yet: the table is not there, so
        # nothing was ever added to it.
        if "no such table" in str(exc):
            return frozenset()
        raise
    return frozenset(str(r[0]) for r in rows)


def allow_payee(
    conn: sqlite3.Connection, version: MandateVersion, *, fund_account_id: str, contact_id: str, payee: dict[str, Any],
    payee_digest: str, approver: str, credential: str, sik: str, now: int,
) -> int | None:  # fmt: skip
    """Add *fund_account_id* to *version*'s payees, with a PAYEE_ALLOWED audit record naming who, the fund account as
    they were shown it, and the mandate it amends; returns the record's seq, or None when it was added already (by
    another held call's release): nothing is written twice."""
    require_transaction(conn)
    if fund_account_id in allowed_fund_accounts(conn, version):
        return None
    seq = audit.append(conn, PAYEE_ALLOWED, {
        "merchant_id": version.merchant_id, "agent_id": version.agent_id, "mandate_hash": version.mandate_hash,
        "fund_account_id": fund_account_id, "contact_id": contact_id, "payee": payee, "payee_digest": payee_digest,
        "approver": approver, "credential": credential, "sik": sik,
    }, now)  # fmt: skip
    conn.execute(
        """INSERT INTO payee_amendments (merchant_id, agent_id, mandate_hash, fund_account_id, contact_id, payee_digest,
                                         approver_id, credential, sik, audit_seq, allowed_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        (version.merchant_id, version.agent_id, version.mandate_hash, fund_account_id, contact_id, payee_digest,
         approver, credential, sik, seq, now),
    )  # fmt: skip
    return seq


def shown_at_hold(conn: sqlite3.Connection, merchant_id: str, sik: str) -> dict[str, Any] | None:
    """The payee of a held payout as G2 read it from the rail when it held the call: its last HOLD decision's G2
    detail (`payee`, `payee_digest`, and the reason it was held); None when no such decision names one."""
    rows = conn.execute("SELECT results_json FROM decisions WHERE merchant_id = ? AND sik = ? AND verdict = 'HOLD' "
                        "ORDER BY decided_at DESC, rowid DESC LIMIT 1", (merchant_id, sik)).fetchall()  # fmt: skip
    for (results_json,) in rows:
        for result in json.loads(results_json):
            detail = result.get("detail") or {}
            if result.get("gate") == "G2" and isinstance(detail.get("payee"), dict):
                return {"payee": detail["payee"], "payee_digest": detail.get("payee_digest"),
                        "reason_code": result.get("reason_code")}  # fmt: skip
    return None
