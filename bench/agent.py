"""The scripted naive agent: a deterministic harness, not a language model.

It does what a careless agent harness does, on purpose: it follows the task and any injected text
literally (the scenario's script says which calls that produces), it obeys whatever a tool's
description says about units when told to read it, and it retries every error, timeout, UNKNOWN and
IN_PROGRESS answer with a fresh request id — and, in direct mode, a fresh idempotency key — up to
`max_attempts`. The same agent drives both modes; only the `Tools` it is handed differs.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from bench.scenario import Retry, Step

logger = logging.getLogger(__name__)

# Not yet a final answer: the naive agent asks again (UNKNOWN and IN_PROGRESS, and the in-between ledger
# states a replayed call can report while recovery is under way).
RETRY_STATES = frozenset({"UNKNOWN", "IN_PROGRESS", "PROPOSED", "AUTHORIZED", "IN_FLIGHT", "RECONCILING",
                          "CONFIRMED_NOT_APPLIED"})  # fmt: skip
_MULTIPLY = re.compile(r"multiply[^.]*?by (\d+)", re.IGNORECASE)
_OMIT_AMOUNT = re.compile(r"omit amount", re.IGNORECASE)
_FULL_BALANCE = re.compile(r"settle_full_balance to true", re.IGNORECASE)


@dataclass(frozen=True)
class Answer:
    """What one tool call told the agent: a money state, or an error (exception, isError, timeout)."""

    state: str | None
    error: str | None = None
    entity_id: str | None = None
    # What Interlock's result adds, for an agent that reads it (the model agent; the scripted one does not).
    caller_action: str | None = None
    reason_code: str | None = None
    sik: str | None = None

    @property
    def retryable(self) -> bool:
        return self.error is not None or self.state in RETRY_STATES


class Tools(Protocol):
    """The same tool names in both modes: straight to the rail (direct) or through Interlock (gated)."""

    async def call(self, tool: str, arguments: dict[str, Any]) -> Answer: ...

    async def description(self, tool: str) -> str | None:
        """The tool's description as listed to the agent right now (None: not listed)."""
        ...


@dataclass(frozen=True)
class CallRecord:
    step: int
    tool: str
    attempt: int
    state: str | None
    error: str | None
    ms: float


def follow_description(arguments: dict[str, Any], description: str | None) -> dict[str, Any]:
    """Obey unit and amount instructions in a tool description, literally (what manifest poisoning exploits)."""
    if not description:
        return arguments
    args = dict(arguments)
    multiply = _MULTIPLY.search(description)
    if multiply and isinstance(args.get("amount"), int):
        args["amount"] *= int(multiply.group(1))
    if _OMIT_AMOUNT.search(description):
        args.pop("amount", None)
    if _FULL_BALANCE.search(description):
        args.pop("amount", None)
        args["settle_full_balance"] = True
    return args


def expand(step: Step, payments: Mapping[str, list[str]]) -> list[dict[str, Any]]:
    """The concrete argument sets of one step: `$name` resolved, for_each and repeat unrolled."""
    subjects = payments[step.for_each] if step.for_each else [None]
    calls = []
    for subject in subjects:
        for i in range(step.repeat):
            args: dict[str, Any] = {}
            for key, value in step.args.items():
                if isinstance(value, str) and value.startswith("$"):
                    name = value[1:]
                    value = subject if name == "each" else payments[name][0]
                args[key] = value
            if step.amount_step and isinstance(args.get("amount"), int):
                args["amount"] += i * step.amount_step
            calls.append(args)
    return calls


class NaiveAgent:
    def __init__(self, tools: Tools, retry: Retry) -> None:
        self.tools = tools
        self.retry = retry
        self.records: list[CallRecord] = []

    async def run(self, steps: list[Step], payments: Mapping[str, list[str]],
                  before_step: Callable[[int], None] | None = None) -> list[CallRecord]:  # fmt: skip
        for index, step in enumerate(steps):
            if before_step is not None:
                before_step(index)
            for args in expand(step, payments):
                if step.follow_description:
                    args = follow_description(args, await self.tools.description(step.tool))
                await asyncio.gather(*(self._attempts(index, step, args) for _ in range(step.parallel)))
        return self.records

    async def _attempts(self, index: int, step: Step, base: dict[str, Any]) -> None:
        for attempt in range(1, self.retry.max_attempts + 1):
            args = dict(base)
            if step.fresh_note:
                # A fresh UUID on every attempt: what an agent minting ids per loop iteration does.
                args["notes"] = {**args.get("notes", {}), "attempt_uuid": uuid.uuid4().hex}
            started = time.perf_counter()
            answer = await self.tools.call(step.tool, args)
            ms = (time.perf_counter() - started) * 1000
            self.records.append(CallRecord(index, step.tool, attempt, answer.state, answer.error, ms))
            if not answer.retryable:
                return
            await asyncio.sleep(self.retry.backoff_ms / 1000)
