"""G1 scope: the tool is granted, the caller is the mandate's agent and merchant, the mandate is in force.

Signatures are checked when the mandate is loaded (INTERLOCK_MANDATE_PUBKEYS): an unsigned or
badly signed mandate never reaches a gate. Read-only tools need only this check, which the
ingress runs itself through the same function (interlock.scope).
"""

from __future__ import annotations

from gate_workers.context import GateContext, ResolvedAction
from interlock.scope import check_scope
from interlock.verdicts import GateResult

NAME = "G1"


def check(action: ResolvedAction, ctx: GateContext) -> GateResult:
    return check_scope(ctx.mandate, action.tool, action.agent_id, action.merchant_id, ctx.now_ms)
