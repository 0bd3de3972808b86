"""The model agent: a small language model chooses every tool call the bench makes for a scenario.

One episode reads the scenario's ticket (task, injected text, the tools as listed right now, the choices) and loops:
the model emits one choice under a grammar that allows exactly the listed calls; the harness executes it through the
same `Tools` as the scripted agent (direct: the rail; gated: Interlock's MCP ingress) and appends the answer. It ends
when the model chooses done or its budget of decisions is spent. The harness never retries, never adds an operation
ref or idempotency key, never edits arguments: it executes what the model chose (direct mode's REST client mints a
fresh idempotency key per request, as it does for the scripted agent).

A scenario whose script is one task step repeated (a scheduled job: C1, C2, C4, C5, P3) runs one fresh episode per
firing (at most JOB_FIRINGS); one with parallel workers (B5) runs one episode per worker, one after the other.

After an ambiguous answer (an error, UNKNOWN or another not-yet-final state, or caller_action RETRY_SAME_CALL) the
next decision is classified for the retry study: the same call again, a status check, another call, done, or none.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.agent import RETRY_STATES, Answer, CallRecord, Tools
from bench.model_choices import (
    DONE,
    STATUS_TOOL,
    Ticket,
    appended,
    build_ticket,
    call_text,
    candidates,
    gbnf,
    parse_choice,
    status_choice,
)
from bench.model_llm import ChoiceModel, Decoding
from bench.model_prompt import PREFIX, added_text, call_line, changed_text, result_text, ticket_text
from bench.scenario import Scenario

logger = logging.getLogger(__name__)

MAX_DECISIONS = 50  # per episode: C3's 45 refunds and a few more
JOB_DECISIONS = 2  # per firing of a scheduled job: its call, then done or another
JOB_FIRINGS = 10  # at most, of a scheduled job's scenario (C1 fires 20, C5 30): the machine's 2 CPUs are shared
BEHAVIOURS = ("same call", "status check", "other call", "done", "none (budget or context spent)")


DEFINITE_ERRORS = ("REJECTED", "NOT_SENT", "invalid")  # direct: the rail refused it, or it never left
# Direct through an upstream MCP server (family D), the error result carries the rail's HTTP status in its text.
UPSTREAM_STATUS = re.compile(r'"http_status"\s*:\s*(\d{3})')
NOT_DEFINITE_4XX = frozenset({408, 409, 429})  # a timeout, a conflict in progress, a rate limit: no rejection


def ambiguous(answer: Answer) -> bool:
    """An answer that does not say whether the money moved: what the retry study watches the model answer.
    Gated, Interlock's caller_action says so; direct, any error but a rejection (a 504, a timeout, a lost answer)."""
    if answer.state in RETRY_STATES or answer.caller_action == "RETRY_SAME_CALL":
        return True
    if answer.caller_action is not None or answer.error is None:
        return False
    status = UPSTREAM_STATUS.search(answer.error)
    if status is not None:
        code = int(status.group(1))
        return not (400 <= code < 500 and code not in NOT_DEFINITE_4XX)
    return not answer.error.startswith(DEFINITE_ERRORS)


def ambiguity_label(answer: Answer) -> str:
    if answer.caller_action == "RETRY_SAME_CALL" or answer.state in RETRY_STATES:
        return f"{answer.state or 'error'} / {answer.caller_action or '-'}"
    status = UPSTREAM_STATUS.search(answer.error or "")
    if status is not None:
        return f"error: upstream isError, HTTP {status.group(1)}"
    return "error: " + " ".join((answer.error or "").split()[:2])


@dataclass(frozen=True)
class RetryEvent:
    """One ambiguous answer and what the model did next (and what that next call was answered)."""

    answer: str
    behaviour: str
    next_state: str | None = None


@dataclass
class Transcript:
    """What one mode of one scenario's model run did, for the report and the work directory."""

    decisions: int = 0
    invalid: int = 0  # emitted text that is no choice (a grammar bug; counted, executed as done)
    context_full: int = 0
    events: list[RetryEvent] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    model_s: float = 0.0


def plan(scenario: Scenario) -> tuple[int, int]:
    """(episodes, decisions per episode) for *scenario*."""
    steps = scenario.steps
    if len(steps) == 1 and steps[0].repeat > 1 and steps[0].source == "task":
        return min(steps[0].repeat, JOB_FIRINGS), JOB_DECISIONS
    scripted = 0
    for step in steps:
        subjects = scenario.payments[step.for_each].count if step.for_each else 1
        scripted += subjects * step.repeat
    return max(step.parallel for step in steps), min(scripted + 3, MAX_DECISIONS)


class ModelAgent:
    def __init__(self, model: ChoiceModel, tools: Tools, scenario: Scenario, payments: Mapping[str, list[str]], *,
                 gated: bool, seed: int, decoding: Decoding) -> None:  # fmt: skip
        self.model = model
        self.tools = tools
        self.scenario = scenario
        self.payments = payments
        self.gated = gated
        self.seed = seed
        self.decoding = decoding
        self.records: list[CallRecord] = []
        self.transcript = Transcript()
        self._money_calls = 0
        self._stepped = -1

    async def run(self, before_step: Callable[[int], None] | None = None) -> list[CallRecord]:
        episodes, budget = plan(self.scenario)
        for episode in range(episodes):
            await self._episode(episode, budget, before_step)
        return self.records

    async def _descriptions(self, ticket: Ticket) -> dict[str, str | None]:
        return {tool: await self.tools.description(tool) for tool in ticket.tools}

    async def _episode(self, episode: int, budget: int, before_step: Callable[[int], None] | None) -> None:
        ticket = build_ticket(self.scenario, self.payments, gated=self.gated)
        self._step(before_step)
        listed = await self._descriptions(ticket)
        ticket.choices = candidates(self.scenario, self.payments, ticket, listed)
        choices = list(ticket.choices)
        prompt = PREFIX + ticket_text(ticket, listed)  # each decision's prompt is this, + what happened, + "CALL "
        pending: tuple[str, Answer] | None = None  # the last ambiguous answer, awaiting the next decision
        seen: dict[str, int] = {}
        for index in range(budget):
            self._step(before_step)
            now = await self._descriptions(ticket)
            for tool in (t for t in ticket.tools if now[t] != listed[t]):
                prompt += changed_text(tool, now[tool])
            if now != listed:
                known = {call_text(x) for x in choices}
                fresh = [c for c in candidates(self.scenario, self.payments, ticket, now) if call_text(c) not in known]
                if fresh:
                    choices = appended(choices, fresh)
                    prompt += added_text(choices, fresh)
                listed = now
            prompt += "CALL "
            if self.model.count_tokens(prompt) + self.decoding.max_tokens >= self.decoding.n_ctx:
                self.transcript.context_full += 1
                break
            started = time.perf_counter()
            text = await asyncio.to_thread(self.model.complete, prompt, gbnf(choices), seed=self._seed(episode, index))
            self.transcript.model_s += time.perf_counter() - started
            self.transcript.decisions += 1
            chosen = parse_choice(text, choices)
            if chosen is None:
                logger.warning("%s: the model emitted %r, which is no choice", self.scenario.id, text[:120])
                self.transcript.invalid += 1
                chosen = DONE
            spelled = call_text(chosen)
            self.transcript.calls.append(f"{episode}.{index} {spelled}")
            behaviour = "done" if chosen == DONE else "same call" if pending is not None and spelled == pending[0] \
                else "status check" if chosen["name"] == STATUS_TOOL else "other call"
            if chosen == DONE:
                if pending is not None:
                    self.transcript.events.append(RetryEvent(ambiguity_label(pending[1]), behaviour))
                return
            answer = await self._execute(index, chosen, seen)
            if pending is not None:
                self.transcript.events.append(RetryEvent(ambiguity_label(pending[1]), behaviour, answer.state))
                pending = None
            if chosen["name"] != STATUS_TOOL:
                self._money_calls += 1
                if ambiguous(answer):
                    pending = (spelled, answer)
            prompt += call_line(text.strip()) + result_text(answer)
            # A status check is offered where it answers a question: after an answer that left the money unknown.
            if answer.sik and pending is not None and status_choice(answer.sik) not in choices:
                choices = appended(choices, [status_choice(answer.sik)])
                prompt += added_text(choices, [status_choice(answer.sik)])
        if pending is not None:
            self.transcript.events.append(RetryEvent(ambiguity_label(pending[1]), BEHAVIOURS[-1]))

    async def _execute(self, index: int, chosen: dict[str, Any], seen: dict[str, int]) -> Answer:
        spelled = call_text(chosen)
        seen[spelled] = seen.get(spelled, 0) + 1
        started = time.perf_counter()
        answer = await self.tools.call(chosen["name"], dict(chosen.get("arguments", {})))
        ms = (time.perf_counter() - started) * 1000
        self.records.append(CallRecord(index, chosen["name"], seen[spelled], answer.state, answer.error, ms))
        return answer

    def _step(self, before_step: Callable[[int], None] | None) -> None:
        """The scenario's mid-run switch (D6's poisoning after its first step) keyed on money calls made so far."""
        if before_step is not None and self._money_calls != self._stepped:
            self._stepped = self._money_calls
            before_step(self._money_calls)

    def _seed(self, episode: int, index: int) -> int:
        """Each decision's sampler seed: the run's seed, the scenario, the episode and the decision, so one
        scenario's draws do not depend on which scenarios ran before it."""
        return (self.seed * 1_000_003 + zlib.crc32(self.scenario.id.encode()) + episode * 1009 + index) % (2**31)
