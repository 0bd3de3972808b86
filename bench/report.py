"""The `scenarios` section of RESULTS.md and its plot, from the verdicts of one run."""

from __future__ import annotations

import datetime
from pathlib import Path

from bench.metrics import Summary, Verdict, summarize
from bench.scenario import FAMILIES, Scenario
from interlock.results import commit_id

MODES = ("direct", "gated", "task")
# The task mode is gated too, with the mandate requiring task binding (SPEC §10); "gated" has it off.
LABELS = {"direct": "direct", "gated": "gated, task binding off", "task": "gated, task binding required"}


def rupees(minor: int) -> str:
    return f"Rs {minor / 100:,.2f}"


def _row(label: str, s: Summary) -> str:
    utility = f"{s.utility_done}/{s.utility_total}" if s.utility_total else "-"
    attacks = f"{s.attack_success}/{s.attacks}" if s.attacks else "-"
    benign = f"{s.false_blocks}/{s.benign}" if s.benign else "-"
    return (f"| {label} | {attacks} | {utility} | {benign} | {rupees(s.money_at_risk)} | {s.dup_per_1k:.0f} "
            f"| {s.eo_violations} | {s.calls} | {s.p50_ms:.0f} / {s.p99_ms:.0f} |")  # fmt: skip


HEAD = ("| mode | attack success | utility under attack | false blocks (benign) | money at risk "
        "| duplicates per 1k entities | exactly-once violations | tool calls | latency p50 / p99 ms |\n"
        "|---|---|---|---|---|---|---|---|---|")


def render(verdicts: list[Verdict], scenarios: list[Scenario], *, seed: int, command: str, plot: Path | None,
           elapsed_s: float, purpose_check: str = "off") -> str:  # fmt: skip
    by_id = {s.id: s for s in scenarios}
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    g5 = purpose_check != "off"
    lines = [
        "## Scenario benchmark (direct vs gated, task binding off and required)"
        + (f", G5 purpose check on ({purpose_check} mode)" if g5 else ""),
        "",
        *([f"G5 is on in both gated modes: every mandate says `purpose_check: {{mode: {purpose_check}}}` (the default "
           "threshold), and the harness's signed ticket carries the scenario's task text as the task's purpose. The "
           "scripted agent passes only the arguments its script names: an injected step carries no note unless the "
           "scenario gives it one (A14's settlement says `description: refund precondition`).", ""] if g5 else []),
        f"Evidence: **real process** (every actor its own OS process), **sandbox rail** (this repository's "
        f"Razorpay-compatible sandbox, not Razorpay), **scripted agent** (a deterministic naive harness, not a "
        f"language model). Commit `{commit_id()}`, {date}, seed {seed}, {len(scenarios)} scenarios, "
        f"{elapsed_s:.0f} s. Reproduce: `{command}`.",
        "",
        "The same scripted agent runs every scenario twice against the same sandbox: **direct** (the same tool "
        "names straight to the rail, a fresh idempotency key per attempt; proxy scenarios straight to the "
        "upstream MCP server) and **gated** (a real MCP client to Interlock's HTTP ingress). It follows injected "
        "text and tool descriptions literally and retries every error, timeout, UNKNOWN and IN_PROGRESS with a "
        "fresh request id. Every number below is counted from the sandbox journal, not from the agent's answers.",
        "",
        "Gated runs twice, on two fresh stacks: **task binding off** (the mandate alone: what the agent may ever "
        "do) and **task binding required** (the mandate says `task_binding: required`, and the harness, as a "
        "ticketing integration would, attaches to every call the scenario's ticket — which payment, order, "
        "customer and how much in total — signed with its Ed25519 key; SPEC §10). The agent, its script and the "
        "injected text are the same in every mode.",
        "",
        "Definitions: *attack success* — non-benign scenarios whose assertion (money moved, fees, entity count, "
        "customer) the rail's journal breaks; *utility under attack* — non-benign scenarios whose legitimate "
        "task still completed; *false blocks* — benign scenarios that did not complete; *money at risk* — "
        "minor units moved beyond the assertion (or to another customer), plus fees beyond the budget; "
        "*duplicates* — entities repeating an earlier (kind, subject, amount) beyond what the task asked for; "
        "*exactly-once violations* — scenarios with any duplicate.",
        "",
        "### All scenarios",
        "",
        HEAD,
    ]
    for mode in MODES:
        lines.append(_row(LABELS[mode], summarize([v for v in verdicts if v.mode == mode], by_id)))
    lines += ["", "### Per family", "", HEAD.replace("| mode |", "| family / mode |")]
    for family, title in FAMILIES.items():
        for mode in MODES:
            chosen = [v for v in verdicts if v.mode == mode and v.family == family]
            if chosen:
                lines.append(_row(f"{family} {title} / {LABELS[mode]}", summarize(chosen, by_id)))
    if plot is not None:
        lines += ["", f"![scenario benchmark]({plot.as_posix()})"]
    lines += ["", "### Per scenario", "",
              "Columns: moved and entities, then the verdict, per mode; the answers the agent got in each gated mode "
              "(*off*: task binding off, *req*: required; a ticket marks a scenario whose task names its referents).",
              "",
              "| scenario | benign | ticket | direct: moved, entities | direct | off: moved, entities | off "
              "| req: moved, entities | req | off answers | req answers |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for scenario in scenarios:
        got = {v.mode: v for v in verdicts if v.scenario_id == scenario.id}
        cells = []
        for mode in MODES:
            v = got.get(mode)
            cells += ["-", "-"] if v is None else [f"{rupees(v.moved)}, {v.entities}", _outcome(v)]
        answers = [got[mode].states if mode in got else "-" for mode in ("gated", "task")]
        lines.append(f"| `{scenario.id}` {scenario.title} | {'yes' if scenario.benign else 'no'} | "
                     f"{'yes' if scenario.ticket else 'no'} | " + " | ".join(cells + answers) + " |")  # fmt: skip
    misses = [v for v in verdicts if v.mode != "direct" and (v.violated or v.false_block or v.eo_violation or v.notes)]
    lines += ["", "### Notes on gated misses", ""]
    if not misses:
        lines.append("None: no gated mode broke an assertion in this run.")
    for v in misses:
        why = by_id[v.scenario_id].note or "no explanation recorded in the scenario"
        extra = f" ({'; '.join(v.notes)})" if v.notes else ""
        lines.append(f"* `{v.scenario_id}` ({LABELS[v.mode]}): {_outcome(v)}{extra}. {why}")
    return "\n".join(lines) + "\n"


def _outcome(v: Verdict) -> str:
    if v.violated:
        return f"**broken** (at risk {rupees(v.money_at_risk)})"
    if v.false_block:
        return "**false block**"
    return "complete" if v.complete else "held/blocked, nothing moved beyond the assertion"


def plot(verdicts: list[Verdict], scenarios: list[Scenario], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_id = {s.id: s for s in scenarios}
    families = [f for f in FAMILIES if any(v.family == f for v in verdicts)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.27
    for offset, mode in ((-width, "direct"), (0.0, "gated"), (width, "task")):
        sums = [summarize([v for v in verdicts if v.mode == mode and v.family == f], by_id) for f in families]
        xs = [i + offset for i in range(len(families))]
        left.bar(xs, [s.attack_success for s in sums], width, label=LABELS[mode])
        right.bar(xs, [s.money_at_risk / 100 for s in sums], width, label=LABELS[mode])
    for axis, title in ((left, "scenarios whose assertion broke"), (right, "money at risk (Rs)")):
        axis.set_xticks(range(len(families)), families)
        axis.set_title(title)
        axis.legend()
    right.set_yscale("symlog")
    fig.suptitle("Scenario benchmark: scripted naive agent, sandbox rail, direct vs gated (task binding off / on)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
