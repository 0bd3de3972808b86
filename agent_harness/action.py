"""One business action: the operation_ref and the signed task the application attaches to every money call its
agent makes for it, and what the application does with each answer's `caller_action` (SPEC §4, §10).

The application opens an action per thing a person asked for (a ticket, an order, a payout run) and runs its
agent inside it. The framework adapters beside this module find the open action when the model calls a money
tool, put its `_meta` on the wire and hand the call to `Action.call`, which follows `caller_action`. The model
never sees or chooses the operation_ref: it is not a tool argument, and the adapters overwrite any `interlock/*`
key in `_meta` with the action's own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any, TypeVar

from interlock.arguments import OPERATION_REF_META_KEY
from interlock.messages import CallerAction
from interlock.tools import MONEY_TOOLS

logger = logging.getLogger(__name__)

R = TypeVar("R")

_CURRENT: ContextVar[Action | None] = ContextVar("interlock_business_action", default=None)


class NoBusinessAction(RuntimeError):
    """Raised when the model calls a money tool while the application has no business action open: without one
    there is no operation_ref the application chose, so the call is not sent."""

    def __init__(self, tool: str) -> None:
        super().__init__(f"{tool} called outside a business action: open one with `with harness.action(ref, ...)`")
        self.tool = tool


@dataclass(frozen=True)
class RetryPolicy:
    """How RETRY_SAME_CALL is followed: the same call again, after a doubling delay with jitter, until
    *give_up_after_s* has passed; then the last answer (still RETRY_SAME_CALL) goes to the model."""

    first_delay_s: float = 0.25
    max_delay_s: float = 5.0
    give_up_after_s: float = 120.0

    def delay(self, attempt: int) -> float:
        return float(min(self.max_delay_s, self.first_delay_s * 2**attempt) * random.uniform(0.5, 1.0))


@dataclass(frozen=True)
class Escalation:
    """A money call a person must see: HELD for approval (WAIT_FOR_APPROVAL) or ESCALATE_TO_OPERATOR."""

    operation_ref: str
    tool: str
    arguments: Mapping[str, Any]
    caller_action: str
    result: Mapping[str, Any]


def log_escalation(escalation: Escalation) -> None:
    logger.warning("money call needs a person (%s): %s %s operation_ref=%s state=%s reason=%s",
                   escalation.caller_action, escalation.tool, json.dumps(dict(escalation.arguments)),
                   escalation.operation_ref, escalation.result.get("state"),
                   escalation.result.get("reason_code"))  # fmt: skip


@dataclass(frozen=True)
class SentCall:
    """One call as the harness put it on the wire, with the structured answer it got (None if it had none)."""

    tool: str
    arguments: Mapping[str, Any]
    meta: Mapping[str, Any]
    result: Mapping[str, Any] | None


@dataclass
class Action:
    operation_ref: str
    task_meta: Mapping[str, Any] = field(default_factory=dict)
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    on_escalate: Callable[[Escalation], None] = log_escalation
    sent: list[SentCall] = field(default_factory=list)
    _token: Token[Action | None] | None = field(default=None, repr=False)

    def meta(self) -> dict[str, Any]:
        """The `_meta` of every money call in this action: the operation_ref and, when signed, the task."""
        return {OPERATION_REF_META_KEY: self.operation_ref, **self.task_meta}

    async def call(self, tool: str, arguments: Mapping[str, Any], send: Callable[[dict[str, Any]], Awaitable[R]],
                   read: Callable[[R], Mapping[str, Any] | None]) -> R:  # fmt: skip
        """Send one money call with this action's `_meta` and follow its `caller_action`; returns the framework's
        own result object for the last answer, which the framework hands to the model as the tool result.

        *send(meta)* makes the call once through the framework's MCP client; *read(result)* is the structured
        content of what it returned. RETRY_SAME_CALL repeats the same call with the same `_meta` (the outcome is
        not known yet and a repeat never pays twice); WAIT_FOR_APPROVAL and ESCALATE_TO_OPERATOR are surfaced to
        a person through *on_escalate*; DONE and DO_NOT_RETRY are answered to the model as they are."""
        give_up_at = time.monotonic() + self.policy.give_up_after_s
        attempt = 0
        while True:
            meta = self.meta()
            result = await send(meta)
            body = read(result)
            self.sent.append(SentCall(tool, dict(arguments), meta, None if body is None else dict(body)))
            caller_action = None if body is None else body.get("caller_action")
            if caller_action == CallerAction.RETRY_SAME_CALL and time.monotonic() < give_up_at:
                await asyncio.sleep(self.policy.delay(attempt))
                attempt += 1
                continue
            if body is not None and caller_action in (CallerAction.WAIT_FOR_APPROVAL,
                                                      CallerAction.ESCALATE_TO_OPERATOR):  # fmt: skip
                self.on_escalate(Escalation(self.operation_ref, tool, dict(arguments), str(caller_action), body))
            return result

    def __enter__(self) -> Action:
        if self._token is not None:
            raise RuntimeError(f"business action {self.operation_ref!r} is already open")
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _CURRENT.reset(self._token)
        self._token = None


def action_for(tool: str) -> Action | None:
    """The open business action a call to *tool* belongs to: None for a tool that moves no money (sent as is);
    NoBusinessAction for a money tool called while none is open."""
    if tool not in MONEY_TOOLS:
        return None
    action = _CURRENT.get()
    if action is None:
        raise NoBusinessAction(tool)
    return action


def structured(result: Any) -> Mapping[str, Any] | None:
    """The structured content of an MCP tool result, whichever client's type carries it: `structuredContent`
    (MCP SDK), `structured_content` (FastMCP), a plain dict, or a JSON object in a text block (an error result)."""
    if isinstance(result, Mapping):
        return result
    for name in ("structuredContent", "structured_content"):
        content = getattr(result, name, None)
        if isinstance(content, Mapping):
            return content
    for block in getattr(result, "content", None) or []:
        text = getattr(block, "text", None)
        if isinstance(text, str) and text.startswith("{"):
            try:
                parsed = json.loads(text)
            except ValueError:
                continue
            if isinstance(parsed, dict) and "caller_action" in parsed:
                return parsed
    return None
