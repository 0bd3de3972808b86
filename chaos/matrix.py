"""Run the chaos matrix and write its results: a JSON file per run and RESULTS.md's chaos section."""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from chaos.burst import run_burst_trial
from chaos.cells import BURST_CONCURRENCY, BURST_PROFILES, BURST_TIMINGS, RAIL_LATENCY, WAKES, Cell
from chaos.machine_loss import run_machine_loss_trial
from chaos.pause import run_pause_trial
from chaos.trial import TrialResult, run_trial
from chaos.webhooks import run_webhook_trial

RUNNERS = {"kill": run_trial, "pause": run_pause_trial, "burst": run_burst_trial, "webhook": run_webhook_trial,
           "machine_loss": run_machine_loss_trial}


def run_matrix(cells: list[Cell], trials: int, seed: int, out: Path, *, parallel: int = 2, mutation: str | None = None,
               progress: bool = True, proxy: bool = False) -> list[TrialResult]:  # fmt: skip
    plan = [(cell, t) for cell in cells for t in range(1, trials + 1)]
    rng = random.Random(seed)
    seeds = {(cell.key, t): rng.randrange(1, 2**31) for cell, t in plan}
    results: list[TrialResult] = []
    columns = (TextColumn("chaos"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[last]}"))  # fmt: skip
    with Progress(*columns, disable=not progress) as bar, ThreadPoolExecutor(max_workers=parallel) as pool:
        task = bar.add_task("trials", total=len(plan), last="")
        futures = {pool.submit(RUNNERS[cell.action], cell, t, seeds[(cell.key, t)], out / "trials", mutation=mutation,
                               proxy=proxy): cell for cell, t in plan}  # fmt: skip
        for future in as_completed(futures):
            result = future.result()
            results.append(result)
            mark = "ok" if not result.violations else f"VIOLATION {result.violations[0][:60]}"
            bar.update(task, advance=1, last=f"{result.cell} #{result.trial}: {mark}")
    results.sort(key=lambda r: (r.cell, r.trial))
    return results


def save(results: list[TrialResult], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"chaos-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps([asdict(r) for r in results], indent=1), encoding="utf-8")
    return path


def summarise(results: list[TrialResult], skipped: list[tuple[str, str, str]], *, command: str, seed: int,
              wall_s: float, commit: str, mutation: str | None = None) -> str:  # fmt: skip
    by_cell: dict[str, list[TrialResult]] = defaultdict(list)
    for r in results:
        by_cell[r.cell].append(r)
    violations = sum(len(r.violations) > 0 for r in results)
    landed = sum(r.kill_landed for r in results)
    preempted = sum(r.preempted is not None for r in results)
    lines = [
        "## Chaos matrix",
        "",
        "Evidence class: **real process** × **sandbox rail** × **scripted agent**. Every actor is its own OS",
        "process (redis-server, sandbox, rail worker, gate worker, reconciler, HTTP ingress); one is SIGKILLed",
        "at its failpoint (INTERLOCK_KILL_AT), or redis-server is SIGKILLed while the money call is in flight.",
        "Each trial has a fresh data directory. The agent is a real MCP client over streamable HTTP.",
        "",
        f"- command: `{command}`",
        f"- seed: {seed}; commit: {commit}; date: {time.strftime('%Y-%m-%d')}; wall time: {wall_s / 60:.1f} min",
        f"- **trials: {len(results)}; trials with a violation: {violations}; kills landed: {landed}; "
        f"pre-empted: {preempted}**",
    ]
    if mutation:
        lines.append(f"- **MUTATED BUILD** (mutant `{mutation}`, chaos/mutants.py): violations are expected here")
    lines += [
        "",
        "Expected in every cell: at most one rail entity carries the stamp; every intent needs nothing more",
        "from the rail (QUARANTINED allowed only under partition); ledger APPLIED ⇔ the stamped entity",
        "exists; the audit chain verifies; the aimed kill landed. Observed states are `state; entities`.",
        "",
        "| kill point | fault | trials | after recovery | after retry | violations | landed / pre-empted | s/trial |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(by_cell):
        rs = by_cell[key]
        point, fault = key.split("|")
        lines.append(
            f"| {point} | {fault} | {len(rs)} | {_mode([r.after_recovery for r in rs])} | "
            f"{_mode([r.after_retry for r in rs])} | {sum(len(r.violations) > 0 for r in rs)} | "
            f"{sum(r.kill_landed for r in rs)} / {sum(r.preempted is not None for r in rs)} | "
            f"{sum(r.seconds for r in rs) / len(rs):.1f} |"
        )
    lines += _violations(results)
    if skipped:
        lines += ["", "Pairs not run, and why:", ""]
        lines += [f"- {p} × {f}: {why}" for p, f, why in skipped]
    return "\n".join(lines)


def summarise_pause(results: list[TrialResult], *, command: str, seed: int, wall_s: float, commit: str,
                    mutation: str | None = None) -> str:  # fmt: skip
    by_cell: dict[str, list[TrialResult]] = defaultdict(list)
    for r in results:
        by_cell[r.cell].append(r)
    violations = sum(len(r.violations) > 0 for r in results)
    lines = [
        "## Chaos: a paused rail worker (SIGSTOP, takeover, SIGCONT)",
        "",
        "Evidence class: **real process** × **sandbox rail** × **scripted agent**. A kill is not a pause: here the",
        "rail worker is SIGSTOPped at its failpoint (INTERLOCK_PAUSE_AT) in the middle of a money call, as a GC",
        "pause, VM steal or I/O stall would stop it. A standby `rail-worker --wait-lease` takes the lease once it",
        "has expired, and the stopped worker is woken with SIGCONT: **late** — past the lease TTL plus the",
        "reconciler's minimum delay, once the intent is definite without it — or **early** — the moment the",
        "standby's retry has started (early cells run with a 250 ms rail timeout, so that the worker's lease can",
        "run out before a stall check keyed to its commit would stop it sending). Each trial has a fresh data",
        "directory and its own real processes; the agent is a real MCP client over streamable HTTP.",
        "",
        f"- command: `{command}`",
        f"- seed: {seed}; commit: {commit}; date: {time.strftime('%Y-%m-%d')}; wall time: {wall_s / 60:.1f} min",
        f"- **trials: {len(results)}; trials with a violation: {violations}; pauses landed: "
        f"{sum(r.kill_landed for r in results)}; pre-empted: {sum(r.preempted is not None for r in results)}**",
    ]
    if mutation:
        lines.append(f"- **MUTATED BUILD** (mutant `{mutation}`, chaos/mutants.py): violations are expected here")
    lines += [
        "",
        "Expected in every cell, besides the kill matrix's checks (never two entities, nothing left unsettled,",
        "ledger APPLIED ⇔ entity, audit chain intact): a standby took the lease; the woken worker stopped, made no",
        "ledger write, and nothing it sent after waking became a second stamped entity. `lease out / woke` are",
        "mean ms from the stalled attempt's IN_FLIGHT commit to the stopped worker's lease running out and to its",
        "SIGCONT; `woke with` is the intent's state#attempt at SIGCONT; `old attempts` are the woken worker's",
        "attempt rows (FENCED_NOT_SENT: it did not send).",
        "",
        "| wake | tool | pause point | fault | trials | lease out / woke ms | woke with | old attempts | "
        "woken worker exit | after retry | violations | paused / pre-empted | s/trial |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(by_cell, key=lambda k: (WAKES.index(k.split("|")[4]), k)):
        rs = by_cell[key]
        _, point, fault, tool, wake = key.split("|")[:5]
        lines.append(
            f"| {wake} | {tool} | {point} | {fault} | {len(rs)} | {_mean(rs, 'lease_left_ms')} / "
            f"{_mean(rs, 'stalled_ms')} | "
            f"{_mode([str(r.pause.get('woke_with', '-')) for r in rs])} | "
            f"{_mode([' '.join(r.pause.get('old_attempts', [])) or '-' for r in rs])} | "
            f"{_mode([str(r.pause.get('exit_code', '-')) for r in rs])} | {_mode([r.after_retry for r in rs])} | "
            f"{sum(len(r.violations) > 0 for r in rs)} | {sum(r.kill_landed for r in rs)} / "
            f"{sum(r.preempted is not None for r in rs)} | {sum(r.seconds for r in rs) / len(rs):.1f} |"
        )
    return "\n".join(lines + _violations(results))


def summarise_burst(results: list[TrialResult], *, command: str, seed: int, wall_s: float, commit: str,
                    mutation: str | None = None) -> str:  # fmt: skip
    by_cell: dict[str, list[TrialResult]] = defaultdict(list)
    for r in results:
        by_cell[r.cell].append(r)
    violations = sum(len(r.violations) > 0 for r in results)
    left = [r.burst["unfinished"] for r in results if "unfinished" in r.burst]
    calls = sorted({int(r.burst["calls"]) for r in results if r.burst.get("calls")})
    needed = sorted({int(r.burst["needed"]) for r in results if r.burst.get("needed")})
    lines = [
        "## Chaos: the rail worker killed with many calls in flight",
        "",
        "Evidence class: **real process** × **sandbox rail** × **scripted agent**. Each trial: a fresh stack whose",
        f"rail worker keeps up to {BURST_CONCURRENCY} money calls in flight (INTERLOCK_RAIL_CONCURRENCY, ADR 0011) "
        "over a sandbox",
        f"rail that holds every money call {RAIL_LATENCY['params']['delay_ms']} ms before it answers "
        f"({BURST_PROFILES['slow'][0]['params']['delay_ms']} ms under `slow`, past the "
        f"{BURST_TIMINGS['INTERLOCK_RAIL_TIMEOUT_MS']} ms call",
        f"deadline); the agents fire {_joined(calls)} distinct money calls at once over real MCP sessions — refunds on",
        "distinct payments, or instant settlements told apart by `interlock_distinct_reason` — and the rail worker",
        "SIGKILLs itself at its failpoint on the first call that finds at least "
        f"{_joined(needed)} calls in flight (INTERLOCK_KILL_IN_FLIGHT;",
        "a call is in flight from its committed IN_FLIGHT row until its answer is in hand). It is restarted with",
        "`--wait-lease`; recovery abandons each IN_FLIGHT row only after its lease plus the call deadline and",
        "reconciles it by stamp; then every agent repeats its same call until the answer is definite.",
        "",
        f"- command: `{command}`",
        f"- seed: {seed}; commit: {commit}; date: {time.strftime('%Y-%m-%d')}; wall time: {wall_s / 60:.1f} min",
        f"- **trials: {len(results)}; trials with a violation: {violations}; kills landed: "
        f"{sum(r.kill_landed for r in results)}; calls left in flight by the kill: min {min(left, default=0)}, "
        f"max {max(left, default=0)}**",
    ]
    if mutation:
        lines.append(f"- **MUTATED BUILD** (mutant `{mutation}`, chaos/mutants.py): violations are expected here")
    lines += [
        "",
        "Expected in every trial, besides the kill matrix's checks on every intent (never two entities, nothing",
        "left unsettled, ledger APPLIED ⇔ entity, audit chain intact): each call became exactly one intent and at",
        "most one entity, and the kill landed with the calls it needed in flight. `in flight at kill` is per",
        "trial: the attempts the dead worker left unrecorded (IN_FLIGHT rows, read from the ledger the moment it",
        "died) / the worker's own count as it fired / the money calls the sandbox was still applying; `stamped`",
        "are the entities the rail had made by then. Observed states are `state ×n; entities`.",
        "",
        "| tool | kill point | fault | trials | in flight at kill: ledger / worker / at rail | stamped at kill | "
        "first answers | after recovery | after retry | violations | landed | s/trial |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(by_cell):
        rs = by_cell[key]
        _, point, fault, tool = key.split("|")[:4]
        seen = ", ".join(f"{r.burst.get('unfinished', '-')} / {r.burst.get('said') or '-'} / "
                         f"{r.burst.get('rail_pending', '-')}" for r in rs)  # fmt: skip
        lines.append(
            f"| {tool} | {point} | {fault} | {len(rs)} | {seen} | "
            f"{', '.join(str(r.burst.get('entities_at_kill', '-')) for r in rs)} | "
            f"{_mode([r.first_answer for r in rs])} | {_mode([r.after_recovery for r in rs])} | "
            f"{_mode([r.after_retry for r in rs])} | {sum(len(r.violations) > 0 for r in rs)} | "
            f"{sum(r.kill_landed for r in rs)} | {sum(r.seconds for r in rs) / len(rs):.1f} |"
        )
    return "\n".join(lines + _violations(results))


def summarise_webhooks(results: list[TrialResult], *, command: str, seed: int, wall_s: float, commit: str) -> str:
    by_cell: dict[str, list[TrialResult]] = defaultdict(list)
    for r in results:
        by_cell[r.cell].append(r)
    violations = sum(len(r.violations) > 0 for r in results)
    lines = [
        "## Chaos: the webhook receiver killed mid-delivery, and the lifecycle after APPLIED",
        "",
        "Evidence class: **real process** × **sandbox rail** × **scripted agent**. Each trial: a fresh stack of",
        "real processes with the webhook receiver (`interlock webhooks`), and a sandbox that delivers signed",
        "Razorpay-format webhooks to it, retrying with backoff as Razorpay does, and moves each entity through its",
        "lifecycle to the cell's fault (INTERLOCK_SANDBOX_LIFECYCLE_MS 1500; off under `ambiguous_504` alone). The",
        "money call is applied by the rail and answered 504. The receiver SIGKILLs itself on its first delivery at",
        "the kill point (`before_commit`: its inbox row written, not committed; `after_store_before_ack`:",
        "committed, not answered) and is restarted. The agent is a real MCP client over streamable HTTP; it asks",
        "`interlock_status`, then repeats its same call. Then four forged deliveries are posted (a wrong",
        "signature; an accepted event id replayed with the other final status; another merchant's stamp; another",
        "rail account).",
        "",
        f"- command: `{command}`",
        f"- seed: {seed}; commit: {commit}; date: {time.strftime('%Y-%m-%d')}; wall time: {wall_s / 60:.1f} min",
        f"- **trials: {len(results)}; trials with a violation: {violations}; kills landed: "
        f"{sum(r.kill_landed for r in results)}**",
        "",
        "Expected in every trial, besides the kill matrix's checks (never two entities, the intent settled, APPLIED",
        "⇔ the stamped entity, the audit chain intact): every delivery the sandbox saw acknowledged is in the inbox",
        "once, nothing else is, the one the receiver died on was delivered again and stored once, and the",
        "reconciler acted on every event; the intent stays APPLIED and its `rail_status` reaches the rail's final",
        "status; a person is asked exactly where the sandbox failed or reversed the money (`attention` rows = the",
        "sandbox's faulted entities), and `interlock_status` tells the agent ESCALATE_TO_OPERATOR there and only",
        "there; the forged deliveries are refused or ignored and change no intent, rail_status or history row.",
        "`agent told` is state / rail_status / caller_action of `interlock_status`; `after retry` is the answer to",
        "the agent's repeated call, then the ledger and the rail.",
        "",
        "| kill point | fault | tool | trials | after recovery | agent told | forged | after retry | violations | "
        "landed | s/trial |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(by_cell):
        rs = by_cell[key]
        _, point, fault, tool = key.split("|")[:4]
        lines.append(
            f"| {point} | {fault} | {tool} | {len(rs)} | {_mode([r.after_recovery for r in rs])} | "
            f"{_mode([str(r.webhook.get('told', '-')) for r in rs])} | "
            f"{_mode([str(r.webhook.get('forged', '-')) for r in rs])} | {_mode([r.after_retry for r in rs])} | "
            f"{sum(len(r.violations) > 0 for r in rs)} | {sum(r.kill_landed for r in rs)} | "
            f"{sum(r.seconds for r in rs) / len(rs):.1f} |"
        )
    return "\n".join(lines + _violations(results))


def _joined(values: list[int]) -> str:
    return "/".join(map(str, values)) or "?"


def _mean(results: list[TrialResult], name: str) -> str:
    values = [float(r.pause[name]) for r in results if name in r.pause]
    return f"{sum(values) / len(values):.0f}" if values else "-"


def _mode(values: list[str]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for v in values:
        counts[v] += 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])
    return "; ".join(f"{v} ×{n}" if len(top) > 1 else v for v, n in top[:2]).replace("|", "/")


def _violations(results: list[TrialResult]) -> list[str]:
    """The lines that list the first 20 trials with a violation (none when every trial passed)."""
    bad = [r for r in results if r.violations]
    if not bad:
        return []
    return ["", "Violations (first 20):", "",
            *[f"- {r.cell} #{r.trial} (seed {r.seed}): {'; '.join(r.violations)[:300]}" for r in bad[:20]]]
