"""`interlock bench scenarios` and `interlock bench perf`: run, print, and regenerate RESULTS.md sections."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

import click

from interlock.results import REPO, RESULTS, write_section

logger = logging.getLogger(__name__)

SCENARIO_PLOT = Path("docs/bench-scenarios.png")
PERF_PLOT = Path("docs/bench-perf.png")


@click.group("bench")
def bench_group() -> None:
    """The scenario benchmark and the performance bench (SPEC §13), direct vs gated."""


@bench_group.command("scenarios")
@click.option("--only", multiple=True, help="scenario id, id prefix (B3) or family letter (D); repeatable")
@click.option("--seed", type=int, default=7, show_default=True, help="seed of the sandbox fault generator")
@click.option("--work", type=click.Path(file_okay=False, path_type=Path), help="data directory (default: a temp dir)")
@click.option("--results", type=click.Path(dir_okay=False, path_type=Path), default=RESULTS, show_default=True)
@click.option("--no-write", is_flag=True, help="print the tables; leave RESULTS.md and the plot alone")
def scenarios_command(only: tuple[str, ...], seed: int, work: Path | None, results: Path, no_write: bool) -> None:
    """Run the 30 scenarios in both modes and write the `scenarios` section of RESULTS.md."""
    from bench.metrics import judge
    from bench.report import plot, render
    from bench.run import run_scenario
    from bench.scenario import load_scenarios

    scenarios = load_scenarios(only=list(only) or None)
    if not scenarios:
        raise click.UsageError(f"no scenario matches {list(only)}")
    base = work or Path(tempfile.mkdtemp(prefix="interlock-bench-"))
    started = time.monotonic()
    verdicts = []
    for scenario in scenarios:
        for run in run_scenario(scenario, base, seed=seed):
            verdict = judge(run)
            verdicts.append(verdict)
            flag = "BROKEN" if verdict.violated else ("FALSE-BLOCK" if verdict.false_block else "ok")
            click.echo(f"{scenario.id:<42} {run.mode:<6} moved {verdict.moved:>9} entities {verdict.entities:>3} "
                       f"{flag:<11} {verdict.states} {'; '.join(verdict.notes)}")  # fmt: skip
    elapsed = time.monotonic() - started
    (base / "verdicts.json").write_text(json.dumps([dataclasses.asdict(v) for v in verdicts], indent=1))
    command = "interlock bench scenarios" + "".join(f" --only {o}" for o in only) + f" --seed {seed}"
    image = None if no_write else plot(verdicts, scenarios, REPO / SCENARIO_PLOT)
    text = render(verdicts, scenarios, seed=seed, command=command,
                  plot=SCENARIO_PLOT if image is not None else None, elapsed_s=elapsed)  # fmt: skip
    click.echo(text)
    if not no_write:
        write_section("scenarios", text, results)
        click.echo(f"wrote the scenarios section of {results}")
    if work is None:
        shutil.rmtree(base, ignore_errors=True)


@bench_group.command("perf")
@click.option("--latency-ms", type=int, default=200, show_default=True, help="the slow rail's added latency")
@click.option("--calls", type=int, default=200, show_default=True, help="sequential calls per latency sample")
@click.option("--slow-calls", type=int, default=30, show_default=True, help="sequential calls at the slow rail")
@click.option("--concurrency", default="1,8,32", show_default=True, help="concurrent agents for the throughput runs")
@click.option("--gate-workers", "gate_counts", default="1,2,4", show_default=True)
@click.option("--decisions", type=int, default=400, show_default=True, help="proposals per gate-worker sample")
@click.option("--work", type=click.Path(file_okay=False, path_type=Path), help="data directory (default: a temp dir)")
@click.option("--results", type=click.Path(dir_okay=False, path_type=Path), default=RESULTS, show_default=True)
@click.option("--no-write", is_flag=True, help="print the tables; leave RESULTS.md and the plot alone")
def perf_command(latency_ms: int, calls: int, slow_calls: int, concurrency: str, gate_counts: str, decisions: int,
                 work: Path | None, results: Path, no_write: bool) -> None:  # fmt: skip
    """Direct vs gated latency and throughput in one run, and write the `perf` section of RESULTS.md."""
    from bench.perf import PerfConfig, run_perf
    from bench.perf_report import plot, render

    config = PerfConfig(latency_ms=latency_ms, calls=calls, slow_calls=slow_calls,
                        concurrency=tuple(int(c) for c in concurrency.split(",")),
                        gate_workers=tuple(int(g) for g in gate_counts.split(",")), decisions=decisions)  # fmt: skip
    base = work or Path(tempfile.mkdtemp(prefix="interlock-perf-"))
    report = run_perf(config, base, echo=click.echo)
    command = (f"interlock bench perf --latency-ms {latency_ms} --calls {calls} --slow-calls {slow_calls} "
               f"--concurrency {concurrency} --gate-workers {gate_counts} --decisions {decisions}")  # fmt: skip
    image = None if no_write else plot(report, REPO / PERF_PLOT)
    text = render(report, command=command, plot=PERF_PLOT if image is not None else None)
    click.echo(text)
    if not no_write:
        write_section("perf", text, results)
        click.echo(f"wrote the perf section of {results}")
    if work is None:
        shutil.rmtree(base, ignore_errors=True)
