"""`interlock chaos`: the SIGKILL matrix, the pause cells (--pause), the burst cells (--burst) and random
kills, with machine-written results."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import click

from chaos.cells import (
    BURST_CALLS,
    BURST_IN_FLIGHT,
    FAULTS,
    KILL_POINTS,
    TOOLS,
    WAKES,
    WEBHOOK_FAULTS,
    build_burst_cells,
    build_cells,
    build_pause_cells,
    build_webhook_cells,
    select,
)
from chaos.matrix import run_matrix, save, summarise, summarise_burst, summarise_pause, summarise_webhooks
from chaos.mutants import MUTANTS
from interlock.failpoints import WEBHOOK_POINTS
from interlock.results import commit_id, write_section


@click.command("chaos")
@click.option("--trials", type=click.IntRange(1), default=10, show_default=True, help="trials per cell")
@click.option("--points", multiple=True, type=click.Choice([*KILL_POINTS, *WEBHOOK_POINTS]),
              help="kill points (default: all)")
@click.option("--faults", multiple=True, type=click.Choice([*FAULTS, *WEBHOOK_FAULTS]), help="faults (default: all)")
@click.option("--seed", type=int, default=20261130, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=Path("data/chaos"), show_default=True)
@click.option("--parallel", type=click.IntRange(1, 8), default=2, show_default=True, help="trials at once")
@click.option("--proxy", is_flag=True, help="run every trial in proxy mode (through the sandbox's MCP front)")
@click.option("--mutation", type=click.Choice(sorted(MUTANTS)), default=None,
              help="run every trial against a deliberately broken copy of the tree (chaos/mutants.py)")
@click.option("--mutants", "self_test", is_flag=True,
              help="instead of the matrix: apply each invariant mutant and show what catches it")
@click.option("--races", type=click.IntRange(0), default=0,
              help="instead of the matrix: N operations, each sent by --race-agents agents at once")
@click.option("--race-agents", type=click.IntRange(2, 32), default=8, show_default=True,
              help="--races: agents sending every operation")
@click.option("--soak", type=click.FloatRange(0), default=0,
              help="instead of the matrix: MINUTES of steady load, a random actor SIGKILLed every 20-60 s")
@click.option("--redis-load", type=click.IntRange(0), default=0,
              help="instead of the matrix: N refunds from 8 agents while redis-server is SIGKILLed 3-5 times, "
                   "then N more while it is paused past the outcome deadline")
@click.option("--pause", is_flag=True,
              help="instead of the kill matrix: the pause cells (rail worker SIGSTOPped, standby takeover, SIGCONT)")
@click.option("--burst", is_flag=True,
              help="instead of the kill matrix: the burst cells (rail worker SIGKILLed with many calls in flight)")
@click.option("--webhooks", is_flag=True,
              help="instead of the kill matrix: the webhook cells (the receiver SIGKILLed mid-delivery, the money "
                   "followed through its lifecycle, forged deliveries)")
@click.option("--machine-loss", is_flag=True,
              help="instead of the kill matrix: a whole shard SIGKILLed under load, its disk deleted, restored on a "
                   "new machine from a lagging Litestream replica (ADR 0029)")
@click.option("--tools", multiple=True, type=click.Choice(sorted(TOOLS)),
              help="money tools of the pause, burst or machine-loss cells (default: refund, settlement and payout)")
@click.option("--wakes", multiple=True, type=click.Choice(WAKES),
              help="when the paused worker is woken: late (after the intent is settled) or early (default: both)")
@click.option("--random", "random_trials", type=click.IntRange(0), default=0,
              help="instead of the matrix: M trials of random kills during a burst of concurrent calls")
@click.option("--calls", type=click.IntRange(2, 64), default=None,
              help=f"calls per burst (random kills: 12; --burst: {BURST_CALLS})")
@click.option("--in-flight", type=click.IntRange(1, 64), default=BURST_IN_FLIGHT, show_default=True,
              help="--burst: the rail worker dies on the first call that finds this many in flight")
@click.option("--write-results/--no-write-results", default=True, show_default=True,
              help="regenerate RESULTS.md's chaos section")  # fmt: skip
def chaos_command(trials: int, points: tuple[str, ...], faults: tuple[str, ...], seed: int, out: Path,
                  parallel: int, proxy: bool, mutation: str | None, pause: bool, burst: bool, tools: tuple[str, ...],
                  webhooks: bool, wakes: tuple[str, ...], random_trials: int, calls: int | None, in_flight: int,
                  write_results: bool, self_test: bool, races: int, race_agents: int,
                  redis_load: int, soak: float, machine_loss: bool) -> None:  # fmt: skip
    """SIGKILL every actor at every failpoint under every rail fault (or, with --pause, SIGSTOP the rail
    worker mid-call and wake it after a standby took over; with --burst, SIGKILL it with many calls in
    flight), and judge what is left."""
    families = (pause, burst, webhooks, bool(random_trials), self_test, bool(races), bool(redis_load), bool(soak),
                machine_loss)  # fmt: skip
    if sum(families) > 1:
        raise click.UsageError("--pause, --burst, --webhooks, --random, --mutants, --races, --redis-load, --soak and "
                               "--machine-loss are separate families: choose one")  # fmt: skip
    if machine_loss:
        sys.exit(_machine_loss(trials, seed, out.resolve(), parallel=parallel, write_results=write_results,
                               tools=tools))  # fmt: skip
    if soak:
        sys.exit(_soak(soak, seed, out.resolve(), write_results=write_results))
    if redis_load:
        sys.exit(_redis_load(redis_load, seed, out.resolve(), write_results=write_results))
    if races:
        sys.exit(_races(races, race_agents, seed, out.resolve(), write_results=write_results))
    if self_test:
        sys.exit(_self_test(seed, out.resolve(), write_results=write_results))
    if random_trials:
        from chaos.random_mode import run_random

        sys.exit(run_random(random_trials, calls or 12, seed, out.resolve(), parallel=parallel,
                            write_results=write_results))  # fmt: skip
    if tools and not (pause or burst or webhooks):
        raise click.UsageError("--tools selects pause, burst or webhook cells: use it with --pause, --burst or "
                               "--webhooks")  # fmt: skip
    if wakes and not pause:
        raise click.UsageError("--wakes selects pause cells: use it with --pause")
    if (burst or webhooks) and proxy:
        raise click.UsageError("the burst and webhook cells run against the sandbox's REST rail only: drop --proxy")
    if webhooks and points and not set(points) <= set(WEBHOOK_POINTS):
        raise click.UsageError(f"the webhook cells' kill points are {', '.join(WEBHOOK_POINTS)}")
    skipped: list[tuple[str, str, str]] = []
    if burst:
        try:
            cells = build_burst_cells(calls or BURST_CALLS, in_flight)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    elif pause:
        cells = build_pause_cells()
    elif webhooks:
        cells = build_webhook_cells()
    else:
        cells, skipped = build_cells()
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
    elif burst:
        report = summarise_burst(results, command=command.strip(), seed=seed, wall_s=wall, commit=commit_id(),
                                 mutation=mutation)  # fmt: skip
    elif webhooks:
        report = summarise_webhooks(results, command=command.strip(), seed=seed, wall_s=wall, commit=commit_id())
    else:
        report = summarise(results, skipped if not points and not faults else [], command=command.strip(), seed=seed,
                           wall_s=wall, commit=commit_id(), mutation=mutation)  # fmt: skip
    if write_results and not mutation and not proxy:
        section = "chaos-pause" if pause else "chaos-burst" if burst else "chaos-webhooks" if webhooks else "chaos"
        write_section(section, report)
    bad = [r for r in results if r.violations]
    click.echo(f"chaos: {len(results)} trials, {len(bad)} with violations; details in {path}")
    for r in bad[:10]:
        click.echo(f"  {r.cell} #{r.trial} seed {r.seed}: {'; '.join(r.violations)[:240]}")
    passed = len(results) - len(bad)
    click.echo(f"chaos: {passed} passed, {len(bad)} failed")
    sys.exit(1 if bad else 0)


def _machine_loss(trials: int, seed: int, out: Path, *, parallel: int, write_results: bool,
                  tools: tuple[str, ...]) -> int:  # fmt: skip
    from chaos.machine_loss import machine_loss_cells
    from chaos.machine_loss import summarise as summarise_machine_loss

    cells = [c for c in machine_loss_cells() if not tools or c.key.rsplit("|", 1)[1] in tools]
    click.echo(f"chaos: machine loss, {len(cells)} cells (money tool x replica kind) x {trials} trials, "
               f"{parallel} at once")  # fmt: skip
    started = time.monotonic()
    results = run_matrix(cells, trials, seed, out, parallel=parallel)
    wall = time.monotonic() - started
    path = save(results, out)
    command = "interlock chaos " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    report = summarise_machine_loss(results, command=command.strip(), seed=seed, wall_s=wall, commit=commit_id())
    if write_results:
        write_section("chaos-machine-loss", report)
    bad = [r for r in results if r.violations]
    click.echo(next(line for line in report.splitlines() if "machine loss:" in line).strip("-* "))
    for r in bad[:10]:
        click.echo(f"  {r.cell} #{r.trial} seed {r.seed}: {'; '.join(r.violations)[:240]}")
    click.echo(f"chaos: {len(results) - len(bad)} passed, {len(bad)} failed; details in {path}")
    return 1 if bad else 0


def _races(operations: int, agents: int, seed: int, out: Path, *, write_results: bool) -> int:
    from chaos.races import run_races
    from chaos.races import summarise as summarise_races

    click.echo(f"races: {operations} operations x {agents} agents, 2 gate workers")
    result = run_races(operations, agents, out, seed=seed)
    command = "interlock chaos " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    if write_results:
        write_section("races", summarise_races(result, command=command.strip(), commit=commit_id()))
    click.echo(result.line())
    for violation in result.violations[:10]:
        click.echo(f"  {violation}")
    return 1 if result.violations else 0


def _redis_load(refunds: int, seed: int, out: Path, *, write_results: bool) -> int:
    import random

    from chaos.redis_load import run_redis_load
    from chaos.redis_load import summarise as summarise_redis

    kills = random.Random(seed).randint(3, 5)
    results = [run_redis_load(refunds, 8, out, mode="kill", outages=kills, seed=seed),
               run_redis_load(refunds, 8, out, mode="pause", outages=2, seed=seed + 1)]  # fmt: skip
    command = "interlock chaos " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    if write_results:
        write_section("redis", summarise_redis(results, command=command.strip(), commit=commit_id()))
    for result in results:
        click.echo(result.line())
        for violation in result.violations[:10]:
            click.echo(f"  {violation}")
    return 1 if any(r.violations for r in results) else 0


def _soak(minutes: float, seed: int, out: Path, *, write_results: bool) -> int:
    from chaos.soak import plot, run_soak
    from chaos.soak import summarise as summarise_soak
    from interlock.results import RESULTS

    click.echo(f"soak: {minutes:g} minutes of steady load, a random actor SIGKILLed every 20-60 s")
    result = run_soak(minutes, out, seed=seed)
    image = None
    if write_results:
        image_path = RESULTS.parent / "docs" / "soak-rss.png"
        plot(result, image_path)
        image = image_path.relative_to(RESULTS.parent).as_posix()
    command = "interlock chaos " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    if write_results:
        write_section("soak", summarise_soak(result, command=command.strip(), commit=commit_id(), image=image))
    click.echo(result.line())
    for name, (first, last) in sorted(result.growth_kib().items()):
        click.echo(f"  {name}: RSS {first / 1024:.1f} -> {last / 1024:.1f} MiB")
    for violation in result.violations[:10]:
        click.echo(f"  {violation}")
    return 1 if result.violations else 0


def _self_test(seed: int, out: Path, *, write_results: bool) -> int:
    """Every invariant mutant against what must catch it; exit status 1 when one got through."""
    from chaos.mutants import MUTANTS, check, summarise
    from chaos.trial import run_mutant_cell

    results = []
    for mutant in MUTANTS.values():
        result = check(mutant, out / "mutants", seed=seed, run_cell=run_mutant_cell)
        click.echo(f"  {mutant.name}: {'caught' if result.caught else 'NOT CAUGHT'} ({result.seconds}s) by {result.by}")
        results.append(result)
    command = "interlock chaos " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    report = summarise(results, command=command.strip(), commit=commit_id())
    if write_results:
        write_section("mutants", report)
    caught = sum(r.caught for r in results)
    click.echo(f"invariant mutants: {caught}/{len(results)} caught")
    return 0 if caught == len(results) else 1


@click.command("fuzz")
@click.option("--inputs", "n", type=click.IntRange(1), default=10_000, show_default=True, help="hostile inputs to send")
@click.option("--seed", type=int, default=20261130, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=Path("data/fuzz"), show_default=True)
@click.option("--write/--no-write", default=True, show_default=True, help="regenerate RESULTS.md's fuzz section")
@click.option("--flood", is_flag=True, help="instead: flood each HTTP listener (ingress, webhooks, console) with "
              "hostile connections while a real client is timed; writes RESULTS.md's flood section")
@click.option("--hostile", type=click.IntRange(1), default=2600, show_default=True,
              help="with --flood: hostile connections the attacker keeps trying to hold open at once (the verdict "
              "asks for 2,000 held)")
@click.option("--requests", type=click.IntRange(2), default=30, show_default=True,
              help="with --flood: real requests timed per listener")
@click.option("--max-connections", type=click.IntRange(2), default=4096, show_default=True,
              help="with --flood: each listener's INTERLOCK_HTTP_MAX_CONNECTIONS")
def fuzz_command(n: int, seed: int, out: Path, write: bool, flood: bool, hostile: int, requests: int,
                 max_connections: int) -> None:  # fmt: skip
    """Throw malformed tool arguments, JSON-RPC frames and raw HTTP at the ingress (HTTP and stdio) of a real
    stack; pass only if it never dies, stays bounded, answers each with a clear error and records nothing. With
    --flood, hold every listener with hostile connections instead and time a real client's requests."""
    if flood:
        from chaos.flood import flood_main

        sys.exit(flood_main(hostile, requests, out, write=write, max_connections=max_connections))
    from chaos.fuzz import fuzz_main

    sys.exit(fuzz_main(n, seed, out, write=write))
