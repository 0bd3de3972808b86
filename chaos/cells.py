"""The chaos matrix: which kill points meet which rail faults, and why the other pairs are skipped.

A fault is paired with a kill point only when the fault can change what happens at that point. The
faults a reconciler kill point needs to be reached at all (an ambiguous money call, a deep list)
are added underneath and named in the cell.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from interlock.failpoints import POINTS

# Every failpoint an actor has, in the order a money call meets them, plus Redis killed mid-call.
KILL_POINTS = [*POINTS, "redis.during_call"]
FAULTS = ["none", "ambiguous_504", "slow", "dup_response", "partition", "replica_lag", "deep_page"]

# Fault profiles as the sandbox takes them. Delays are set against the chaos timings in trial.py:
# rail call timeout 1000 ms, reconcile min delay 1200 ms.
PROFILES: dict[str, list[dict[str, Any]]] = {
    "none": [],
    "ambiguous_504": [{"name": "ambiguous_504", "rate": 1.0}],
    "slow": [{"name": "slow", "rate": 1.0, "params": {"delay_ms": 1500}}],
    "dup_response": [{"name": "dup_response", "rate": 1.0}],
    # Money calls only, and shorter than the reconciler's patience: the outcome must still settle.
    "partition": [{"name": "partition", "rate": 1.0, "scope": "money", "params": {"duration_ms": 2500}}],
    "replica_lag": [{"name": "replica_lag", "rate": 1.0, "params": {"lag_ms": 800}}],
    "deep_page": [{"name": "deep_page", "rate": 1.0}],
}
AMBIGUOUS = {"ambiguous_504", "slow", "dup_response", "partition"}

RAIL_POINTS = {p for p in KILL_POINTS if p.startswith("rail.")}
RECONCILER_POINTS = {"reconciler.mid_pagination", "reconciler.after_finding_before_commit"}


@dataclass(frozen=True)
class Cell:
    point: str
    fault: str
    faults: list[dict[str, Any]] = field(default_factory=list)
    prior_refunds: int = 0  # unstamped refunds already on the payment (pushes ours past page one)
    note: str = ""

    @property
    def key(self) -> str:
        return f"{self.point}|{self.fault}"


def _skip_reason(point: str, fault: str) -> str | None:
    if point in ("ingress.after_enqueue", "gate.after_resolve") and fault in ("deep_page", "replica_lag"):
        return "list reads happen only in the reconciler, which this kill does not reach"
    if point == "rail.before_wal" and fault in ("replica_lag", "deep_page"):
        return "the kill lands before the rail is called; list-read faults cannot act first"
    if point in RAIL_POINTS and fault == "deep_page":
        return "deep_page acts on the reconciler's paging; covered by the reconciler cells"
    if point == "reconciler.mid_pagination" and fault in ("replica_lag", "none"):
        return "mid_pagination needs a second page; covered by the deep_page cell"
    if point in RECONCILER_POINTS and fault == "none":
        return "with no fault the call is not ambiguous, so the reconciler has nothing to do"
    if point == "redis.during_call" and fault != "slow":
        return "only a slow rail holds the call open long enough to aim the Redis kill inside it"
    return None


def build_cells() -> tuple[list[Cell], list[tuple[str, str, str]]]:
    cells, skipped = [], []
    for point in KILL_POINTS:
        for fault in FAULTS:
            reason = _skip_reason(point, fault)
            if reason is not None:
                skipped.append((point, fault, reason))
                continue
            faults = list(PROFILES[fault])
            note, prior = "", 0
            if point in RECONCILER_POINTS:
                extra = []
                if fault not in AMBIGUOUS:
                    faults = [*PROFILES["ambiguous_504"], *faults]
                    extra.append("+ambiguous_504 so the call needs reconciling")
                if point == "reconciler.mid_pagination" or fault == "deep_page":
                    prior = 150
                    if fault != "deep_page":
                        faults = [*faults, *PROFILES["deep_page"]]
                    extra.append("+deep_page over 150 prior refunds so ours is past page one")
                note = "; ".join(extra)
            elif fault == "deep_page":
                prior = 150
            if fault == "dup_response" and prior == 0:
                # A replayed response needs an earlier entity to replay: two old refunds on the payment.
                prior = 2
            cells.append(Cell(point, fault, faults, prior, note.strip()))
    return cells, skipped


def select(cells: list[Cell], points: list[str] | None, faults: list[str] | None) -> list[Cell]:
    return [c for c in cells if (not points or c.point in points) and (not faults or c.fault in faults)]
