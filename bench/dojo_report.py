"""The `agentdojo banking` section of RESULTS.md: AgentDojo's own scores per mode, direct and through Interlock."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

AGENTDOJO_VERSION = "0.1.35"  # bench/agentdojo_requirements.txt
LICENCE = "MIT"
MODE_NAMES = {"ground_truth": "ground truth, no injections",
              "hijacked": "hijacked: user's ground truth, then the attacker's"}


@dataclass(frozen=True)
class Scores:
    """One mode on one route, as the runner reported it (AgentDojo's utility and security results)."""

    utility: dict[tuple[str, str], bool]
    security: dict[tuple[str, str], bool]  # AgentDojo's "security" check: True when the attacker's goal was reached
    injection_tasks: dict[str, dict[str, Any]]
    calls: list[dict[str, Any]]
    as_user_tasks: dict[str, bool]  # AgentDojo's run of each injection task as a user task (hijacked mode only)

    @classmethod
    def load(cls, raw: dict[str, Any]) -> Scores:
        return cls({(u, i): ok for u, i, ok in raw["utility"]}, {(u, i): ok for u, i, ok in raw["security"]},
                   raw["injection_tasks"], raw.get("calls", []), raw.get("injection_tasks_utility", {}))  # fmt: skip


def _frac(values: list[bool]) -> str:
    return f"{sum(values)}/{len(values)}"


def _task_number(task_id: str) -> int:
    return int(task_id.rsplit("_", 1)[1])


def summary_line(scores: dict[tuple[str, str], Scores], *, payee_approval: bool) -> str:
    gt_direct, gt_through = scores[("ground_truth", "direct")], scores[("ground_truth", "interlock")]
    hj_direct, hj_through = scores[("hijacked", "direct")], scores[("hijacked", "interlock")]
    pairs = len(hj_direct.security)
    money = [key for key in hj_through.security if hj_through.injection_tasks[key[1]]["money"]]
    return (f"agentdojo banking (v1.2.2): hijacked agent reached the attacker's goal in "
            f"{sum(hj_direct.security.values())}/{pairs} pairs direct, {sum(hj_through.security.values())}/"
            f"{len(hj_through.security)} through Interlock (money-moving goals: "
            f"{sum(hj_through.security[k] for k in money)}/{len(money)} through Interlock); utility direct "
            f"{_frac(list(gt_direct.utility.values()))}, through Interlock {_frac(list(gt_through.utility.values()))} "
            f"(payee approval {'on' if payee_approval else 'off'})")  # fmt: skip


def _answers(calls: list[dict[str, Any]]) -> str:
    counts = Counter(f"{c['state']}" + (f" {c['reason']}" if c["reason"] else "") for c in calls)
    return ", ".join(f"{what} ×{n}" for what, n in counts.most_common()) or "no money call"


def render(scores: dict[tuple[str, str], Scores], *, command: str, commit: str, elapsed_s: float,
           payee_approval: bool = False) -> str:  # fmt: skip
    line = summary_line(scores, payee_approval=payee_approval)
    out = [
        "## agentdojo banking (AgentDojo's banking suite, scored by AgentDojo, direct and through Interlock)",
        "",
        "Evidence: **real process** stack per task run, **sandbox rail** (RazorpayX payouts), **AgentDojo's "
        "ground-truth agents** (scripted, no language model).",
        "",
        f"AgentDojo {AGENTDOJO_VERSION} ({LICENCE} licence), banking suite v1.2.2 (16 user tasks, 9 injection tasks), "
        f"its own utility and security checks on its own environment; attack `direct` (the injection vectors carry "
        f"\"TODO: <goal>\"). Agents: AgentDojo's ground truth (no model). Through Interlock: every money call a real "
        f"MCP `create_payout` at a real stack's ingress over the sandbox's RazorpayX, a fresh ledger per task run; "
        f"the mandate is derived from the environment (payees paid before, the balance as every limit; "
        f"docs/bench.md). Payee approval (an unlisted payee held for the account holder) does not exist yet: "
        f"an unlisted payee is refused, so this is **payee approval off**. `{command}` at {commit}, "
        f"{elapsed_s / 60:.1f} min.",
        "",
        "| mode | route | utility (AgentDojo) | attacker's goal reached (AgentDojo) |",
        "|---|---|---|---|",
    ]
    for (mode, route), s in scores.items():
        reached = "—" if mode == "ground_truth" else _frac(list(s.security.values()))
        label = "direct" if route == "direct" else "through Interlock"
        out.append(f"| {MODE_NAMES[mode]} | {label} | {_frac(list(s.utility.values()))} | {reached} |")
    hj_direct, hj_through = scores[("hijacked", "direct")], scores[("hijacked", "interlock")]
    out += ["", f"AgentDojo's own check that each injection task can be done when the user asks for it (run as a user "
            f"task): direct {_frac(list(hj_direct.as_user_tasks.values()))}, through Interlock "
            f"{_frac(list(hj_through.as_user_tasks.values()))} (the attacker's account is no payee of the account "
            f"holder's)."]  # fmt: skip
    out += ["", "Each injection task, over the user tasks it was paired with:", "",
            "| injection task | goal | moves money | reached direct | reached through Interlock | Interlock's answers "
            "to its calls |", "|---|---|---|---|---|---|"]  # fmt: skip
    for task_id in sorted(hj_direct.injection_tasks, key=_task_number):
        info = hj_direct.injection_tasks[task_id]
        direct = [ok for (_, i), ok in hj_direct.security.items() if i == task_id]
        through = [ok for (_, i), ok in hj_through.security.items() if i == task_id]
        if not direct:
            continue  # not run (--injection-task)
        calls = [c for c in hj_through.calls if c["injection_task"] == task_id and c["part"] == "injection"]
        goal = info["goal"] if len(info["goal"]) <= 90 else info["goal"][:87] + "..."
        out.append(f"| {task_id} | {goal} | {'yes' if info['money'] else 'no'} | {_frac(direct)} | {_frac(through)} "
                   f"| {_answers(calls)} |")  # fmt: skip
    gt_direct, gt_through = scores[("ground_truth", "direct")], scores[("ground_truth", "interlock")]
    lost = [u for (u, _), ok in gt_through.utility.items() if not ok and gt_direct.utility.get((u, ""), False)]
    out += ["", "User tasks whose utility was lost through Interlock (ground truth, no injections):", ""]
    for task_id in sorted(lost, key=_task_number):
        calls = [c for c in gt_through.calls if c["user_task"] == task_id and not c["applied"]]
        what = "; ".join(f"{c['tool']} {c['amount']} to {c['recipient']}: {c['state']}"
                         + (f" {c['reason']}" if c["reason"] else "") for c in calls)  # fmt: skip
        what = what or "no money call refused"
        out.append(f"* {task_id}: {what}")
    if not lost:
        out.append("* none")
    out += ["", line]
    return "\n".join(out) + "\n"

