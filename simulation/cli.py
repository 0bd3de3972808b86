"""`interlock simulate`: run seeds of the simulated deployment and report what the checker found (SPEC §19)."""

from __future__ import annotations

import faulthandler
import logging
import multiprocessing
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

import click

from interlock.results import commit_id, write_section
from ledger.states import TRANSITIONS
from simulation.run import FAULT_KINDS, FOCUS_KINDS, MAX_STEPS, SeedResult, quiet_logs, run_seed

HASH_SEED = "0"  # set iteration order is part of a trace: every run of a seed must see the same one


SEED_WALL_LIMIT_S = 300  # a seed that takes longer is hung (an actor blocked the one OS thread): say where, and stop


def _one(args: tuple[int, int, frozenset[str]]) -> SeedResult:
    quiet_logs()
    seed, steps, focus = args
    faulthandler.dump_traceback_later(SEED_WALL_LIMIT_S, exit=True)  # the stacks of a hung seed, then exit 1
    try:
        return run_seed(seed, max_steps=steps, focus=focus)
    finally:
        faulthandler.cancel_dump_traceback_later()


def run_seeds(seeds: range, *, steps: int, jobs: int, focus: frozenset[str] = frozenset()) -> list[SeedResult]:
    work = [(seed, steps, focus) for seed in seeds]
    if jobs <= 1:
        return [_one(w) for w in work]
    # A worker that dies (a hung seed's watchdog) breaks the pool loudly rather than leaving the run waiting.
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_one, work, chunksize=4))


def shrink(seed: int, steps: int, focus: frozenset[str] = frozenset()) -> tuple[frozenset[str], SeedResult]:
    """Drop fault kinds one at a time while the seed still fails: the smallest set of kinds that still breaks it."""
    disabled: frozenset[str] = frozenset()
    failing = run_seed(seed, max_steps=steps, focus=focus)
    for kind in FAULT_KINDS:
        if kind in focus:
            continue
        trial = run_seed(seed, max_steps=steps, disabled=disabled | {kind}, focus=focus)
        if not trial.ok:
            disabled, failing = disabled | {kind}, trial
    return disabled, failing


def edge_names() -> list[str]:
    return sorted(f"{state.value} -{event.value}-> {target.value}" for (state, event), target in TRANSITIONS.items())


@click.command("simulate")
@click.option("--seeds", "count", type=int, default=100, show_default=True, help="how many seeds to run")
@click.option("--seed-start", type=int, default=1, show_default=True, help="the first seed")
@click.option("--steps", type=int, default=MAX_STEPS, show_default=True, help="scheduling steps per seed, at most")
@click.option("--jobs", type=int, default=1, show_default=True, help="processes running seeds side by side")
@click.option("--verbose", is_flag=True, help="for one seed: the actors' logs and the end of its trace")
@click.option("--mutants", is_flag=True, help="re-introduce each known defect and find it (proof it can fail)")
@click.option("--only", multiple=True, help="with --mutants: only these mutants")
@click.option("--write-results", is_flag=True, help="write RESULTS.md's simulation section")
@click.option("--focus", "focus_kinds", multiple=True, type=click.Choice(FOCUS_KINDS),
              help="give every seed this ingredient (a fault kind on, a machine lost, ...), as a mutant's search does")
def simulate_command(count: int, seed_start: int, steps: int, jobs: int, verbose: bool, mutants: bool,
                     only: tuple[str, ...], write_results: bool, focus_kinds: tuple[str, ...]) -> None:  # fmt: skip
    """Run the money path's actors in one process under a seeded scheduler, with faults; exit 1 on any violation."""
    if os.environ.get("PYTHONHASHSEED") != HASH_SEED:
        os.execve(sys.executable, [sys.executable, "-m", "interlock.cli", *sys.argv[1:]],
                  {**os.environ, "PYTHONHASHSEED": HASH_SEED})  # fmt: skip
    if mutants:
        sys.exit(_mutants(list(only), write_results, jobs))
    focus = frozenset(focus_kinds)
    started = time.monotonic()
    if verbose:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        results = [run_seed(s, max_steps=steps, focus=focus) for s in range(seed_start, seed_start + count)]
    else:
        quiet_logs()
        results = run_seeds(range(seed_start, seed_start + count), steps=steps, jobs=jobs, focus=focus)
    wall = time.monotonic() - started
    failed = [r for r in results if not r.ok]
    for r in results if verbose else failed:
        click.echo(f"seed {r.seed}: trace {r.trace_hash}, {r.steps} steps, {r.money_calls} money calls, "
                   f"{sum(r.faults.values())} faults {dict(r.faults)}")  # fmt: skip
        for v in r.violations:
            click.echo(f"  VIOLATION {v}")
        if verbose:
            click.echo("  trace tail:\n    " + "\n    ".join(r.trace_tail[-40:]))
    for r in failed[:3]:
        disabled, smallest = shrink(r.seed, steps, focus)
        left = [k for k in FAULT_KINDS if k not in disabled]
        click.echo(f"seed {r.seed} still fails with only these fault kinds on: {', '.join(left)} "
                   f"({sum(smallest.faults.values())} faults); replay: interlock simulate --seed-start {r.seed} "
                   f"--seeds 1 --verbose{''.join(f' --focus {k}' for k in sorted(focus))}")  # fmt: skip
    calls = sum(r.money_calls for r in results)
    faults = sum(sum(r.faults.values()) for r in results)
    violations = sum(len(r.violations) for r in results)
    if wall:
        click.echo(f"{calls / wall:.0f} simulated money calls per second of wall time, {len(results) / wall:.1f} "
                   f"seeds per second, {jobs} job(s)")  # fmt: skip
    report = coverage(results)
    click.echo(report)
    summary = (f"simulation: {len(results)} seeds, {calls} money calls, {faults} faults injected, "
               f"{violations} violations")  # fmt: skip
    if write_results:
        write_section("simulation", _section(summary, report, results, wall, jobs, seed_start))
    click.echo(summary)
    sys.exit(1 if violations else 0)


def _mutants(only: list[str], write: bool, jobs: int = 1) -> int:
    """Each mutant's run of the simulator on a patched copy of the tree; 1 unless every one was found. With *jobs*,
    that many mutants are searched side by side (each search runs its seeds in a process of its own)."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from simulation.mutants import ALL, EVERY, Found, find, summarise

    unknown = [name for name in only if name not in EVERY]
    if unknown:
        raise click.BadParameter(f"no such mutant: {', '.join(unknown)} (known: {', '.join(EVERY)})",
                                 param_hint="--only")  # fmt: skip
    base = Path(tempfile.mkdtemp(prefix="sim-mutants-"))

    def search(name: str) -> Found:
        found = find(EVERY[name], base)
        click.echo(f"{name}: {'found by seed ' + str(found.seed) if found.found else 'NOT FOUND'} {found.violation}")
        return found

    with ThreadPoolExecutor(max(jobs, 1)) as pool:
        results = list(pool.map(search, only or list(ALL)))  # in the table's order, whichever ends first
    table = summarise(results)
    click.echo(table)
    if write and not only:
        write_section("simulation-mutants", "## Simulation mutants (`interlock simulate --mutants`)\n\nEvidence: "
                      f"**simulated**, commit {commit_id()}: each defect re-introduced into a copy of the tree, seeds "
                      "1, 2, ... run until one fails. A search with a focus gives every seed those ingredients "
                      "(`run_seed(focus=...)`); the rest of each seed is its own.\n\n" + table)  # fmt: skip
    return 0 if all(r.found for r in results) else 1


def coverage(results: list[SeedResult]) -> str:
    edges: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    operator: Counter[str] = Counter()
    for r in results:
        edges.update(r.edges)
        kinds.update(r.faults)
        operator.update(r.operator)
    names = edge_names()
    missing = [e for e in names if edges[e] == 0]
    lines = [f"state-machine edges taken: {len(names) - len(missing)} of {len(names)}"]
    if missing:
        lines.append("  never taken: " + "; ".join(missing))
    lines.append("faults injected by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    lines.append("operator actions: " + ", ".join(f"{k} {n}" for k, n in sorted(operator.items())))
    return "\n".join(lines)


def _section(summary: str, report: str, results: list[SeedResult], wall: float, jobs: int, start: int) -> str:
    calls = sum(r.money_calls for r in results)
    return "\n".join([
        "## Simulation (`interlock simulate`)",
        "",
        f"Evidence: **simulated** — every actor's production code in one process under a seeded scheduler, real "
        f"SQLite ledger files, a simulated Redis and rail (docs/simulation.md). Commit {commit_id()}, seeds "
        f"{start}..{start + len(results) - 1}, {jobs} job(s), {wall / 60:.1f} min of wall time, "
        f"{calls / wall if wall else 0:.0f} simulated money calls per second.",
        "",
        "```",
        report,
        summary,
        "```",
    ])  # fmt: skip
