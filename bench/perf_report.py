"""The `perf` section of RESULTS.md and its plot."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from bench.metrics import percentile
from bench.perf import LatencySample, PerfReport, ThroughputSample
from interlock.results import commit_id


def _load() -> str:
    try:
        one, five, _ = os.getloadavg()
        return f"load average {one:.2f} / {five:.2f} (1 / 5 min) on {os.cpu_count()} CPUs"
    except OSError:
        return f"{os.cpu_count()} CPUs"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def render(report: PerfReport, *, command: str, plot: Path | None) -> str:
    config = report.config
    floor = percentile(report.sqlite_commit_ms, 50)
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## Performance bench (direct vs gated, one run, one sandbox)",
        "",
        f"Evidence: **real process** (sandbox, Redis, {report.throughput_gate_workers} gate workers, 1 rail "
        f"worker, reconciler, HTTP ingress — each its own process), **sandbox rail** (local, not Razorpay). "
        f"Commit `{commit_id()}`, {date}, {_load()} when the run ended. Reproduce: `{command}`.",
        "",
        f"Physical floor: one SQLite commit under WAL + `synchronous=FULL` on this machine takes "
        f"p50 {floor:.2f} ms / p99 {percentile(report.sqlite_commit_ms, 99):.2f} ms "
        f"({len(report.sqlite_commit_ms)} commits): a serial writer that fsyncs each intent before its call "
        f"cannot exceed ~{1000 / floor:.0f} commits/s here." if floor else "Physical floor: not measured.",
        "",
        "### Added latency per money call (sequential, one agent)",
        "",
        "Direct: the REST client straight to the sandbox. Gated: an MCP `create_refund` through the ingress, "
        "gates, ledger and rail worker, answered when the rail worker records the outcome. Rail latency is the "
        "sandbox's `slow` fault (rate 1, scope all: reads and money calls alike).",
        "",
        "| rail latency | calls | direct p50 / p99 ms | gated p50 / p99 ms | added p50 / p99 ms "
        "| gated / direct (p50) |",
        "|---|---|---|---|---|---|",
    ]
    by_key: dict[tuple[str, int], LatencySample] = {(s.mode, s.rail_ms): s for s in report.latency}
    for rail_ms in sorted({s.rail_ms for s in report.latency}):
        d, g = by_key.get(("direct", rail_ms)), by_key.get(("gated", rail_ms))
        if d is None or g is None:
            continue
        fails = f" ({d.failures}/{g.failures} failed)" if d.failures or g.failures else ""
        lines.append(f"| {rail_ms} ms | {len(g.latencies_ms)}{fails} | {d.p50:.1f} / {d.p99:.1f} "
                     f"| {g.p50:.1f} / {g.p99:.1f} | {g.p50 - d.p50:+.1f} / {g.p99 - d.p99:+.1f} "
                     f"| {_ratio(g.p50, d.p50)} |")  # fmt: skip
    lines += [
        "",
        f"### Throughput of money calls (C concurrent agents, 1 rail worker, {report.throughput_gate_workers} gate "
        "workers)",
        "",
        "| rail latency | agents | calls | direct /s | gated /s | gated / direct |",
        "|---|---|---|---|---|---|",
    ]
    tput: dict[tuple[str, int, int], ThroughputSample] = {(t.mode, t.rail_ms, t.agents): t for t in report.throughput}
    for rail_ms in sorted({t.rail_ms for t in report.throughput}):
        for agents in config.concurrency:
            d2, g2 = tput.get(("direct", rail_ms, agents)), tput.get(("gated", rail_ms, agents))
            if d2 is None or g2 is None:
                continue
            short = f" ({g2.calls - g2.applied} not applied)" if g2.applied < g2.calls else ""
            lines.append(f"| {rail_ms} ms | {agents} | {g2.calls}{short} | {d2.per_second:.1f} | "
                         f"{g2.per_second:.1f} | {_ratio(g2.per_second, d2.per_second)} |")  # fmt: skip
    slow = config.latency_ms
    lines += [
        "",
        f"The rail worker makes one money call at a time (SPEC §8.6: the seam for bounded concurrency and group "
        f"commit is kept, not yet used), so gated throughput at a {slow} ms rail is capped near "
        f"{1000 / slow if slow else 0:.0f} calls/s whatever the number of agents; direct calls overlap freely. "
        "This is the known gap a later issue closes (>= 200 refunds/s through one rail worker).",
        "",
        "### Gate decisions per second (gates alone: rail worker stopped, 0 ms rail)",
        "",
        "| gate workers | decisions/s | vs 1 worker |",
        "|---|---|---|",
    ]
    one = report.decisions.get(min(report.decisions)) if report.decisions else None
    for workers, rate in sorted(report.decisions.items()):
        lines.append(f"| {workers} | {rate:.0f} | {_ratio(rate, one or 0)} |")
    lines += ["", f"Each sample: {config.decisions} proposals enqueued at once; a decision is counted when it "
              "lands on the rail queue. Every gate worker reads the payment from the rail and the ledger itself."]
    if plot is not None:
        lines += ["", f"![performance bench]({plot.as_posix()})"]
    return "\n".join(lines) + "\n"


def plot(report: PerfReport, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, tput, gates) = plt.subplots(1, 3, figsize=(14, 4))
    rails = sorted({s.rail_ms for s in report.latency})
    width = 0.2
    for i, (mode, stat) in enumerate((("direct", "p50"), ("direct", "p99"), ("gated", "p50"), ("gated", "p99"))):
        values = [next((getattr(s, stat) for s in report.latency if s.mode == mode and s.rail_ms == r), 0)
                  for r in rails]  # fmt: skip
        lat.bar([x + (i - 1.5) * width for x in range(len(rails))], values, width, label=f"{mode} {stat}")
    lat.set_xticks(range(len(rails)), [f"rail {r} ms" for r in rails])
    lat.set_ylabel("ms per money call")
    lat.set_title("latency per money call")
    lat.legend(fontsize=8)
    for mode in ("direct", "gated"):
        for rail_ms in sorted({t.rail_ms for t in report.throughput}):
            points = sorted((t.agents, t.per_second) for t in report.throughput
                            if t.mode == mode and t.rail_ms == rail_ms)  # fmt: skip
            tput.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"{mode}, rail {rail_ms} ms")
    tput.set_xscale("log", base=2)
    tput.set_yscale("log")
    tput.set_xlabel("concurrent agents")
    tput.set_ylabel("money calls / s")
    tput.set_title("throughput (1 rail worker)")
    tput.legend(fontsize=8)
    workers = sorted(report.decisions)
    gates.bar([str(w) for w in workers], [report.decisions[w] for w in workers])
    gates.set_xlabel("gate workers")
    gates.set_ylabel("decisions / s")
    gates.set_title("gate decisions (gates alone)")
    fig.suptitle("Interlock performance bench: direct vs gated, sandbox rail")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
