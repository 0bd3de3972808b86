"""G1 scope: the tool is granted, the caller is the mandate's agent and merchant, the mandate is in force.

With a task binding (SPEC §10), G1 also refuses an untrusted task (bad signature, unknown signer, expired,
malformed), a missing one the mandate requires, and a tool the task does not grant (gate_workers.task_binding).
A call whose text (narration, description, notes) breaks the grant's free_text is refused (gate_workers.free_text).
A mandate whose rail account is not the one the credentials reach is refused (ADR 0021).

Signatures are checked when the mandate is loaded (INTERLOCK_MANDATE_PUBKEYS): an unsigned or
badly signed mandate never reaches a gate. Read-only tools need only this check, which the
ingress runs itself through the same function (interlock.scope).
"""

from __future__ import annotations

from gate_workers.context import GateContext, ResolvedAction
from gate_workers.free_text import free_text_refusal
from gate_workers.payout_value import payee_listed
from gate_workers.task_binding import task_scope
from interlock.messages import Verdict
from interlock.rail_account import RAIL_ACCOUNT_MISMATCH, account_problem
from interlock.scope import check_scope
from interlock.tools import PAYOUT_TOOL
from interlock.verdicts import GateResult, block

NAME = "G1"


def check(action: ResolvedAction, ctx: GateContext) -> GateResult:
    scope = check_scope(ctx.mandate, action.tool, action.agent_id, action.merchant_id, ctx.now_ms)
    if scope.verdict is not Verdict.ALLOW or ctx.mandate is None:
        return scope
    # ADR 0021: the credentials reach one rail account; a mandate for another account moves nothing with them.
    wrong_account = account_problem(ctx.mandate, ctx.rail_account_id)
    if wrong_account is not None:
        return block(RAIL_ACCOUNT_MISMATCH, **wrong_account)
    listed = payee_listed(action, ctx) if action.tool == PAYOUT_TOOL else None
    return task_scope(action, ctx.mandate) or free_text_refusal(action, ctx, listed=listed) or scope
