"""G5 purpose (advisory, off by default): a judge of whether the call fits the mandate's purpose.

The judge's verdict type admits only HOLD or BLOCK — ALLOW is not in it — so a model (or an
injected prompt steering one) can never upgrade a verdict. The strongest thing it can do is fail
to object, which leaves the deterministic gates' verdict intact. `mypy` proves the type holds:
tests/typing/g5_cannot_allow.py must fail to type-check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from gate_workers.context import GateContext, ResolvedAction
from interlock.messages import Verdict
from interlock.verdicts import GateResult, allow

NAME = "G5"

AdvisoryVerdict = Literal[Verdict.HOLD, Verdict.BLOCK]


@dataclass(frozen=True, slots=True)
class Objection:
    verdict: AdvisoryVerdict
    reason_code: str


class PurposeJudge(Protocol):
    def judge(self, action: ResolvedAction, purpose: str) -> Objection | None:
        """An objection, or None for no objection. There is no way to say ALLOW."""
        ...


def check(action: ResolvedAction, ctx: GateContext, judge: PurposeJudge | None = None) -> GateResult:
    if not ctx.purpose_check or judge is None or ctx.mandate is None:
        return allow("G5_DISABLED")
    objection = judge.judge(action, ctx.mandate.purpose)
    if objection is None:
        return allow("G5_NO_OBJECTION")
    return GateResult(objection.verdict, objection.reason_code, {"advisory": True})
