from __future__ import annotations

import sqlite3

from ledger import intents
from ledger.db import transaction


def propose(conn: sqlite3.Connection, sik: str = "A" * 32, *, merchant_id: str = "acc_TEST", amount: int = 1000,
            now: int = 1) -> intents.Intent:
    with transaction(conn):
        intent = intents.insert_intent(
            conn, merchant_id=merchant_id, sik=sik, tool="create_refund", subject_id="pay_TEST0001",
            amount_minor=amount, currency="INR", params={"speed": "normal"}, params_hash="ph", agent_id="agent_t",
            mandate_id="mnd_t", mandate_hash="mh", operation_ref=None, distinct_reason=None, now=now,
        )  # fmt: skip
    assert intent is not None
    return intent


_PATHS = {
    "PROPOSED": [],
    "AUTHORIZED": ["GATES_PASSED"],
    "HELD": ["GATES_HELD"],
    "BLOCKED": ["GATES_HELD", "HOLD_REJECTED"],
    "IN_FLIGHT": ["GATES_PASSED", "ATTEMPT_STARTED"],
    "APPLIED": ["GATES_PASSED", "ATTEMPT_STARTED", "RAIL_APPLIED"],
    "FAILED_TERMINAL": ["GATES_PASSED", "ATTEMPT_STARTED", "RAIL_REJECTED"],
    "UNKNOWN": ["GATES_PASSED", "ATTEMPT_STARTED", "RAIL_AMBIGUOUS"],
    "RECONCILING": ["GATES_PASSED", "ATTEMPT_STARTED", "RAIL_AMBIGUOUS", "RECONCILE_STARTED"],
    "CONFIRMED_NOT_APPLIED": ["GATES_PASSED", "ATTEMPT_STARTED", "RAIL_AMBIGUOUS", "RECONCILE_STARTED",
                              "RECONCILE_CONFIRMED_ABSENT"],
    "QUARANTINED": ["GATES_PASSED", "ATTEMPT_STARTED", "TERMS_MISMATCH"],
}


def put_intent(conn: sqlite3.Connection, sik: str, state: str, *, amount: int, subject: str = "pay_T0001",
               tool: str = "create_refund", merchant_id: str = "acc_DEMO000001", agent_id: str = "agent_demo",
               now: int = 1, currency: str = "INR", params: dict | None = None, task_id: str | None = None,
               task_ceiling_minor: int | None = None, task_signer: str | None = "ticketing") -> intents.Intent:
    """An intent driven through the real transition function into *state* (*task_signer* only with a task_id)."""
    from ledger.states import Event

    with transaction(conn):
        intents.insert_intent(
            conn, merchant_id=merchant_id, sik=sik, tool=tool, subject_id=subject, amount_minor=amount,
            currency=currency, params=params or {"amount": amount}, params_hash="ph", agent_id=agent_id,
            mandate_id="mnd", mandate_hash="mh", operation_ref=None, distinct_reason=None, now=now,
            task_id=task_id, task_digest=None if task_id is None else f"digest-{task_id}",
            task_ceiling_minor=task_ceiling_minor, task_signer=task_signer if task_id is not None else None,
        )  # fmt: skip
        for step in _PATHS[state]:
            if step == "ATTEMPT_STARTED":
                intents.start_attempt(conn, merchant_id, sik, now=now, lease_owner="w", lease_epoch=1,
                                      lease_expires_at=now + 1000, request={})  # fmt: skip
            elif step == "RECONCILE_STARTED":
                intents.begin_reconcile(conn, merchant_id, sik, now=now, owner="r", lease_expires_at=now + 1000)
            else:
                intents.transition(conn, merchant_id, sik, Event(step), now=now)
    return intents.require_intent(conn, merchant_id, sik)
