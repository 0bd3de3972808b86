"""G5 purpose (advisory, off by default): a judge of whether the call fits its purpose (SPEC §7, ADR 0006).

The mandate's `purpose_check: {mode: off | hold | block, min_similarity}` turns it on. The judge
(gate_workers.purpose_model, a local sentence-embedding model built once per gate worker) compares the mandate's
purpose, and the task's when the call is bound to one, with the action. Its verdict type admits only HOLD or
BLOCK — ALLOW is not in it — so a model (or an injected prompt steering one) can never upgrade a verdict: the
strongest thing it can do is fail to object, which leaves the deterministic gates' verdict intact. `mypy` proves
the type holds: tests/typing/g5_cannot_allow.py must fail to type-check. A mandate that asks for G5 where no judge
was loaded gets the objection anyway (G5_JUDGE_UNAVAILABLE): the check is never silently skipped.
"""

from __future__ import annotations

from gate_workers.context import AdvisoryVerdict, GateContext, Objection, PurposeJudge, ResolvedAction
from interlock.messages import Verdict
from interlock.verdicts import GateResult, allow

NAME = "G5"
# The judge's types live in gate_workers.context, beside the action; named here too, where G5 is read.
__all__ = ["NAME", "AdvisoryVerdict", "Objection", "PurposeJudge", "check"]


def check(action: ResolvedAction, ctx: GateContext) -> GateResult:
    policy = ctx.mandate.purpose_check if ctx.mandate is not None else None
    if policy is None or policy.mode == "off":
        return allow("G5_DISABLED")
    if action.amount_minor is None:
        return allow("G5_NOT_APPLICABLE")  # nothing resolved to describe; G2 has already blocked it
    verdict: AdvisoryVerdict = Verdict.BLOCK if policy.mode == "block" else Verdict.HOLD
    assert ctx.mandate is not None
    purposes = {"mandate": ctx.mandate.purpose}
    if action.task is not None and action.task.task.purpose:
        purposes["task"] = action.task.task.purpose
    judge: PurposeJudge | None = ctx.purpose_judge
    if judge is None:
        return GateResult(verdict, "G5_JUDGE_UNAVAILABLE", {"advisory": True, "mode": policy.mode})
    objection = judge.judge(action, purposes, policy.min_similarity, verdict)
    if objection is None:
        return allow("G5_NO_OBJECTION", min_similarity=f"{policy.min_similarity:.4f}")  # no floats in the audit
    return GateResult(objection.verdict, objection.reason_code, {"advisory": True, **objection.detail})
