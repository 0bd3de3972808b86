"""The gate ladder: the order is this list. Every gate runs, even after a BLOCK, so the decision
records all results; the verdict is their meet (BLOCK < HOLD < ALLOW)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gate_workers.context import GateContext, ResolvedAction
from gate_workers.gates import g1_scope, g2_value, g3_limits, g4_exactly_once, g5_purpose, g6_provenance
from interlock.messages import GateResultModel, Verdict
from interlock.verdicts import GateResult, deciding_result

Gate = Callable[[ResolvedAction, GateContext], GateResult]

LADDER: list[tuple[str, Gate]] = [
    (g1_scope.NAME, g1_scope.check),
    (g2_value.NAME, g2_value.check),
    (g3_limits.NAME, g3_limits.check),
    (g4_exactly_once.NAME, g4_exactly_once.check),
    (g5_purpose.NAME, g5_purpose.check),
    (g6_provenance.NAME, g6_provenance.check),
]


@dataclass(frozen=True, slots=True)
class LadderResult:
    verdict: Verdict
    reason_code: str
    results: list[GateResultModel]


def evaluate(action: ResolvedAction, ctx: GateContext, ladder: list[tuple[str, Gate]] | None = None) -> LadderResult:
    results = [gate(action, ctx).named(name) for name, gate in (ladder or LADDER)]
    verdict, reason = deciding_result(results)
    return LadderResult(verdict, reason, results)
