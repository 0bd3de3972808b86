"""The chaos matrix: which kill points meet which rail faults, and why the other pairs are skipped.

A fault is paired with a kill point only when the fault can change what happens at that point. The
faults a reconciler kill point needs to be reached at all (an ambiguous money call, a deep list)
are added underneath and named in the cell.

The pause cells are a second family: the rail worker is SIGSTOPped (not killed) at a point of its
money call, a standby takes its lease, and it is woken — late, once the intent has been settled
without it, or early, the moment the standby's retry has started — for refunds and for instant
settlements, whose only defence against a second send is the fence.

The burst cells are a third: the rail worker runs with 64 call slots, the agents fire a burst of distinct
money calls at once over a rail that takes its time to answer, and the worker is SIGKILLed at a point of a
call only once at least 32 calls are in flight (INTERLOCK_KILL_IN_FLIGHT), leaving every one of them for
recovery to settle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from interlock.failpoints import POINTS, WEBHOOK_POINTS

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

# Money tools a trial can call, by the short name used in cell keys.
TOOLS = {"refund": "create_refund", "settlement": "create_instant_settlement", "payout": "create_payout"}
# Where a stalled rail worker hurts: the request is out (during_call), or IN_FLIGHT is committed and the
# request not yet sent (after_wal_before_call: on waking it must not send). The faults are the ones
# that make the first call's fate unclear (ambiguous_504, slow) or the reconciler's read stale (replica_lag).
PAUSE_POINTS = ["rail.after_wal_before_call", "rail.during_call"]
PAUSE_FAULTS = ["ambiguous_504", "slow", "replica_lag"]
# When the stopped worker is woken. "late": past lease TTL + reconcile min delay, once the intent is definite
# without it. "early": the moment the standby has started its retry, while that retry may still be in flight.
WAKES = ["late", "early"]
# An early wake only tests the send-side rule if the stopped worker's lease can run out (heartbeats every
# TTL/3, so as soon as TTL*2/3 after its commit) before a stall check keyed to the commit (TTL - rail timeout)
# would stop it sending: that needs a rail timeout well under TTL/3. With the trial's TTL of 2500 ms, 250 ms
# leaves a window in roughly half the trials, depending on where the commit falls between two heartbeats.
EARLY_TIMINGS = {"INTERLOCK_RAIL_TIMEOUT_MS": "250"}


# The burst cells: where a kill leaves many calls at once with their fate unknown (the request is out, or the
# answer is in hand and not recorded), under no fault, an ambiguous answer, and a rail slower than the deadline.
BURST_POINTS = ["rail.during_call", "rail.after_call_before_commit"]
BURST_FAULTS = ["none", "ambiguous_504", "slow"]
BURST_CALLS, BURST_IN_FLIGHT, BURST_CONCURRENCY = 40, 32, 64
# Calls pile up only if the rail holds each one longer than the stack takes to dispatch 32 of them: about 0.5 s on
# an idle machine, but up to 2 s on two busy CPUs, where the first calls through a fresh stack are the slowest. So
# a 3000 ms rail under a 4000 ms call deadline ("none" is still answered in time), with the lease (and each
# IN_FLIGHT row's lease) long enough that every call leaves inside its send window (TTL - deadline, ADR 0005).
BURST_TIMINGS = {
    "INTERLOCK_RAIL_CONCURRENCY": str(BURST_CONCURRENCY),
    "INTERLOCK_RAIL_TIMEOUT_MS": "4000",
    "INTERLOCK_LEASE_TTL_MS": "7000",
}
RAIL_LATENCY: dict[str, Any] = {"name": "slow", "rate": 1.0, "scope": "money", "params": {"delay_ms": 3000}}
BURST_PROFILES: dict[str, list[dict[str, Any]]] = {
    "none": [RAIL_LATENCY],
    # Applied after the latency, then answered 504: every call of the burst is ambiguous.
    "ambiguous_504": [RAIL_LATENCY, *PROFILES["ambiguous_504"]],
    # Applied after 5 s, past the 4 s deadline: the worker gives up on calls the rail still applies.
    "slow": [{"name": "slow", "rate": 1.0, "scope": "money", "params": {"delay_ms": 5000}}],
}


# The webhook cells: the receiver SIGKILLed on its first delivery with its inbox row written and not committed,
# or committed and not acknowledged; the money call answered 504 although the rail applied it, so that the
# webhook is what may settle it first; and the sandbox's lifecycle moving the entity to the fault's final status
# (a refund the bank fails, a settlement reversed or only partly processed at first), which Interlock must follow
# and, where a person must decide, raise. ambiguous_504 alone: a refund processed in its own answer, lifecycle off.
WEBHOOK_LIFECYCLE_MS = 1500
WEBHOOK_FAULTS = {
    "ambiguous_504": "refund",
    "refund_bank_failure": "refund",
    "settlement_partial": "settlement",
    "settlement_reversed": "settlement",
}


@dataclass(frozen=True)
class Cell:
    point: str
    fault: str
    faults: list[dict[str, Any]] = field(default_factory=list)
    prior_refunds: int = 0  # unstamped refunds already on the payment (pushes ours past page one)
    note: str = ""
    # "kill": SIGKILL at the point; "pause": SIGSTOP there, SIGCONT after a takeover; "burst": SIGKILL at the
    # point once kill_in_flight calls of a burst of `calls` are in flight; "webhook": SIGKILL the webhook receiver
    # at the point on its first delivery, with the sandbox's lifecycle moving the money on (chaos/webhooks.py)
    action: str = "kill"
    tool: str = TOOLS["refund"]
    wake: str = "late"  # pause cells: see WAKES
    timings: dict[str, str] = field(default_factory=dict)  # overrides of the trial's TIMINGS
    calls: int = 1  # burst cells: distinct money calls fired at once
    kill_in_flight: int = 0  # burst cells: the kill waits for this many calls in flight

    @property
    def key(self) -> str:
        if self.action == "kill":
            return f"{self.point}|{self.fault}"
        short = next(name for name, tool in TOOLS.items() if tool == self.tool)
        if self.action == "machine_loss":
            return f"machine_loss|{self.fault}|{short}"
        if self.action in ("burst", "webhook"):
            return f"{self.action}|{self.point}|{self.fault}|{short}"
        return f"{self.action}|{self.point}|{self.fault}|{short}|{self.wake}"


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


def build_pause_cells() -> list[Cell]:
    """Every pause point × fault × money tool × wake. Nothing is skipped: each can leave the paused
    worker holding a request it might still send, or an answer it might still record."""
    return [
        Cell(point, fault, list(PROFILES[fault]), action="pause", tool=tool, wake=wake,
             timings=dict(EARLY_TIMINGS) if wake == "early" else {})  # fmt: skip
        for wake in WAKES
        for tool in TOOLS.values()
        for point in PAUSE_POINTS
        for fault in PAUSE_FAULTS
    ]


def build_burst_cells(calls: int = BURST_CALLS, in_flight: int = BURST_IN_FLIGHT) -> list[Cell]:
    """Every burst point × fault × money tool: nothing is skipped, each leaves a different mix of requests
    out, answers unrecorded and entities the rail applied after the worker died."""
    if not 1 <= in_flight <= min(calls, BURST_CONCURRENCY):
        raise ValueError(f"the kill waits for {in_flight} calls in flight: it needs 1 <= that <= the calls of the "
                         f"burst ({calls}) and <= the rail worker's {BURST_CONCURRENCY} call slots")  # fmt: skip
    return [
        Cell(point, fault, list(BURST_PROFILES[fault]), action="burst", tool=tool, timings=dict(BURST_TIMINGS),
             calls=calls, kill_in_flight=in_flight)  # fmt: skip
        for tool in TOOLS.values()
        for point in BURST_POINTS
        for fault in BURST_FAULTS
    ]


def build_webhook_cells() -> list[Cell]:
    """Every receiver kill point × fault (each fault with the money tool it moves): nothing is skipped, each kill
    leaves a different delivery unacknowledged, and each fault a different lifecycle to follow through it."""
    cells = []
    for point in WEBHOOK_POINTS:
        for fault, short in WEBHOOK_FAULTS.items():
            faults = list(PROFILES["ambiguous_504"])
            timings = {}
            if fault != "ambiguous_504":
                faults.append({"name": fault, "rate": 1.0, "scope": "lifecycle"})
                timings["INTERLOCK_SANDBOX_LIFECYCLE_MS"] = str(WEBHOOK_LIFECYCLE_MS)
            cells.append(Cell(point, fault, faults, action="webhook", tool=TOOLS[short], timings=timings))
    return cells


def select(cells: list[Cell], points: list[str] | None, faults: list[str] | None,
           tools: list[str] | None = None, wakes: list[str] | None = None) -> list[Cell]:  # fmt: skip
    return [c for c in cells if (not points or c.point in points) and (not faults or c.fault in faults)
            and (not tools or c.tool in tools) and (not wakes or c.wake in wakes)]  # fmt: skip
