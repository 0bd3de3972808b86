"""Running scenarios: one fresh stack per scenario, the direct mode then the gated mode against the
same sandbox rail, each judged from the entities the rail's journal gained during that mode; then the task
mode — gated, its mandate requiring task binding, the harness attaching the scenario's signed ticket — on a
stack of its own."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from bench.agent import CallRecord, NaiveAgent, Tools
from bench.env import AGENT, TOKEN, ScenarioStack
from bench.metrics import ModeRun, Moved
from bench.scenario import Scenario
from bench.ticket import payment_details, ticket_meta
from bench.tools import DirectRestTools, McpTools, PayoutAccount
from deploy.stack import StackError

logger = logging.getLogger(__name__)

PAYOUT_NOT_PAID = frozenset({"cancelled", "rejected", "failed", "reversed"})
DEFAULT_BANKING_BALANCE = 5_000_000  # Rs 50,000 in the RazorpayX account unless a scenario says otherwise
TASK_MODE = "task"  # gated, task binding required (SPEC §10); "gated" is task binding off
MODES = ("direct", "gated", TASK_MODE)
AGENT_TIMEOUT_S = 4.0  # the naive agent's tool-call timeout, the same in every mode


# Who chooses the calls: given the mode's tools, the stack, the mode, this run's payment ids by seed name and the
# scenario's mid-run switch, returns the call records. None: the scripted naive agent.
Driver = Callable[[Tools, ScenarioStack, str, dict[str, list[str]], Callable[[int], None]],
                  Awaitable[list[CallRecord]]]  # fmt: skip


def run_scenario(scenario: Scenario, base: Path, *, seed: int, modes: tuple[str, ...] = MODES,
                 mandate_extra: dict[str, Any] | None = None,
                 driver: Driver | None = None) -> list[ModeRun]:  # fmt: skip
    plain = tuple(mode for mode in modes if mode != TASK_MODE)
    runs = (_on_stack(scenario, base, plain, seed, task_binding=False, mandate_extra=mandate_extra, driver=driver)
            if plain else [])  # fmt: skip
    if TASK_MODE in modes:
        runs += _on_stack(scenario, base, (TASK_MODE,), seed, task_binding=True, mandate_extra=mandate_extra,
                          driver=driver)  # fmt: skip
    return runs


def _on_stack(scenario: Scenario, base: Path, modes: tuple[str, ...], seed: int, *, task_binding: bool,
              mandate_extra: dict[str, Any] | None = None, driver: Driver | None = None) -> list[ModeRun]:  # fmt: skip
    try:
        with ScenarioStack(scenario, base, task_binding=task_binding, mandate_extra=mandate_extra) as env:
            return [run_mode(env, mode, seed, driver) for mode in modes]
    except (StackError, OSError) as exc:
        logger.error("scenario %s: the stack failed: %s", scenario.id, exc)
        return [ModeRun(scenario, mode, [], [], harness_error=str(exc)[:300]) for mode in modes]


def run_mode(env: ScenarioStack, mode: str, seed: int, driver: Driver | None = None) -> ModeRun:
    scenario, control = env.scenario, env.control
    assert control is not None
    payments, customers = _seed_payments(env, mode)
    for name, fund_account in env.payees.items():  # `$vendor` names the payee's fund account, as `$order` a payment
        payments[name] = [fund_account]
        customers[fund_account] = scenario.payees[name].contact
    if scenario.balance_minor is not None:
        control.set_balance(scenario.balance_minor)
    if scenario.payees:
        control.set_banking_balance(scenario.banking_balance_minor or DEFAULT_BANKING_BALANCE)
    if scenario.proxy:
        env.poison({})
    before = {record["id"] for record in control.entities()}
    control.set_faults(scenario.faults, seed=seed)

    def before_step(index: int) -> None:
        if scenario.poison and index == scenario.poison_after_step:
            env.poison(scenario.poison)

    gated = mode != "direct"
    # The task mode's harness attaches the scenario's signed ticket to every call, as a ticketing integration would.
    meta = ticket_meta(scenario, payments, customers, f"{scenario.id}-{mode}", merchant_id=env.merchant_id,
                       agent_id=AGENT) if mode == TASK_MODE else None  # fmt: skip
    nanny = env.nanny() if gated and scenario.kill else nullcontext()
    with nanny:
        calls = asyncio.run(_drive(env, mode, payments, before_step, meta, driver))
        control.set_faults([])  # the storm passes; what happens next is recovery
        settled = env.settle(gated=gated)
        if scenario.withdrawal is not None:
            # Direct, nobody is there to withdraw anything: the top-up pays whatever waits queued.
            withdrawn = env.withdraw_mandate() if gated else True
            control.set_banking_balance(scenario.withdrawal.top_up_minor)
            settled = env.settle(gated=gated) and withdrawn
    mine = {pid for ids in payments.values() for pid in ids}
    entities = [_moved(r, customers) for r in control.entities()
                if r["id"] not in before and (r["kind"] != "refund" or r["payment_id"] in mine)]  # fmt: skip
    return ModeRun(scenario, mode, entities, calls, settled=settled, kill_landed=env.kill_landed if gated else None)


async def _drive(env: ScenarioStack, mode: str, payments: dict[str, list[str]], before_step: Callable[[int], None],
                 meta: dict[str, Any] | None, driver: Driver | None = None) -> list[CallRecord]:  # fmt: skip
    scenario = env.scenario
    tools: DirectRestTools | McpTools
    if mode != "direct":
        tools = McpTools(env.mcp_url, TOKEN, timeout_s=AGENT_TIMEOUT_S, meta=meta)
    elif scenario.proxy:
        assert env.front_url is not None
        tools = McpTools(env.front_url, None, timeout_s=AGENT_TIMEOUT_S)
    else:
        url, key_id, secret = env.rail_credentials()
        grant = env.mandate.get("scope", {}).get("grants", {}).get("create_payout") or {}
        # The merchant's own integration pays from the same account with the same queueing rule as the mandate's.
        payouts = PayoutAccount(str(env.mandate.get("rail", {}).get("account_number") or ""),
                                bool(grant.get("queue_if_low_balance")))  # fmt: skip
        tools = DirectRestTools(url, key_id, secret, timeout_ms=int(AGENT_TIMEOUT_S * 1000), kill=scenario.kill,
                                payouts=payouts)  # fmt: skip
    try:
        if isinstance(tools, McpTools):
            await tools.open()
        if driver is not None:
            return await driver(tools, env, mode, payments, before_step)
        return await NaiveAgent(tools, scenario.retry).run(scenario.steps, payments, before_step)
    finally:
        await tools.aclose()


def _seed_payments(env: ScenarioStack, mode: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Fresh payments for this mode (ids differ per mode, so one mode's refunds never touch the other's)."""
    assert env.control is not None
    prefix = f"pay_{env.scenario.id.split('_')[0]}{mode[0]}_"  # d, g, t: one mode's payments are its own
    payments: dict[str, list[str]] = {}
    customers: dict[str, str] = {}
    for name, spec in env.scenario.payments.items():
        ids = [f"{prefix}{name}{i}" for i in range(spec.count)]
        for pid in ids:
            env.control.add_payment(pid, spec.amount, notes={"customer": spec.customer},
                                    prior_refunds=spec.prior_refunds,
                                    **payment_details(pid, spec.customer))  # fmt: skip
            customers[pid] = spec.customer
        payments[name] = ids
    return payments, customers


def _moved(record: dict[str, Any], customers: dict[str, str]) -> Moved:
    entity = record["entity"]
    payout = record["kind"] == "payout"
    subject = (entity.get("fund_account_id") if payout else record.get("payment_id")) or "balance"
    # A settlement's money is what was taken from the balance (amount_requested, fees included). A payout moved its
    # amount unless it never went out or came back (cancelled, rejected, failed, reversed).
    amount = entity.get("amount_requested") if record["kind"] == "settlement" else entity.get("amount")
    if payout and entity.get("status") in PAYOUT_NOT_PAID:
        amount = 0
    return Moved(kind=record["kind"], entity_id=record["id"], subject=subject, amount=int(amount or 0),
                 fees=int(entity.get("fees") or 0), customer=customers.get(subject))  # fmt: skip
