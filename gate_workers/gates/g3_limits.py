"""G3 limits: sliding windows (calls, minor units per currency) and the fee budget, from a ledger snapshot.

This is the advisory evaluation; the rail worker re-asserts the same check (ledger.limits) inside
the admit transaction, which is what stops racing gate workers from crossing a limit together.
"""

from __future__ import annotations

from gate_workers.context import GateContext, ResolvedAction
from interlock.verdicts import GateResult, allow
from ledger.limits import check_limits
from ledger.queries import window_subject

NAME = "G3"


def check(action: ResolvedAction, ctx: GateContext) -> GateResult:
    if ctx.mandate is None or action.sik is None or action.amount_minor is None or action.currency is None:
        return allow("G3_NOT_APPLICABLE")  # nothing resolved to count; G1/G2 have already blocked
    return check_limits(
        ctx.ledger, ctx.mandate, merchant_id=action.merchant_id, agent_id=action.agent_id, sik=action.sik,
        tool=action.tool, amount_minor=action.amount_minor, currency=action.currency, now_ms=ctx.now_ms,
        rate=ctx.fee_rate, subject=window_subject(action.tool, action.subject or "", action.params),
        clock_skew_ms=ctx.clock_skew_ms,
    )  # fmt: skip
