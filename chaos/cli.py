"""`interlock chaos`: the SIGKILL matrix, the pause cells (--pause) and random kills, with machine-written
results."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import click

from chaos.cells import FAULTS, KILL_POINTS, TOOLS, WAKES, build_cells, build_pause_cells, select
from chaos.matrix import run_matrix, save, summarise, summarise_pause
from interlock.results import commit_id, write_section


@click.command("chaos")
@click.option("--trials", type=click.IntRange(1), default=10, show_default=True, help="trials per cell")
@click.option("--points", multiple=True, type=click.Choice(KILL_POINTS), help="kill points (default: all)")
@click.option("--faults", multiple=True, type=click.Choice(FAULTS), help="faults (default: all)")
@click.option("--seed", type=int, default=20261130, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=Path("data/chaos"), show_default=True)
@click.option("--parallel", type=click.IntRange(1, 8), default=2, show_default=True, help="trials at once")
@click.option("--proxy", is_flag=True, help="run every trial in proxy mode (through the sandbox's MCP front)")
@click.option("--mutation", default=None, help="run a deliberately broken build (INTERLOCK_MUTATION)")
@click.option("--pause", is_flag=True,
              help="instead of the kill matrix: the pause cells (rail worker SIGSTOPped, standby takeover, SIGCONT)")
@click.option("--tools", multiple=True, type=click.Choice(sorted(TOOLS)),
              help="money tools of the pause cells (default: refund and settlement)")
@click.option("--wakes", multiple=True, type=click.Choice(WAKES),
              help="when the paused worker is woken: late (after the intent is settled) or early (default: both)")
@click.option("--random", "random_trials", type=click.IntRange(0), default=0,
              help="instead of the matrix: M trials of random kills during a burst of concurrent calls")
@click.option("--calls", type=click.IntRange(2, 64), default=12, show_default=True, help="calls per random burst")
@click.option("--write-results/--no-write-results", default=True, show_default=True,
              help="regenerate RESULTS.md's chaos section")  # fmt: skip
def chaos_command(trials: int, points: tuple[str, ...], faults: tuple[str, ...], seed: int, out: Path,
                  parallel: int, proxy: bool, mutation: str | None, pause: bool, tools: tuple[str, ...],
                  wakes: tuple[str, ...], random_trials: int, calls: int, write_results: bool) -> None:  # fmt: skip
    """SIGKILL every actor at every failpoint under every rail fault (or, with --pause, SIGSTOP the rail
    worker mid-call and wake it after a standby took over), and judge what is left."""
    if random_trials:
        from chaos.random_mode import run_random

        sys.exit(run_random(random_trials, calls, seed, out.resolve(), parallel=parallel, write_results=write_results))
    if (tools or wakes) and not pause:
        raise click.UsageError("--tools and --wakes select pause cells: use them with --pause")
    cells, skipped = (build_pause_cells(), []) if pause else build_cells()
    chosen = select(cells, list(points), list(faults), [TOOLS[t] for t in tools], list(wakes))
    if not chosen:
        raise click.UsageError("no cell matches those --points, --faults, --tools and --wakes")
    click.echo(f"chaos: {len(chosen)} cells x {trials} trials = {len(chosen) * trials} trials, {parallel} at once")
    started = time.monotonic()
    results = run_matrix(chosen, trials, seed, out.resolve(), parallel=parallel, mutation=mutation, proxy=proxy)
    wall = time.monotonic() - started
    path = save(results, out)
    command = "interlock chaos " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    if pause:
        report = summarise_pause(results, command=command.strip(), seed=seed, wall_s=wall, commit=commit_id(),
                                 mutation=mutation)  # fmt: skip
    else:
        report = summarise(results, skipped if not points and not faults else [], command=command.strip(), seed=seed,
                           wall_s=wall, commit=commit_id(), mutation=mutation)  # fmt: skip
    if write_results and not mutation and not proxy:
        write_section("chaos-pause" if pause else "chaos", report)
    bad = [r for r in results if r.violations]
    click.echo(f"chaos: {len(results)} trials, {len(bad)} with violations; details in {path}")
    for r in bad[:10]:
        click.echo(f"  {r.cell} #{r.trial} seed {r.seed}: {'; '.join(r.violations)[:240]}")
    passed = len(results) - len(bad)
    click.echo(f"chaos: {passed} passed, {len(bad)} failed")
    sys.exit(1 if bad else 0)
