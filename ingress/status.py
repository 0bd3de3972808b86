"""interlock_status: the state of an earlier money call, read from the ledger (read-only), scoped to the
caller's merchant, in the same structured content as a money call (SPEC §10) with replayed=true.

An unknown sik or operation_ref is a successful call whose state is NOT_FOUND: the question was well
formed and the answer is "nothing recorded". Its caller_action is RETRY_SAME_CALL, because the usual
reason is a proposal that never reached the ledger, and repeating the original call is safe.

An APPLIED intent also shows `rail_status`, what the rail has said of the money since (ledger/lifecycle.py): a
refund pending, processed or failed at the bank, a settlement initiated, processed, partially processed or
reversed, a payout queued, processing, processed, reversed, failed or cancelled. When that needs a person (a failed
refund, a reversed settlement, a payout that did not reach its payee), caller_action is ESCALATE_TO_OPERATOR: a new
refund or payout after a failed one is a new business action, never a retry of this one.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

from mcp_types import CallToolResult

from ingress import results
from ingress.app import Caller, Ingress
from interlock.arguments import parse_status_query
from interlock.errors import InvalidInput, LedgerError
from interlock.messages import CallerAction, IntentTerms, Outcome, caller_action_for
from ledger import lifecycle
from ledger.db import open_ledger
from ledger.intents import get_intent, sik_for_operation_ref

logger = logging.getLogger(__name__)


async def call_status(ingress: Ingress, caller: Caller, arguments: dict[str, Any]) -> CallToolResult:
    try:
        sik, operation_ref = parse_status_query(arguments)
    except InvalidInput as exc:
        return results.invalid_input(exc)
    if caller.merchant_id is None:
        return results.error(
            "NO_MANDATE",
            f"no mandate is configured for agent {caller.agent_id!r}; an operator must add one",
            CallerAction.ESCALATE_TO_OPERATOR,
        )
    # The caller's merchant's shard: its intents are in that ledger and in no other (SPEC §15).
    path = ingress.route(caller.merchant_id).ledger
    if path is None:
        return results.error("LEDGER_NOT_CONFIGURED", "INTERLOCK_LEDGER is not set on the ingress",
                             CallerAction.ESCALATE_TO_OPERATOR)  # fmt: skip
    try:
        found = await ingress.blocking(_lookup, path, caller.merchant_id, sik, operation_ref)
    except (LedgerError, sqlite3.Error) as exc:
        logger.warning("interlock_status cannot read the ledger: %s", exc)
        return results.error("LEDGER_UNAVAILABLE", f"the ledger cannot be read right now: {exc}",
                             CallerAction.RETRY_SAME_CALL)  # fmt: skip
    return results.success(found)


def _lookup(path: Path, merchant_id: str, sik: str | None, operation_ref: str | None) -> dict[str, Any]:
    conn = open_ledger(path, readonly=True)
    try:
        if sik is None:
            assert operation_ref is not None  # parse_status_query guarantees exactly one
            sik = sik_for_operation_ref(conn, merchant_id, operation_ref)
        intent = None if sik is None else get_intent(conn, merchant_id, sik)
        followed = None if intent is None else lifecycle.current(conn, merchant_id, intent.sik)
    finally:
        conn.close()
    if intent is None:
        return {
            "state": "NOT_FOUND",
            "sik": sik,
            "intent": None,
            "rail_entity_id": None,
            "reason_code": results.STATUS_NOT_FOUND,
            "caller_action": CallerAction.RETRY_SAME_CALL.value,
            "replayed": False,
        }
    state = intent.state.value
    body = Outcome(
        state=state,
        sik=intent.sik,
        intent=IntentTerms(**intent.terms()),
        rail_entity_id=intent.rail_entity_id,
        reason_code=intent.reason_code,
        caller_action=caller_action_for(state),
        replayed=True,
    ).structured()
    if followed is not None:
        # What the rail says has become of the money since it accepted the call (issue 27): a refund the bank failed
        # or a settlement reversed is still APPLIED, and a person decides what follows, never an automatic retry.
        body["rail_status"] = followed.view()
        if followed.attention is not None:
            body["caller_action"] = CallerAction.ESCALATE_TO_OPERATOR.value
    if intent.task_id is not None:  # the harness-signed task the call was bound to (SPEC §10)
        body["task"] = {"task_id": intent.task_id, "task_digest": intent.task_digest}
    return body
