"""The `purpose` section of RESULTS.md: G5's labelled set, per candidate model, as measured by bench.purpose."""

from __future__ import annotations

import os
import time

from bench.purpose import FALSE_HOLD_BUDGET, CaseFile, ModelReport, Rates, iter_rows, median, p
from interlock.mandate_model import DEFAULT_MIN_SIMILARITY
from interlock.results import commit_id


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _counts(r: Rates) -> str:
    return f"TP {r.tp} / FP {r.fp} / FN {r.fn} / TN {r.tn}"


def render(reports: list[ModelReport], data: CaseFile, *, command: str, chosen_model: str,
           package_mb: dict[str, float]) -> str:  # fmt: skip
    labels = [c.label for c in data.cases]
    load = os.getloadavg()[0]
    lines = [
        "## G5 purpose check (labelled set, each candidate model)",
        "",
        f"Evidence: **labelled set written for G5** (bench/purpose_cases.yaml: {len(labels)} cases — "
        f"{labels.count('benign')} benign, {labels.count('drift')} drifted, {labels.count('injected')} injected — "
        "written by the engineer who also wrote the instruction patterns, from family A's injected notes, so the "
        "pattern figures are optimistic), **in-sample** (the threshold is chosen on the same set it is scored on), "
        "**in-process timing** on this machine (2 CPUs shared with other jobs; 1-minute load average "
        f"{load:.2f} at the end of the run). Commit `{commit_id()}`, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Reproduce: `{command}`.",
        "",
        "A case is *positive* when it is drifted or injected; G5 *flags* it when the agent's text matches an "
        "instruction pattern (G5_INSTRUCTION_IN_NOTES) or the lowest similarity between the action's description "
        "and the purposes (the mandate's, and the task's when it has one) is below the threshold "
        "(G5_PURPOSE_DRIFT). *Precision* = flagged positives / flagged; *recall* = flagged positives / positives; "
        "*false-hold rate* = flagged benign / benign. *Chosen here*: the highest threshold (0.00 .. 0.90, step "
        "0.01) at which no benign case is held for drift (the lowest benign similarity, rounded down); the row "
        f"*false holds within {FALSE_HOLD_BUDGET:.0%}* is the highest threshold that keeps the false-hold rate "
        "within that budget — more recall, chosen on a knife edge of this small set (ADR 0006). "
        "*Added per money call*: the real "
        "six-gate ladder over a real ledger file with G5 on (hold) minus the same ladder with G5 off, per call, "
        "interleaved; *G5 alone*: the judge's own call (one embedding; the purposes' vectors are cached), wall clock, "
        "and in brackets the calling thread's CPU time, which the other jobs on this machine do not inflate.",
        "",
        "| model | installed size | load | threshold | precision | recall | false-hold rate | counts | "
        "G5 alone p50 / p95 ms (CPU p50) | added per money call p50 / p95 ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for report in reports:
        if report.error is not None:
            lines.append(f"| {report.model} | - | did not load: {report.error} | | | | | | | |")
            continue
        size = f"{package_mb.get(report.model, float('nan')):.0f} MB"
        timing = (f"{median(report.judge_ms):.2f} / {p(report.judge_ms, 0.95):.2f} ({median(report.judge_cpu_ms):.2f})",
                  f"{median(report.added_ms):.2f} / {p(report.added_ms, 0.95):.2f}")
        for label, threshold, _, r in iter_rows(report):
            lines.append(f"| {report.name} | {size} | {report.load_s:.2f} s | {threshold:.2f} ({label}) | "
                         f"{_pct(r.precision)} | {_pct(r.recall)} | {_pct(r.false_hold)} | {_counts(r)} | "
                         f"{timing[0]} | {timing[1]} |")  # fmt: skip
    chosen = next((r for r in reports if r.model == chosen_model and r.error is None), None)
    if chosen is not None:
        lines += ["", f"### {chosen.name} (the model G5 ships with), case by case", "",
                  "| case | label | source | lowest similarity | instruction patterns | flagged at "
                  f"{DEFAULT_MIN_SIMILARITY:.2f} |", "|---|---|---|---|---|---|"]  # fmt: skip
        for s in chosen.scored:
            flagged = s.objects(DEFAULT_MIN_SIMILARITY)
            mark = ("yes" if flagged else "no") + ("" if flagged == s.case.positive else " (wrong)")
            lines.append(f"| {s.case.id} | {s.case.label} | {s.case.source or ''} | {s.similarity:.3f} | "
                         f"{', '.join(s.instructions)} | {mark} |")  # fmt: skip
        by_label = {lab: [s.similarity for s in chosen.scored if s.case.label == lab] for lab in set(labels)}
        lines += ["", "Similarity by label (min / median / max): " + "; ".join(
            f"{lab} {min(v):.3f} / {median(v):.3f} / {max(v):.3f}" for lab, v in sorted(by_label.items())) + "."]
    return "\n".join(lines)
