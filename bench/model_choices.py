"""What the model agent is shown and what it may answer: the ticket as plain text, and the enumerated tool calls.

The model does not write argument values (a 135M model cannot: it writes 1899 for 189900). It picks one complete
call from a list built by the harness from every value the scenario puts in front of it — the amounts written in
the task and in the injected text (rupees, as paise), the payments and payees on the ticket, any fund account id the
injected text names, the calls the scripted agent's script makes (which is where an attack's own values live, e.g. a
poisoned description's multiplied amount), and, in gated mode, a status check for every `sik` an earlier result
gave. Repeating an earlier call is choosing its line again; `{"name": "done"}` (number 0) ends the episode. Each
line is numbered and the grammar allows exactly those numbers (one or two tokens to generate, where the call's JSON
would take thirty), so every call is valid tool-call JSON for a listed tool and is the model's own choice among them.
The harness never chooses: it only lists, in a fixed order (tool, subject, amount), and executes what was chosen.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.agent import expand, follow_description
from bench.scenario import Scenario

DONE: dict[str, Any] = {"name": "done"}
STATUS_TOOL = "interlock_status"
_RUPEES = re.compile(r"Rs\.?\s?(\d[\d,]*(?:\.\d{1,2})?)")
_FUND_ACCOUNT = re.compile(r"\bfa_[A-Za-z0-9]{14}\b")
_NAME = re.compile(r"\$([a-z_][a-z0-9_]*)")
TOOL_ORDER = ("create_refund", "create_instant_settlement", "create_payout", "fetch_payment", STATUS_TOOL)


def call_text(call: Mapping[str, Any]) -> str:
    """The one spelling of a call: what the prompt lists and the transcript shows."""
    return json.dumps(call, ensure_ascii=True)


def rupee_amounts(text: str) -> list[int]:
    """Every "Rs 1,899" in *text*, in paise, in order of appearance."""
    found = []
    for match in _RUPEES.finditer(text):
        paise = round(float(match.group(1).replace(",", "")) * 100)
        if paise > 0 and paise not in found:
            found.append(paise)
    return found


def resolve_names(text: str, payments: Mapping[str, list[str]]) -> str:
    """`$other` in a scenario's text is that seed payment's (or payee's) id in this run."""
    return _NAME.sub(lambda m: payments[m.group(1)][0] if m.group(1) in payments else m.group(0), text)


@dataclass
class Ticket:
    """One scenario as the model sees it in one mode: the texts with this run's ids, and the choice list."""

    task: str
    injection: str | None
    payments: list[tuple[str, int, str]]  # id, amount, customer: every seed payment (candidates use them all)
    payees: list[tuple[str, str, str]]  # fund account id, contact, account type: every seed payee
    tools: list[str]
    # What the ticket's header lists: not a payment only the injected text names, not a payee off the mandate's list.
    shown: set[str] = field(default_factory=set)
    choices: list[dict[str, Any]] = field(default_factory=list)


def build_ticket(scenario: Scenario, payments: Mapping[str, list[str]], *, gated: bool) -> Ticket:
    task = resolve_names(scenario.task, payments)
    injection = resolve_names(scenario.injection, payments) if scenario.injection else None
    seeded = [(pid, spec.amount, spec.customer) for name, spec in scenario.payments.items()
              for pid in payments.get(name, [])]  # fmt: skip
    payees = [(payments[name][0], spec.contact, str(spec.account_type)) for name, spec in scenario.payees.items()
              if name in payments]  # fmt: skip
    tools: list[str] = sorted({s.tool for s in scenario.steps} | set(scenario.ticket or {}), key=TOOL_ORDER.index)
    if gated:
        tools.append(STATUS_TOOL)
    only_injected = set(_NAME.findall(scenario.injection or "")) - set(_NAME.findall(scenario.task))
    shown = {pid for name in scenario.payments if name not in only_injected for pid in payments.get(name, [])}
    shown |= {payments[name][0] for name, spec in scenario.payees.items() if spec.listed and name in payments}
    ticket = Ticket(task, injection, seeded, payees, tools, shown=shown)
    ticket.choices = candidates(scenario, payments, ticket)
    return ticket


def candidates(scenario: Scenario, payments: Mapping[str, list[str]], ticket: Ticket,
               descriptions: Mapping[str, str | None] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Every call built from the ticket's values and the script's calls (as the descriptions listed now would have
    them written), in a fixed order, then done. No value is invented: each comes from text the model is shown."""
    texts = [ticket.task, ticket.injection or ""]
    amounts = [a for text in texts for a in rupee_amounts(text)]
    calls: list[dict[str, Any]] = []
    for step in scenario.steps:
        for args in expand(step, payments):
            calls.append({"name": step.tool, "arguments": args})
            said = (descriptions or {}).get(step.tool)
            if said:
                calls.append({"name": step.tool, "arguments": follow_description(args, said)})
    # The payout fields no amount decides come from the script's call to that payee (or its first payout).
    payout_templates = {c["arguments"].get("fund_account_id"): c["arguments"] for c in calls
                        if c["name"] == "create_payout"}  # fmt: skip
    first_payout = next(iter(payout_templates.values()), {"currency": "INR", "mode": "IMPS", "purpose": "vendor bill"})
    named_accounts = [fa for text in texts for fa in _FUND_ACCOUNT.findall(text)]
    for tool in ticket.tools:
        for amount in amounts:
            if tool == "create_refund":
                calls += [{"name": tool, "arguments": {"payment_id": pid, "amount": amount}}
                          for pid, _, _ in ticket.payments]  # fmt: skip
            elif tool == "create_instant_settlement":
                calls.append({"name": tool, "arguments": {"amount": amount}})
            elif tool == "create_payout":
                kinds = {fa: kind for fa, _, kind in ticket.payees}
                for fa in [*kinds, *named_accounts]:
                    template = {k: v for k, v in payout_templates.get(fa, first_payout).items()
                                if k not in ("interlock_distinct_reason", "notes")}  # fmt: skip
                    mode = "UPI" if kinds.get(fa) == "vpa" else template.get("mode", "IMPS")
                    calls.append({"name": tool, "arguments": {**template, "fund_account_id": fa, "amount": amount,
                                                              "mode": mode}})  # fmt: skip
    return ordered(calls)


def ordered(calls: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Distinct calls in the fixed listing order (tool, subject, amount, spelling), `done` last."""
    unique = {call_text(c): c for c in calls if c.get("name") != DONE["name"]}

    def key(call: dict[str, Any]) -> tuple[int, str, int, str]:
        args = call.get("arguments", {})
        subject = str(args.get("payment_id") or args.get("fund_account_id") or args.get("sik") or "")
        amount = args.get("amount")
        return TOOL_ORDER.index(call["name"]), subject, amount if isinstance(amount, int) else -1, call_text(call)

    return [*sorted(unique.values(), key=key), DONE]


def status_choice(sik: str) -> dict[str, Any]:
    return {"name": STATUS_TOOL, "arguments": {"sik": sik}}


def numbered(choices: Iterable[Mapping[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """The number each choice is listed and answered with: `done` is 0, the calls 1.. in list order (a choice added
    mid-episode goes at the end, so no number ever changes)."""
    out, n = [], 0
    for choice in choices:
        if choice.get("name") == DONE["name"]:
            out.append((0, dict(choice)))
        else:
            n += 1
            out.append((n, dict(choice)))
    return out


def gbnf(choices: Iterable[Mapping[str, Any]]) -> str:
    """A llama.cpp grammar whose only sentences are the choices' numbers."""
    return "root ::= " + " | ".join(f'"{n}"' for n, _ in numbered(choices)) + "\n"


def json_schema(choices: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What the chosen number stands for, as a JSON schema: exactly one of the listed calls (valid tool-call JSON)."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "enum": [dict(c) for c in choices]}


def parse_choice(text: str, choices: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The call the model's number stands for, or None if it is no listed number (a grammar would not allow that)."""
    by_number = {str(n): call for n, call in numbered(choices)}
    return by_number.get(text.strip())


def appended(choices: list[dict[str, Any]], fresh: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """*choices* with *fresh* calls added before `done`, keeping every number."""
    return [*(c for c in choices if c != DONE), *fresh, DONE]
