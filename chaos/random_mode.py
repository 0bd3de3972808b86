"""`interlock chaos --random M`: run random-kill trials and write RESULTS.md's random-kill section."""

from __future__ import annotations

import json
import random
import shlex
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from chaos.random_kills import RandomTrial, run_random_trial
from interlock.results import commit_id, write_section


def run_random(trials: int, calls: int, seed: int, out: Path, *, parallel: int = 2, write_results: bool = True,
               progress: bool = True) -> int:  # fmt: skip
    rng = random.Random(seed)
    seeds = [rng.randrange(1, 2**31) for _ in range(trials)]
    started = time.monotonic()
    results: list[RandomTrial] = []
    with Progress(TextColumn("random kills"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=not progress) as bar, ThreadPoolExecutor(max_workers=parallel) as pool:  # fmt: skip
        task = bar.add_task("trials", total=trials)
        futures = [pool.submit(run_random_trial, i + 1, s, out / "random", calls=calls) for i, s in enumerate(seeds)]
        for future in as_completed(futures):
            results.append(future.result())
            bar.update(task, advance=1)
    results.sort(key=lambda r: r.trial)
    wall = time.monotonic() - started
    out.mkdir(parents=True, exist_ok=True)
    (out / f"random-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps([asdict(r) for r in results], indent=1), encoding="utf-8")
    report = summarise_random(results, command="interlock chaos " + " ".join(shlex.quote(a) for a in sys.argv[2:]),
                              seed=seed, wall_s=wall)  # fmt: skip
    if write_results:
        write_section("chaos-random", report)
    bad = [r for r in results if r.violations]
    for r in bad[:10]:
        click.echo(f"  random #{r.trial} seed {r.seed} killed {r.victim}: {'; '.join(r.violations)[:240]}")
    click.echo(f"random kills: {len(results) - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


def summarise_random(results: list[RandomTrial], *, command: str, seed: int, wall_s: float) -> str:
    victims = Counter(r.victim for r in results)
    bad = [r for r in results if r.violations]
    lines = [
        "## Chaos: random kills during a burst",
        "",
        "Evidence class: **real process** × **sandbox rail** × **scripted agent**. Each trial: a fresh stack with",
        "two gate workers; three agents send a burst of concurrent refunds (some identical across agents, which",
        "must land on one intent); one actor — chosen at random — is SIGKILLed at a random moment in the first",
        "2 s; everything that died is restarted; the agents repeat their calls until the answer is definite;",
        "every intent is judged (never two, never unknown, ledger ⇔ rail, audit chain).",
        "",
        f"- command: `{command.strip()}`",
        f"- seed: {seed}; commit: {commit_id()}; date: {time.strftime('%Y-%m-%d')}; wall time: {wall_s / 60:.1f} min",
        f"- **trials: {len(results)}; trials with a violation: {len(bad)}; intents judged: "
        f"{sum(r.intents for r in results)}; rail entities: {sum(r.entities for r in results)}**",
        "",
        "| actor killed | trials | violations |",
        "|---|---|---|",
    ]
    for victim, n in sorted(victims.items()):
        lines.append(f"| {victim} | {n} | {sum(1 for r in bad if r.victim == victim)} |")
    if bad:
        lines += ["", "Violations:", ""]
        lines += [f"- #{r.trial} seed {r.seed} ({r.victim}): {'; '.join(r.violations)[:300]}" for r in bad[:20]]
    return "\n".join(lines)
