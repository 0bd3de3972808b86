"""One burst trial: the rail worker with 64 call slots and a rail that holds every money call for a while;
the agents fire a burst of distinct money calls at once (refunds on distinct payments, or instant
settlements told apart by `interlock_distinct_reason`); the rail worker SIGKILLs itself at its failpoint
once at least `kill_in_flight` of them are in flight (INTERLOCK_KILL_IN_FLIGHT). Right after the kill the
harness counts what it left: the IN_FLIGHT attempt rows (none of them recorded), the applies the rail was
still working on, and the stamped entities already made.

Then the kill trial's course: restart the rail worker (`--wait-lease`), let recovery settle every intent
(each IN_FLIGHT row is abandoned only after its lease plus the call deadline, then reconciled by stamp),
judge, let every agent repeat its same call until the answer is definite, judge again — every intent of
the burst, plus chaos.verdict.judge_burst: one intent and at most one entity per call, and the kill landed
with enough calls in flight.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import yaml

from chaos.cells import Cell
from chaos.trial import (
    MANDATE,
    PAYOUT_PAYEE,
    PAYOUT_TOOL,
    TrialResult,
    _call,
    _observe_all,
    _restart_the_dead,
    _settle_all,
    entity_stamp,
    ledger_rows,
    payout_arguments,
    run_trial,
    subject_of,
)
from chaos.verdict import Observation, judge, judge_burst
from deploy.agent_client import SandboxControl
from deploy.stack import Actor, Stack
from interlock.failpoints import KILL_IN_FLIGHT_ENV
from interlock.sik import SETTLEMENT_SUBJECT

AMOUNT = 10_000  # Rs 100: under the mandate's hold threshold, and 40 of them well inside the trial's windows
PAYMENT_AMOUNT = 189_900
SETTLEMENT_BALANCE = 10_000_000
GATE_WORKERS = 2  # the burst must reach the rail worker faster than the rail answers
# The burst is about many calls in flight, not velocity: the windows and the fee budget stay, roomy enough
# for every call of the burst and its retries, so admission still re-checks them under group commit.
ROOMY_LIMITS = {
    "windows": [{"window_ms": 86_400_000, "max_calls": 1000, "max_amount_minor": 100_000_000, "currency": "INR"}],
    "fee_budgets": {"INR": {"window_ms": 86_400_000, "max_fee_minor": 10_000_000}},
}
KILL_WAIT_S = 30.0
RETRIES = 8
IN_FLIGHT_SAID = re.compile(r"SIGKILL pid \d+ with (\d+) calls in flight")


def run_burst_trial(cell: Cell, trial: int, seed: int, base: Path, *, mutation: str | None = None,
                    keep: bool = False, proxy: bool = False) -> TrialResult:  # fmt: skip
    return run_trial(cell, trial, seed, base, mutation=mutation, keep=keep, proxy=proxy, body=_run_burst)


def write_trial_mandate(data_dir: Path) -> Path:
    """The demo mandate with ROOMY_LIMITS (its own allow 40 calls and Rs 20,000 a day: a burst and its
    retries would hit them), written into the trial's data directory."""
    mandate = yaml.safe_load(MANDATE.read_text(encoding="utf-8"))
    mandate["limits"] = ROOMY_LIMITS
    path = data_dir / "mandate.yaml"
    path.write_text(yaml.safe_dump(mandate), encoding="utf-8")
    return path


def burst_calls(cell: Cell, seed: int) -> tuple[list[str], list[dict[str, Any]]]:
    """The intents' subjects and the arguments of each distinct call of the burst."""
    if cell.tool == "create_refund":
        payments = [f"pay_burst{seed}n{i}" for i in range(cell.calls)]
        return payments, [{"payment_id": p, "amount": AMOUNT} for p in payments]
    if cell.tool == PAYOUT_TOOL:
        # One payee, many payouts of one amount: only the stated reason makes each a distinct operation.
        return [PAYOUT_PAYEE], [{"fund_account_id": PAYOUT_PAYEE, "amount": AMOUNT, "currency": "INR", "mode": "IMPS",
                                 "purpose": "vendor bill", "interlock_distinct_reason": f"burst line {i}"}
                                for i in range(cell.calls)]  # fmt: skip
    # One balance, many settlements of one amount: only the stated reason makes each a distinct operation.
    return [SETTLEMENT_SUBJECT], [{"amount": AMOUNT, "interlock_distinct_reason": f"burst line {i}"}
                                  for i in range(cell.calls)]  # fmt: skip


def _run_burst(stack: Stack, cell: Cell, seed: int, tokens: Path, result: TrialResult, *, proxy: bool) -> None:
    stack.gate_workers = GATE_WORKERS
    stack.start_redis()
    sandbox_url = stack.start_sandbox(seed=seed)
    stack.env["INTERLOCK_MANDATE"] = str(write_trial_mandate(stack.data_dir))
    control = SandboxControl(sandbox_url, stack.env["INTERLOCK_RAIL_KEY_ID"], stack.env["INTERLOCK_RAIL_KEY_SECRET"])
    subjects, calls = burst_calls(cell, seed)
    if cell.tool == "create_refund":
        for payment_id in subjects:
            control.add_payment(payment_id, PAYMENT_AMOUNT)
    elif cell.tool == PAYOUT_TOOL:
        payout_arguments(control)  # the payee on the rail, the RazorpayX account funded
    else:
        control.set_balance(SETTLEMENT_BALANCE)
    url = stack.start_ingress(tokens_file=tokens, wait=False)
    # Only the first rail worker waits for the burst and dies: the variable is cleared before anything restarts.
    stack.env[KILL_IN_FLIGHT_ENV] = str(cell.kill_in_flight)
    try:
        stack.start_engine(kill_at={"rail": cell.point})
    finally:
        stack.env[KILL_IN_FLIGHT_ENV] = ""
    stack.wait_for_ingress()
    control.set_faults(cell.faults, seed=seed)
    watch = _KillWatch(stack, stack.actors["rail"], control, subjects)
    first = asyncio.run(_burst(url, calls, cell.tool))
    result.first_answer = _count_answers(first)
    watch.join(KILL_WAIT_S + 5)
    rail = stack.actors["rail"]
    result.kill_landed = rail.returncode() == -9 and f"failpoint {cell.point}: SIGKILL" in rail.log()
    said = IN_FLIGHT_SAID.search(rail.log()) if result.kill_landed else None
    result.burst = {"calls": cell.calls, "needed": cell.kill_in_flight, "said": int(said.group(1)) if said else None,
                    **watch.seen}  # fmt: skip
    _restart_the_dead(stack, tokens)
    result.after_recovery = _judge_moment(stack, control, subjects, cell, result, "after recovery")
    # Every agent repeats its same call, with a fresh request id, until it gets a definite answer.
    again = asyncio.run(_retry_until_definite(url, calls, cell.tool))
    result.burst["retry_answers"] = _count_answers(again)
    _restart_the_dead(stack, tokens)
    result.after_retry = _judge_moment(stack, control, subjects, cell, result, "after retry", final=True)
    if result.kill_landed and "unfinished" not in result.burst:
        result.violations.append("HARNESS: the kill landed but the calls it left in flight were not counted")
    if not result.kill_landed:
        result.violations.append(f"KILL_NOT_LANDED: the rail worker did not die at {cell.point} with "
                                 f"{cell.kill_in_flight} of a burst of {cell.calls} calls in flight")  # fmt: skip
    control.close()


async def _burst(url: str, calls: list[dict[str, Any]], tool: str) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(_call(url, arguments, tool) for arguments in calls)))


async def _retry_until_definite(url: str, calls: list[dict[str, Any]], tool: str) -> list[dict[str, Any]]:
    async def one(arguments: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = {}
        for _ in range(RETRIES):
            answer = await _call(url, arguments, tool)
            if answer.get("state") not in (None, "IN_PROGRESS", "UNKNOWN"):
                break
            await asyncio.sleep(0.5)
        return answer

    return list(await asyncio.gather(*(one(arguments) for arguments in calls)))


def _count_answers(answers: list[dict[str, Any]]) -> str:
    return summary_of(Counter(a.get("state") or a.get("error", "?") for a in answers))


def summary_of(counts: Counter[str]) -> str:
    return ", ".join(f"{name} ×{n}" for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _judge_moment(stack: Stack, control: SandboxControl, subjects: list[str], cell: Cell, result: TrialResult,
                  moment: str, *, final: bool = False) -> str:  # fmt: skip
    _settle_all(stack, subjects)
    obs = _observe_all(stack, control, subjects)
    found = judge(obs)
    if final:
        found += judge_burst(obs, calls=cell.calls, needed=cell.kill_in_flight,
                             in_flight=result.burst.get("unfinished") if result.kill_landed else None)  # fmt: skip
    result.violations += [f"{moment}: {v}" for v in found]
    return burst_summary(obs)


def burst_summary(obs: Observation) -> str:
    """`APPLIED ×40; 40 entities`: the intents' states counted, and the stamped entities on the rail."""
    entities = sum(len(ids) for ids in obs.stamped.values())
    states = summary_of(Counter(i["state"] for i in obs.intents)) or "no intent"
    return f"{states}; {entities} entit{'y' if entities == 1 else 'ies'}"


class _KillWatch(threading.Thread):
    """Waits for the rail worker to die and, the moment it has, counts what it left: attempts with no
    recorded end (IN_FLIGHT rows: their requests were out or their answers unrecorded), the money calls
    the rail was still applying, and the stamped entities it had already made."""

    def __init__(self, stack: Stack, rail: Actor, control: SandboxControl, subjects: list[str]) -> None:
        super().__init__(daemon=True, name="burst-kill-watch")
        self.stack, self.rail, self.control, self.subjects = stack, rail, control, subjects
        self.seen: dict[str, Any] = {}
        self.start()

    def run(self) -> None:
        deadline = time.monotonic() + KILL_WAIT_S
        while self.rail.alive() and time.monotonic() < deadline:
            time.sleep(0.005)
        if self.rail.alive():
            return
        # The ledger first: it is what the verdict needs, and the dead worker's rows stay as they are until
        # recovery abandons them (a lease plus a call deadline from now); the rail's pending applies drain anyway.
        rows = ledger_rows(self.stack, "SELECT count(*) AS n FROM intent_attempts WHERE finished_at IS NULL")
        self.seen["unfinished"] = rows[0]["n"] if rows else 0
        try:
            self.seen["rail_pending"] = self.control.http.get("/__sandbox/health").json().get("pending_applies")
            self.seen["entities_at_kill"] = sum(1 for r in self.control.entities()
                                                if entity_stamp(r["entity"]) and subject_of(r) in self.subjects)
        except httpx.HTTPError:
            pass  # a witness, not the verdict: the table shows "-"
