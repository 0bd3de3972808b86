"""Gate verdicts: a lattice BLOCK < HOLD < ALLOW whose meet is the ladder's answer (BLOCK absorbs).

A gate rejection is a value, never an exception: every gate returns a GateResult with a stable
reason code, and the decision records all of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from interlock.messages import GateResultModel, Verdict

_RANK = {Verdict.BLOCK: 0, Verdict.HOLD: 1, Verdict.ALLOW: 2}


def meet(verdicts: Iterable[Verdict]) -> Verdict:
    """The greatest lower bound; ALLOW for an empty ladder."""
    return min(verdicts, key=_RANK.__getitem__, default=Verdict.ALLOW)


@dataclass(frozen=True, slots=True)
class GateResult:
    verdict: Verdict
    reason_code: str
    detail: dict[str, Any] = field(default_factory=dict)

    def named(self, gate: str) -> GateResultModel:
        return GateResultModel(gate=gate, verdict=self.verdict, reason_code=self.reason_code, detail=self.detail)


def allow(reason_code: str, **detail: Any) -> GateResult:
    return GateResult(Verdict.ALLOW, reason_code, detail)


def hold(reason_code: str, **detail: Any) -> GateResult:
    return GateResult(Verdict.HOLD, reason_code, detail)


def block(reason_code: str, **detail: Any) -> GateResult:
    return GateResult(Verdict.BLOCK, reason_code, detail)


def deciding_result(results: Iterable[GateResultModel]) -> tuple[Verdict, str]:
    """The ladder's verdict and the reason code of the first gate that set it."""
    results = list(results)
    verdict = meet(r.verdict for r in results)
    for result in results:
        if result.verdict == verdict and verdict != Verdict.ALLOW:
            return verdict, result.reason_code
    return verdict, "ALLOWED"
