"""The performance bench's plot (docs/bench-perf.png): latency, end-to-end throughput, the rail worker alone,
and the gates alone."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.perf import PerfReport


def plot(report: PerfReport, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, tput, alone, gates) = plt.subplots(1, 4, figsize=(18, 4))
    _latency(lat, report)
    _throughput(tput, report)
    _rail_alone(alone, report)
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


def _latency(ax: Any, report: PerfReport) -> None:
    rails = sorted({s.rail_ms for s in report.latency})
    width = 0.2
    for i, (mode, stat) in enumerate((("direct", "p50"), ("direct", "p99"), ("gated", "p50"), ("gated", "p99"))):
        values = [next((getattr(s, stat) for s in report.latency if s.mode == mode and s.rail_ms == r), 0)
                  for r in rails]  # fmt: skip
        ax.bar([x + (i - 1.5) * width for x in range(len(rails))], values, width, label=f"{mode} {stat}")
    ax.set_xticks(range(len(rails)), [f"rail {r} ms" for r in rails])
    ax.set_ylabel("ms per money call")
    ax.set_title("latency per money call")
    ax.legend(fontsize=8)


def _throughput(ax: Any, report: PerfReport) -> None:
    for mode in ("direct", "gated"):
        for rail_ms in sorted({t.rail_ms for t in report.throughput}):
            points = sorted((t.agents, t.per_second) for t in report.throughput
                            if t.mode == mode and t.rail_ms == rail_ms)  # fmt: skip
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"{mode}, rail {rail_ms} ms")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("concurrent agents")
    ax.set_ylabel("money calls / s")
    ax.set_title("end-to-end throughput")
    ax.legend(fontsize=8)


def _rail_alone(ax: Any, report: PerfReport) -> None:
    latency = report.config.latency_ms
    levels = sorted({s.concurrency for s in report.rail_alone})
    for rail in sorted({s.rail for s in report.rail_alone}):
        points = sorted((s.concurrency, s.per_second) for s in report.rail_alone if s.rail == rail)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"{rail} rail")
    if levels and latency:
        ax.plot(levels, [c * 1000 / latency for c in levels], linestyle=":", color="grey", label="ceiling")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("INTERLOCK_RAIL_CONCURRENCY")
    ax.set_ylabel("money calls / s")
    ax.set_title(f"rail worker alone ({latency} ms rail)")
    ax.legend(fontsize=8)
