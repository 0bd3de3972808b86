"""Races: every operation sent by several agents at once, through at least two gate workers (issue 17).

N distinct refunds; each is sent by every one of A agents (their own identities, mandates and MCP
sessions) at the same moment — the agents take the operations in the same order and wait for one another
before each. A call answered IN_PROGRESS or UNKNOWN is repeated until its answer is definite. Expected:
exactly N rail entities, one per operation; per operation exactly one final answer that created it and
A − 1 marked replayed; every intent APPLIED; the ledger and the rail agree and the audit chain verifies.
Real processes, the sandbox rail, scripted agents.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.crowd import Crowd, token_of
from chaos.trial import _observe_all, _settle_all
from chaos.verdict import judge
from deploy.agent_client import mcp_client, structured
from deploy.stack import StackError

REFUND = 10_000
PENDING = ("IN_PROGRESS", "UNKNOWN")


@dataclass
class RaceResult:
    operations: int
    agents: int
    gate_workers: int
    calls: int = 0  # final answers, one per agent per operation
    entities: int = 0
    created: Counter[str] = field(default_factory=Counter)  # payment -> final answers not marked replayed
    replayed: int = 0
    repeats: int = 0  # IN_PROGRESS / UNKNOWN answers that were repeated
    # payments some agent was first answered IN_PROGRESS / UNKNOWN for: if that was the creating call, every
    # final answer for the payment is rightly a replay (the creating call's own answer was the pending one)
    pended: set[str] = field(default_factory=set)
    states: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        return (f"races: {self.operations} operations x {self.agents} agents through {self.gate_workers} gate "
                f"workers = {self.calls} calls -> {self.entities} entities, {self.replayed} answers replayed, "
                f"{len(self.violations)} violations")  # fmt: skip


def run_races(operations: int, agents: int, base: Path, *, gate_workers: int = 2, seed: int = 1) -> RaceResult:
    started = time.monotonic()
    names = [f"agent_race{i}" for i in range(agents)]
    crowd = Crowd.prepare(base / f"races-{operations}x{agents}", names, gate_workers=gate_workers)
    stack, data = crowd.stack, crowd.stack.data_dir
    result = RaceResult(operations, agents, gate_workers)
    try:
        crowd.start(seed=seed)
        url, control = crowd.url, crowd.control
        assert control is not None
        payments = crowd.payments(f"pay_race{seed}x", operations)
        answers = asyncio.run(_race(url, names, payments))
        _settle_all(stack, payments, timeout_s=120)
        obs = _observe_all(stack, control, payments)
        control.close()
        _tally(result, answers, obs.stamped, payments)
        result.violations += judge(obs)
        result.violations += _race_violations(result, obs.intents)
    except (StackError, OSError) as exc:
        result.violations.append(f"HARNESS: {exc}"[:400])
    finally:
        stack.kill_all()
        result.seconds = round(time.monotonic() - started, 1)
        if not result.violations:
            shutil.rmtree(data, ignore_errors=True)
    return result


async def _race(url: str, names: list[str], payments: list[str]) -> list[tuple[str, dict[str, Any], int]]:
    """(payment, final answer, repeats) for every agent and operation."""
    answers: list[tuple[str, dict[str, Any], int]] = []
    gates = [asyncio.Barrier(len(names)) for _ in payments]

    async def agent(name: str) -> None:
        async with mcp_client(url, token_of(name), timeout_s=120) as client:
            for pid, gate in zip(payments, gates, strict=True):
                await gate.wait()  # every agent sends this operation at the same moment
                repeats = 0
                while True:
                    answer = structured(await client.call_tool("create_refund", {"payment_id": pid, "amount": REFUND}))
                    if answer.get("state") not in PENDING or repeats >= 40:
                        break
                    repeats += 1
                    await asyncio.sleep(0.25)
                answers.append((pid, answer, repeats))

    await asyncio.gather(*(agent(name) for name in names))
    return answers


def _tally(result: RaceResult, answers: list[tuple[str, dict[str, Any], int]], stamped: dict[str, list[str]],
           payments: list[str]) -> None:  # fmt: skip
    result.calls = len(answers)
    result.entities = sum(len(ids) for ids in stamped.values())
    for pid, answer, repeats in answers:
        result.repeats += repeats
        if repeats:
            result.pended.add(pid)
        result.states[str(answer.get("state"))] += 1
        if answer.get("replayed"):
            result.replayed += 1
        else:
            result.created[pid] += 1


def _race_violations(result: RaceResult, intents: list[dict[str, Any]]) -> list[str]:
    found = []
    if result.entities != result.operations:
        found.append(f"ENTITIES: {result.entities} rail entities for {result.operations} operations")
    if len(intents) != result.operations:
        found.append(f"INTENTS: {len(intents)} intents for {result.operations} operations")
    not_applied = {state: n for state, n in result.states.items() if state != "APPLIED"}
    if not_applied:
        found.append(f"NOT_DEFINITE_OR_NOT_APPLIED: final answers {dict(not_applied)}")
    wrong = {pid: n for pid, n in result.created.items() if n != 1}
    # An operation no final answer created is a violation unless its creating call was answered pending first.
    missing = result.operations - len(result.created) - len(result.pended - set(result.created))
    if wrong or missing:
        found.append(f"CREATED_ONCE: {missing} operations answered replayed to every agent, "
                     f"{len(wrong)} answered as created to more than one")  # fmt: skip
    return found


def summarise(result: RaceResult, *, command: str, commit: str) -> str:
    lines = [
        "## Races (every operation sent by several agents at once)",
        "",
        f"Evidence: **real process** (sandbox rail, Redis, {result.gate_workers} gate workers, rail worker, "
        f"reconciler, HTTP ingress), **scripted agent** ({result.agents} agent identities, each its own MCP session, "
        f"sending every operation at the same moment). Commit `{commit}`, {result.seconds} s. "
        f"Reproduce: `{command}`.",
        "",
        result.line(),
        "",
        f"Final answers by state: {dict(result.states)}; IN_PROGRESS / UNKNOWN answers repeated: {result.repeats}. "
        f"Expected: {result.operations} entities and {result.operations * (result.agents - 1)} answers replayed.",
    ]
    if result.violations:
        lines += ["", "Violations:", *[f"- {v}" for v in result.violations[:20]]]
    return "\n".join(lines) + "\n"
