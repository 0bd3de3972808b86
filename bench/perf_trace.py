"""The performance bench's arithmetic, kept pure: per-hop breakdowns from call traces, time-to-definite
statistics, and the one summary line. No processes, no clocks — unit-tested in tests/bench.

A trace (interlock.messages.Trace) maps a stamp name to epoch microseconds. The bench adds `agent_sent`
and `agent_got` (its own clock, the same machine) around each MCP call, so the hops outside Interlock's
processes — the MCP transport both ways — are in the table too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bench.metrics import percentile

# The stamps of one gated money call, in the order the call passes them.
STAMPS: tuple[str, ...] = (
    "agent_sent", "ingress_received", "enqueued", "gate_dequeued", "rail_read_done", "decision_enqueued",
    "rail_dequeued", "admission_started", "admitted", "request_sent", "answer_received", "recorded",
    "ingress_answered", "agent_got",
)  # fmt: skip
# What happens between a stamp and the next one; keyed by the stamp the hop ends at.
HOP_LABELS: dict[str, str] = {
    "ingress_received": "agent → ingress handler (MCP request over HTTP, session, JSON-RPC)",
    "enqueued": "ingress: validate the call, build the Proposal",
    "gate_dequeued": "queue `gates` (RQ enqueue, worker dequeue and job start)",
    "rail_read_done": "gate: the payment read on the rail, ledger reads",
    "decision_enqueued": "gate: ladder G1-G6, SIK, Decision",
    "rail_dequeued": "queue `rail` (RQ enqueue, rail worker dequeue and job start)",
    "admission_started": "wait for a call slot, hand-off to its pool thread",
    "admitted": "admission and the attempt's start (one BEGIN IMMEDIATE: G2/G3 re-check, IN_FLIGHT; group commit)",
    "request_sent": "the claim, the send window (and IN_FLIGHT's own commit when it could not start with admission)",
    "answer_received": "the money call on the rail (round trip)",
    "recorded": "record the outcome (fenced commit)",
    "ingress_answered": "publish the Outcome, the ingress's BLPOP wakes",
    "agent_got": "ingress → agent (MCP response)",
}


@dataclass(frozen=True)
class HopStat:
    start: str
    end: str
    label: str
    samples: int
    p50_ms: float
    p99_ms: float


def hops(trace: Mapping[str, int]) -> list[tuple[str, str, float]]:
    """(from, to, ms) between consecutive stamps present in *trace*, in call order. A missing stamp merges
    its two hops into one (labelled by both ends), so the hops always add up to the whole."""
    present = [name for name in STAMPS if name in trace]
    return [(a, b, (trace[b] - trace[a]) / 1000) for a, b in zip(present, present[1:], strict=False)]


def breakdown(traces: Iterable[Mapping[str, int]]) -> list[HopStat]:
    """Median and p99 per hop over *traces*, in call order (the order of first appearance of each hop)."""
    samples: dict[tuple[str, str], list[float]] = {}
    for trace in traces:
        for start, end, ms in hops(trace):
            samples.setdefault((start, end), []).append(ms)
    order = {name: i for i, name in enumerate(STAMPS)}
    stats = []
    for (start, end), values in sorted(samples.items(), key=lambda kv: (order[kv[0][0]], order[kv[0][1]])):
        label = HOP_LABELS[end] if STAMPS.index(end) == STAMPS.index(start) + 1 else f"{start} → {end}"
        stats.append(HopStat(start, end, label, len(values), percentile(values, 50), percentile(values, 99)))
    return stats


def total_ms(trace: Mapping[str, int]) -> float | None:
    """First to last stamp of one trace, or None when it has fewer than two."""
    present = [trace[name] for name in STAMPS if name in trace]
    return (present[-1] - present[0]) / 1000 if len(present) >= 2 else None


@dataclass(frozen=True)
class Definite:
    """One ambiguous call followed to a definite answer, as the agent saw it (repeating the same call)."""

    fault: str
    first_state: str  # the first answer (UNKNOWN when the fault made the call ambiguous)
    final_state: str | None  # None: still not definite when the bench stopped asking
    ms: float | None  # first ambiguous answer → first definite answer; None when not ambiguous or never definite
    ledger_ms: float | None = None  # the ledger's own clock: UNKNOWN recorded → APPLIED recorded


@dataclass(frozen=True)
class DefiniteStat:
    fault: str
    calls: int
    ambiguous: int
    definite: int
    p50_ms: float
    p99_ms: float
    ledger_p50_ms: float
    final_states: dict[str, int]


def definite_stats(samples: Sequence[Definite]) -> list[DefiniteStat]:
    """Per fault, in first-seen order: how many calls were made ambiguous, how many became definite, and
    p50/p99 of the time from the first ambiguous answer to the definite one."""
    faults = list(dict.fromkeys(s.fault for s in samples))
    stats = []
    for fault in faults:
        mine = [s for s in samples if s.fault == fault]
        ambiguous = [s for s in mine if s.first_state not in DEFINITE_STATES]
        times = [s.ms for s in ambiguous if s.ms is not None]
        ledger = [s.ledger_ms for s in ambiguous if s.ledger_ms is not None]
        finals: dict[str, int] = {}
        for s in mine:
            finals[s.final_state or "not definite"] = finals.get(s.final_state or "not definite", 0) + 1
        stats.append(DefiniteStat(fault, len(mine), len(ambiguous), len(times), percentile(times, 50),
                                  percentile(times, 99), percentile(ledger, 50), finals))  # fmt: skip
    return stats


# A money call's answer after which the agent has nothing to wait for.
DEFINITE_STATES = frozenset({"APPLIED", "BLOCKED", "FAILED_TERMINAL", "HELD", "QUARANTINED"})


def summary_line(*, added_p50_ms: float | None, ratio_0ms_x8: float | None, ratio_slow_x32: float | None,
                 rail_alone_per_s: float | None, slow_ms: int, definite_p50_ms: float | None,
                 mcp_ratio_0ms_x8: float | None = None, mcp_ratio_slow_x32: float | None = None,
                 mcp_latency_ratio_0ms: float | None = None, own_cpu_ms: float | None = None,
                 own_cpu_ratio: float | None = None, redis_per_call: float | None = None,
                 rail_alone_ceiling_pct: float | None = None, ceiling_concurrency: int = 256) -> str:  # fmt: skip
    """The one line issues 14 and 31 ask for, printed and written into RESULTS.md alone on its line ("n/a" for a
    number the run did not measure)."""
    return (f"perf: added p50 {_num(added_p50_ms, '.1f')} ms at 0 ms rail; gated/direct throughput "
            f"{_num(ratio_0ms_x8, '.2f')} at 0 ms x8 agents, {_num(ratio_slow_x32, '.2f')} at {slow_ms} ms x32 agents; "
            f"gated/direct-MCP throughput {_num(mcp_ratio_0ms_x8, '.2f')} at 0 ms x8 agents, "
            f"{_num(mcp_ratio_slow_x32, '.2f')} at {slow_ms} ms x32 agents; "
            f"gated/direct-MCP latency p50 {_num(mcp_latency_ratio_0ms, '.2f')} at 0 ms rail; "
            f"own CPU per call {_num(own_cpu_ms, '.2f')} ms ({_num(own_cpu_ratio, '.1f')} x a direct call); "
            f"Redis commands per call {_num(redis_per_call, '.1f')}; "
            f"rail worker alone {_num(rail_alone_per_s, '.0f')} calls/s at {slow_ms} ms rail "
            f"({_num(rail_alone_ceiling_pct, '.0f')}% of its ceiling at concurrency {ceiling_concurrency}); "
            f"time-to-definite p50 {_num(definite_p50_ms, '.0f')} ms")  # fmt: skip


def _num(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)
