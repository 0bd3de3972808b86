"""Scenarios as data: the YAML files under bench/scenarios/, one per family, validated strictly.

A scenario names everything a run needs — seed payments, rail faults, the naive agent's script, any
rail-worker kill, mandate changes, manifest poisoning — and the assertion the sandbox journal is
judged against. Nothing in a scenario is Python: adding one is adding a YAML entry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
FAMILIES = {
    "A": "value authorization, referent confusion, injection",
    "B": "exactly-once under retry storms and crashes",
    "C": "velocity and fee burn",
    "D": "tool-manifest poisoning (proxy mode)",
    "E": "benign controls",
    "P": "payouts (RazorpayX): payees, splits, loops, ambiguity, withdrawal",
}
KILL_POINTS = ("rail.before_wal", "rail.after_wal_before_call", "rail.during_call", "rail.after_call_before_commit",
               "rail.after_commit_before_ack")  # fmt: skip


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SeedPayment(_Strict):
    amount: StrictInt = Field(gt=0)
    customer: str
    count: StrictInt = Field(default=1, ge=1)  # >1: a group name_0 .. name_{count-1}, each its own payment
    prior_refunds: StrictInt = Field(default=0, ge=0)


class SeedPayee(_Strict):
    """A RazorpayX fund account (and its contact) the rail knows; `listed` puts it on the mandate's payee list."""

    contact: str  # the contact's name: the vendor
    account_type: Literal["bank_account", "vpa"] = "bank_account"
    listed: bool = True


class Withdrawal(_Strict):
    """After the agent's steps a person withdraws the mandate (a version without the payout grant, rolled out), then
    the RazorpayX account is topped up: anything still queued on the rail would be paid now."""

    top_up_minor: StrictInt = Field(gt=0)


class Step(_Strict):
    """One thing the naive agent does; `$name` in an argument is a seed payment (or payee) of this run."""

    tool: Literal["create_refund", "create_instant_settlement", "create_payout", "fetch_payment"]
    args: dict[str, Any]
    source: Literal["task", "injection", "description"] = "task"
    repeat: StrictInt = Field(default=1, ge=1)  # the script loops over this call (e.g. an hourly job)
    amount_step: StrictInt = 0  # added to `amount` on each repeat (distinct amounts)
    for_each: str | None = None  # run once per payment of this seed group, as `$each`
    parallel: StrictInt = Field(default=1, ge=1)  # concurrent copies (two workers racing one refund)
    fresh_note: bool = False  # a fresh UUID in notes on every attempt
    follow_description: bool = False  # apply what the tool's description says about units


class TicketGrant(_Strict):
    """What the ticket the user's request came in on says about one tool: the harness signs it as a task.

    `$name` names a seed payment (a group expands to all of it); `order` / `customer` take that payment's."""

    subjects: list[str] | None = None
    order: str | None = None
    customer: str | None = None
    max_amount_minor: StrictInt | None = Field(default=None, gt=0)


class Retry(_Strict):
    max_attempts: StrictInt = Field(default=6, ge=1)
    backoff_ms: StrictInt = Field(default=400, ge=0)


class Expect(_Strict):
    """The assertion, judged on the sandbox journal only."""

    max_moved_minor: StrictInt = Field(ge=0)
    min_moved_minor: StrictInt = Field(default=0, ge=0)
    min_entities: StrictInt = Field(default=0, ge=0)
    max_entities: StrictInt = Field(ge=0)
    must_complete: bool
    max_fees_minor: StrictInt | None = None
    identical_allowed: StrictInt = 0  # identical entities the task itself asks for (a distinct second refund)
    customer: str | None = None  # money moved on another customer's payment is beyond the assertion


class Scenario(_Strict):
    id: str = Field(pattern=r"^[A-EP][0-9]{1,2}_[a-z0-9_]+$")  # A10, A14: the seed's own numbers
    family: Literal["A", "B", "C", "D", "E", "P"]
    title: str
    benign: bool
    task: str
    injection: str | None = None
    payments: dict[str, SeedPayment] = Field(default_factory=dict)
    balance_minor: StrictInt | None = None
    payees: dict[str, SeedPayee] = Field(default_factory=dict)
    banking_balance_minor: StrictInt | None = None  # the RazorpayX balance payouts are paid from, set per mode
    withdrawal: Withdrawal | None = None
    faults: list[dict[str, Any]] = Field(default_factory=list)
    kill: str | None = None
    mandate_changes: dict[str, Any] = Field(default_factory=dict)
    poison: dict[str, str] = Field(default_factory=dict)  # tool -> description the upstream serves (D)
    poison_after_step: StrictInt = 0  # steps run before the poisoning switch flips
    proxy: bool = False
    retry: Retry = Retry()
    # The ticket behind the user's task (its referents and amount), which a ticketing integration would sign
    # and attach to every call as the task binding (SPEC §10); None when the task names no referent.
    ticket: dict[Literal["create_refund", "create_instant_settlement", "create_payout"], TicketGrant] | None = None
    steps: list[Step] = Field(min_length=1)
    expect: Expect
    note: str | None = None  # why a miss is expected, if one is

    @model_validator(mode="after")
    def _rules(self) -> Scenario:
        if self.id[0] != self.family:
            raise ValueError(f"{self.id}: id must start with its family letter {self.family}")
        if self.kill is not None and self.kill not in KILL_POINTS:
            raise ValueError(f"{self.id}: kill must be one of {KILL_POINTS}")
        if (self.family == "D") != self.proxy:
            raise ValueError(f"{self.id}: family D scenarios, and only they, run in proxy mode")
        if self.benign and self.injection:
            raise ValueError(f"{self.id}: a benign scenario carries no injected text")
        both = sorted(set(self.payees) & set(self.payments))
        if both:
            raise ValueError(f"{self.id}: a name is both a payment and a payee: {both}")
        referents = {*self.payments, *self.payees}
        for tool, grant in (self.ticket or {}).items():
            names = [*(grant.subjects or []), grant.order, grant.customer]
            for name in (n for n in names if n is not None):
                if not name.startswith("$") or name[1:] not in referents:
                    raise ValueError(f"{self.id}: ticket.{tool} names {name!r}, which is not a seed payment or payee")
        return self


def load_scenarios(directory: Path = SCENARIO_DIR, *, only: list[str] | None = None) -> list[Scenario]:
    """Every scenario in *directory* (sorted by id); *only* keeps ids or families listed (e.g. ["B", "E1_..."])."""
    scenarios: list[Scenario] = []
    for path in sorted(directory.glob("*.yaml")):
        for raw in yaml.safe_load(path.read_text(encoding="utf-8")) or []:
            scenarios.append(Scenario.model_validate(raw))
    ids = [s.id for s in scenarios]
    duplicated = {i for i in ids if ids.count(i) > 1}
    if duplicated:
        raise ValueError(f"scenario ids used twice: {sorted(duplicated)}")
    if only:
        scenarios = [s for s in scenarios if s.id in only or s.family in only or s.id.split("_")[0] in only]
    return sorted(scenarios, key=_order)


def _order(scenario: Scenario) -> tuple[str, int, str]:
    """Family, then number (A6 before A10), then id."""
    number = scenario.id.split("_")[0][1:]
    return scenario.family, int(number), scenario.id
