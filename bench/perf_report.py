"""The `perf` section of RESULTS.md: every number in it comes from the run it reports."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from bench.metrics import percentile
from bench.perf import LatencySample, PerfReport, ThroughputSample
from bench.perf_cpu import BENCH
from bench.perf_plot import plot
from bench.perf_rail import RailAloneSample
from bench.perf_trace import STAMPS, DefiniteStat, HopStat, definite_stats, summary_line
from interlock.results import commit_id

__all__ = ["plot", "render", "summary"]

HEADLINE_FAULT = "ambiguous_504"


def _load() -> str:
    try:
        one, five, _ = os.getloadavg()
        return f"load average {one:.2f} / {five:.2f} (1 / 5 min) on {os.cpu_count()} CPUs"
    except OSError:
        return f"{os.cpu_count()} CPUs"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def _latency(report: PerfReport) -> dict[tuple[str, int], LatencySample]:
    return {(s.mode, s.rail_ms): s for s in report.latency}


def _throughput(report: PerfReport) -> dict[tuple[str, int, int], ThroughputSample]:
    return {(t.mode, t.rail_ms, t.agents): t for t in report.throughput}


def _tput_ratio(report: PerfReport, rail_ms: int, agents: int, base: str = "direct") -> float | None:
    tput = _throughput(report)
    d, g = tput.get((base, rail_ms, agents)), tput.get(("gated", rail_ms, agents))
    return g.per_second / d.per_second if d is not None and g is not None and d.per_second else None


def _best_rail_alone(report: PerfReport) -> RailAloneSample | None:
    return max(report.rail_alone, key=lambda s: s.per_second, default=None)


# Processes that are not Interlock: the agents (the bench), the rail and the direct-MCP agents' server.
NOT_INTERLOCK = frozenset({BENCH, "sandbox", "mcp-front"})


def own_cpu(report: PerfReport) -> tuple[float, float] | None:
    """Interlock's own CPU ms per gated call (0 ms rail, 8 agents: every process but the agents and the rail) and its
    ratio to a direct REST call's whole CPU (the agents and the rail) in the same run."""
    by = {s.label: s for s in report.cpu}
    gated, direct = by.get("gated, 0 ms rail, 8 agents"), by.get("direct, 0 ms rail, 8 agents")
    if gated is None or direct is None or not direct.total_ms:
        return None
    own = sum(ms for name, ms in gated.ms_per_call.items() if name not in NOT_INTERLOCK)
    return own, own / direct.total_ms


def _ceiling_pct(report: PerfReport) -> tuple[float | None, int]:
    """The rail worker alone at its highest concurrency: the best rail's rate as a share of what that concurrency
    allows (concurrency x 1000 / latency)."""
    if not report.rail_alone or not report.config.latency_ms:
        return None, max(report.config.rail_concurrency, default=256)
    top = max(s.concurrency for s in report.rail_alone)
    best = max((s for s in report.rail_alone if s.concurrency == top), key=lambda s: s.per_second)
    return 100 * best.per_second / (top * 1000 / report.config.latency_ms), top


def summary(report: PerfReport) -> str:
    lat = _latency(report)
    d0, g0, m0 = lat.get(("direct", 0)), lat.get(("gated", 0)), lat.get(("direct-mcp", 0))
    best = _best_rail_alone(report)
    ttd = next((s for s in definite_stats(report.definite) if s.fault == HEADLINE_FAULT and s.definite), None)
    slow = report.config.latency_ms
    cpu = own_cpu(report)
    pct, top = _ceiling_pct(report)
    return summary_line(added_p50_ms=g0.p50 - d0.p50 if d0 and g0 else None,
                        ratio_0ms_x8=_tput_ratio(report, 0, 8), ratio_slow_x32=_tput_ratio(report, slow, 32),
                        rail_alone_per_s=best.per_second if best else None, slow_ms=slow,
                        definite_p50_ms=ttd.p50_ms if ttd else None,
                        mcp_ratio_0ms_x8=_tput_ratio(report, 0, 8, "direct-mcp"),
                        mcp_ratio_slow_x32=_tput_ratio(report, slow, 32, "direct-mcp"),
                        mcp_latency_ratio_0ms=g0.p50 / m0.p50 if g0 and m0 and m0.p50 else None,
                        own_cpu_ms=cpu[0] if cpu else None, own_cpu_ratio=cpu[1] if cpu else None,
                        redis_per_call=report.redis.per_call if report.redis else None,
                        rail_alone_ceiling_pct=pct, ceiling_concurrency=top)  # fmt: skip


def render(report: PerfReport, *, command: str, plot: Path | None) -> str:
    floor = percentile(report.sqlite_commit_ms, 50)
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    best = _best_rail_alone(report)
    lines = [
        "## Performance bench (direct vs gated, one run, one sandbox)",
        "",
        f"Evidence: **real process** (sandbox, Redis, {report.throughput_gate_workers} gate workers, 1 rail "
        f"worker, reconciler, HTTP ingress — each its own process), **sandbox rail** (local, not Razorpay), "
        f"**scripted agent** (MCP and REST clients driven by the bench, not a language model). Commit "
        f"`{commit_id()}`, {date}, {_load()} when the run ended. Reproduce: `{command}`.",
        "",
        summary(report),
        "",
        "Rail worker alone: the best rate measured"
        + (f" ({best.rail} rail, INTERLOCK_RAIL_CONCURRENCY {best.concurrency})." if best else " (not run).")
        + f" Time to definite: after `{HEADLINE_FAULT}` on a refund, as the agent saw it (first UNKNOWN answer "
        "to first APPLIED, repeating the same call every 100 ms), at the default `INTERLOCK_RECONCILE_MIN_DELAY_MS`.",
        "",
        f"Physical floor: one SQLite commit under WAL + `synchronous=FULL` on this machine takes "
        f"p50 {floor:.2f} ms / p99 {percentile(report.sqlite_commit_ms, 99):.2f} ms "
        f"({len(report.sqlite_commit_ms)} commits)." if floor else "Physical floor: not measured.",
    ]
    lines += _latency_section(report) + _throughput_section(report) + _cpu_section(report) + _hop_section(report)
    lines += _redis_section(report)
    lines += _definite_section(report) + _rail_alone_section(report) + _gates_section(report)
    if plot is not None:
        lines += ["", f"![performance bench]({plot.as_posix()})"]
    return "\n".join(lines) + "\n"


def _latency_section(report: PerfReport) -> list[str]:
    lines = [
        "",
        "### Added latency per money call (sequential, one agent)",
        "",
        "Direct: the REST client straight to the sandbox. Gated: an MCP `create_refund` through the ingress, "
        "gates, ledger and rail worker, answered when the rail worker records the outcome. Rail latency is the "
        "sandbox's `slow` fault (rate 1, scope all: reads and money calls alike), so a gated call pays two rail "
        "round trips (the gate's payment read and the refund). The three modes take turns, "
        f"{report.config.latency_rounds} rounds each, so load from elsewhere on a shared machine falls on all alike.",
        "",
        "| rail latency | calls | direct p50 / p99 ms | direct-MCP p50 / p99 ms | gated p50 / p99 ms "
        "| added p50 / p99 ms | gated / direct (p50) | gated / direct-MCP (p50) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lat = _latency(report)
    for rail_ms in sorted({s.rail_ms for s in report.latency}):
        d, g, m = lat.get(("direct", rail_ms)), lat.get(("gated", rail_ms)), lat.get(("direct-mcp", rail_ms))
        if d is None or g is None:
            continue
        failed = [s.failures for s in (d, m, g) if s is not None]
        fails = f" ({'/'.join(map(str, failed))} failed)" if any(failed) else ""
        mcp = f"{m.p50:.1f} / {m.p99:.1f}" if m else "-"
        lines.append(f"| {rail_ms} ms | {len(g.latencies_ms)}{fails} | {d.p50:.1f} / {d.p99:.1f} | {mcp} "
                     f"| {g.p50:.1f} / {g.p99:.1f} | {g.p50 - d.p50:+.1f} / {g.p99 - d.p99:+.1f} "
                     f"| {_ratio(g.p50, d.p50)} | {_ratio(g.p50, m.p50) if m else '-'} |")  # fmt: skip
    return lines


def _throughput_section(report: PerfReport) -> list[str]:
    lines = [
        "",
        f"### End-to-end throughput (C concurrent agents, 1 rail worker, {report.throughput_gate_workers} gate "
        "workers)",
        "",
        "| rail latency | agents | calls | direct /s | direct-MCP /s | gated /s | gated / direct "
        "| gated / direct-MCP |",
        "|---|---|---|---|---|---|---|---|",
    ]
    tput = _throughput(report)
    for rail_ms in sorted({t.rail_ms for t in report.throughput}):
        for agents in report.config.concurrency:
            d, g = tput.get(("direct", rail_ms, agents)), tput.get(("gated", rail_ms, agents))
            m = tput.get(("direct-mcp", rail_ms, agents))
            if d is None or g is None:
                continue
            short = f" ({g.calls - g.applied} not applied)" if g.applied < g.calls else ""
            mcp, vs_mcp = (f"{m.per_second:.1f}", _ratio(g.per_second, m.per_second)) if m else ("-", "-")
            lines.append(f"| {rail_ms} ms | {agents} | {g.calls}{short} | {d.per_second:.1f} | {mcp} | "
                         f"{g.per_second:.1f} | {_ratio(g.per_second, d.per_second)} | {vs_mcp} |")  # fmt: skip
    lat = _latency(report)
    bounds = []
    for rail_ms in sorted({t.rail_ms for t in report.throughput}):
        direct, gated = lat.get(("direct", rail_ms)), lat.get(("gated", rail_ms))
        if direct is not None and gated is not None and gated.p50:
            bounds.append(f"{direct.p50 / gated.p50:.2f} at {rail_ms} ms ({direct.p50:.1f} / {gated.p50:.1f} ms)")
    if bounds:
        lines += ["", "Each agent waits for its answer before its next call, so C agents move C / latency calls per "
                  "second: at equal concurrency gated / direct throughput can reach at most direct / gated latency "
                  "(p50, one agent, from the latency table): " + "; ".join(bounds) + ". A gated call makes two rail "
                  "round trips (the gate's payment read, then the money call), a direct call one."]  # fmt: skip
    return lines


def _cpu_section(report: PerfReport) -> list[str]:
    if not report.cpu:
        return []
    cpus = os.cpu_count() or 1
    names = sorted({n for s in report.cpu for n in s.ms_per_call}, key=lambda n: (n == BENCH, n))
    lines = [
        "",
        f"### CPU per money call, by process ({cpus} CPUs)",
        "",
        "User + system CPU each process spent during one throughput run, divided by its calls (`/proc/<pid>/stat`; "
        "the bench's own process runs the agents). With every hop ready at once the machine cannot move more "
        f"than {cpus} × 1000 / (total CPU ms per call) calls per second, whatever the design. The summary's own CPU "
        "per call is the gated 0 ms x8 column without the agents, the sandbox and the MCP front (Interlock's "
        "processes and its Redis), against the whole of the direct column.",
        "",
        "| process | " + " | ".join(s.label for s in report.cpu) + " |",
        "|---|" + "---|" * len(report.cpu),
    ]
    for name in names:
        cells = [f"{s.ms_per_call[name]:.2f}" if name in s.ms_per_call else "—" for s in report.cpu]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| **total** | " + " | ".join(f"**{s.total_ms:.2f}**" for s in report.cpu) + " |")
    lines.append("| CPU ceiling, calls/s | " + " | ".join(f"{cpus * 1000 / s.total_ms:.0f}" if s.total_ms else "—"
                                                     for s in report.cpu) + " |")  # fmt: skip
    return lines


def _hop_section(report: PerfReport) -> list[str]:
    if not report.hops:
        return []
    labels = list(report.hops)
    keyed: dict[str, dict[tuple[str, str], HopStat]] = {
        label: {(h.start, h.end): h for h in stats} for label, stats in report.hops.items()
    }
    order = {name: i for i, name in enumerate(STAMPS)}
    keys = sorted({k for stats in keyed.values() for k in stats}, key=lambda k: (order[k[0]], order[k[1]]))
    lines = [
        "",
        "### Where a gated call's time goes (per-hop breakdown, from the trace each call carries)",
        "",
        "Stamps (epoch µs) are taken by the process that passes each point and travel in the Proposal, the "
        "Decision and the Outcome; the agent adds its own send and receive. p50 / p99 ms per hop; `n` is the "
        "number of traced calls.",
        "",
        "| hop | " + " | ".join(f"{label} p50 / p99" for label in labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    for key in keys:
        label = next(stats[key].label for stats in keyed.values() if key in stats)
        cells = [f"{s.p50_ms:.2f} / {s.p99_ms:.2f}" if (s := keyed[name].get(key)) else "-" for name in labels]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    counts = [str(max((h.samples for h in report.hops[name]), default=0)) for name in labels]
    lines.append("| n | " + " | ".join(counts) + " |")
    for name in labels:
        top = sorted(report.hops[name], key=lambda h: h.p50_ms, reverse=True)[:3]
        lines += ["", f"Largest hops, {name} (p50): " + "; ".join(f"{h.label} {h.p50_ms:.2f} ms" for h in top) + "."]
    return lines


def _redis_section(report: PerfReport) -> list[str]:
    count = report.redis
    if count is None:
        return []
    lines = [
        "",
        f"### Redis commands per money call, by hop ({count.calls} sequential gated refunds, quiet stack)",
        "",
        "Every command Redis executed (MONITOR), charged to the process that owns the client socket and, by the keys "
        "it names, to a hop; a script's own commands count, charged to the script's caller. Not per call, and "
        "shown apart as commands per second: workers' heartbeats and suspension checks (at most once a second), "
        "blocking dequeues that waited out their timeout on an idle queue, the reconciler's loop and RQ's registry "
        "maintenance. The bench's own trace list (INTERLOCK_TRACE) is not counted.",
        "",
        "| hop | per call | commands per call |",
        "|---|---|---|",
    ]
    for hop in sorted(count.hops, key=lambda h: (h == "bench only", h)):
        commands = count.hops[hop]
        detail = ", ".join(f"{n / count.calls:.2f} `{pattern}`" for pattern, n in commands.most_common())
        name = f"{hop} (not counted)" if hop == "bench only" else hop
        lines.append(f"| {name} | {count.hop_total(hop) / count.calls:.2f} | {detail} |")
    lines.append(f"| **total** | **{count.per_call:.2f}** | |")
    background = ", ".join(f"{n / count.seconds:.1f} `{name}`" for name, n in count.background.most_common(8))
    lines += ["", f"Background over the {count.seconds:.1f} s: {count.background_per_second:.1f} commands/s "
              f"({background}{', ...' if len(count.background) > 8 else ''})."]  # fmt: skip
    return lines


def _definite_section(report: PerfReport) -> list[str]:
    stats = definite_stats(report.definite)
    if not stats:
        return []
    lines = [
        "",
        "### Time to definite after an ambiguous refund (per sandbox fault, rate 1 on money calls)",
        "",
        "Each agent makes one refund on a fresh payment and repeats the same call every 100 ms until the "
        "answer is definite. Agent: first ambiguous answer → first definite answer. Ledger: UNKNOWN recorded → "
        "definite state recorded (the audit chain's clock).",
        "",
    ]
    return lines + definite_table(stats, first="fault", code=True)


def definite_table(stats: list[DefiniteStat], *, first: str, code: bool = False) -> list[str]:
    """The time-to-definite table, one row per fault (or round) in *stats*."""
    lines = [f"| {first} | calls | ambiguous | made definite | agent p50 / p99 ms | ledger p50 ms | final answers |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for s in stats:
        finals = " ".join(f"{state}x{n}" for state, n in sorted(s.final_states.items()))
        name = f"`{s.fault}`" if code else s.fault
        lines.append(f"| {name} | {s.calls} | {s.ambiguous} | {s.definite} | {s.p50_ms:.0f} / {s.p99_ms:.0f} "
                     f"| {s.ledger_p50_ms:.0f} | {finals} |")  # fmt: skip
    return lines


def _hop(sample: RailAloneSample, end: str) -> str:
    hop = next((h for h in sample.hops if h.end == end), None)
    return f"{hop.p50_ms:.1f} / {hop.p99_ms:.1f}" if hop else "-"


def _num(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"


def _rail_alone_section(report: PerfReport) -> list[str]:
    if not report.rail_alone:
        return []
    latency = report.config.latency_ms
    lines = [
        "",
        f"### The rail worker alone ({latency} ms rail, Decisions loaded straight onto its queue)",
        "",
        "ALLOW Decisions for distinct payments, built by the gate's own resolve + ladder against the bench's "
        "mandate, enqueued in one batch; one rail worker (fresh ledger) per INTERLOCK_RAIL_CONCURRENCY level. "
        "Rate: applied intents / (last APPLIED commit − enqueue). Two rails, each its own HTTP process at the "
        "same latency: the **sandbox rail** and a minimal **rail double** (`bench/rail_double.py`: refunds "
        "only, in memory, no journal). Hops p50 / p99 ms from the published Outcomes' traces.",
        "",
        "| rail | concurrency | calls | applied | calls/s | ceiling concurrency x 1000/latency | rail worker CPU ms a "
        "call | CPUs busy | queue `rail` | slot wait + hand-off | admission | attempt start → sent | money call round "
        "trip | record |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in report.rail_alone:
        ceiling = s.concurrency * 1000 / latency if latency else 0
        lines.append(f"| {s.rail} | {s.concurrency} | {s.calls} | {s.applied} | {s.per_second:.1f} | "
                     f"{ceiling:.0f} | {_num(s.cpu_ms_per_call)} | {_num(s.cores)} | {_hop(s, 'rail_dequeued')} | "
                     f"{_hop(s, 'admission_started')} | "
                     f"{_hop(s, 'admitted')} | {_hop(s, 'request_sent')} | "
                     f"{_hop(s, 'answer_received')} | {_hop(s, 'recorded')} |")  # fmt: skip
    lines += ["", _bottleneck(report.rail_alone, latency)]
    return lines


def _bottleneck(samples: list[RailAloneSample], latency_ms: int) -> str:
    """Whether the sandbox is what limits the rail worker here (the same level on both rails), and how close
    the rail worker comes to what its concurrency allows at this latency."""
    by = {(s.rail, s.concurrency): s for s in samples}
    shared = sorted(c for r, c in by if r == "sandbox" and ("double", c) in by)
    if not shared:
        return "Sandbox vs double: not compared in this run."
    top = shared[-1]
    sandbox, double = by[("sandbox", top)], by[("double", top)]
    verdict = ("the sandbox is the bottleneck" if double.per_second > 1.2 * sandbox.per_second
               else "the sandbox is not the bottleneck")  # fmt: skip
    text = (f"At concurrency {top} the sandbox gives {sandbox.per_second:.1f} calls/s and the double "
            f"{double.per_second:.1f} calls/s: {verdict} at this level.")  # fmt: skip
    best = max((s for s in samples if s.rail == "double"), key=lambda s: s.per_second)
    ceiling = best.concurrency * 1000 / latency_ms if latency_ms else 0
    if ceiling:
        limit = "the rail worker itself" if best.per_second < 0.8 * ceiling else "the concurrency setting"
        text += (f" Its best against the double, {best.per_second:.1f} calls/s at concurrency {best.concurrency}, is "
                 f"{best.per_second / ceiling:.0%} of the {ceiling:.0f} calls/s that concurrency allows at "
                 f"{latency_ms} ms: what limits it there is {limit}.")  # fmt: skip
        if best.cores is not None and best.cpu_ms_per_call is not None and best.per_second < 0.8 * ceiling:
            text += (f" It kept {best.cores:.2f} CPUs busy doing it, {best.cpu_ms_per_call:.2f} ms of CPU a call: one "
                     f"Python process does its per-call work under one interpreter lock, so "
                     f"{0.8 * ceiling:.0f} calls/s would need {1000 / (0.8 * ceiling):.2f} ms a call at one CPU.")
    return text


def _gates_section(report: PerfReport) -> list[str]:
    lines = [
        "",
        "### Gate decisions per second (gates alone: rail worker stopped, 0 ms rail)",
        "",
        "| gate workers | decisions/s | vs 1 worker |",
        "|---|---|---|",
    ]
    one = report.decisions.get(min(report.decisions)) if report.decisions else None
    for workers, rate in sorted(report.decisions.items()):
        lines.append(f"| {workers} | {rate:.0f} | {_ratio(rate, one or 0)} |")
    lines += ["", f"Each sample: {report.config.decisions} proposals enqueued at once; a decision is counted when "
              "it lands on the rail queue. Every gate worker reads the payment from the rail and the ledger itself."]
    return lines
