"""How many tool calls one agent may have in flight at once, and money calls in all (ADR 0017).

A waiting money call holds a Redis connection (BLPOP on its outcome) and a worker thread for up to
INTERLOCK_OUTCOME_WAIT_MS. Without a cap one agent's burst took every connection of the pool, and the next
agent's call — enqueued, its outcome published — was answered IN_PROGRESS at once because its wait could not
get a connection. So a money call takes a slot before anything is enqueued; past the agent's cap, or the
ingress's, it is refused with nothing recorded (RETRY_SAME_CALL: nothing was proposed, so repeating later is
safe), and the wait pools are sized to the ingress's cap (ingress.app), so an admitted wait always gets its
connection. Every other tool call (reads, interlock_status, proxy pass-through) holds a thread and an HTTP
connection for up to the rail timeout, so one agent may have only so many of those in flight too.
Every caller runs on the one event loop thread: the counts need no lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mcp_types import CallToolResult

from ingress import results
from interlock.messages import CallerAction

AGENT_CALL_LIMIT = "AGENT_CALL_LIMIT"
INGRESS_BUSY = "INGRESS_BUSY"
SAFE_TO_REPEAT = "repeating the same call is safe and will not pay twice"


@dataclass
class CallSlots:
    """Slots for one kind of call: `per_agent` each, `total` in all (None: no total here)."""

    kind: str  # "money calls waiting for their outcome", ...
    per_agent: int
    per_agent_variable: str
    total: int | None = None
    total_variable: str = ""
    not_done: str = "This call was not recorded and nothing was paid"
    held: dict[str, int] = field(default_factory=dict)
    in_use: int = 0

    def take(self, agent_id: str) -> CallToolResult | None:
        """Take a slot for *agent_id*'s call (None), or the refusal to answer with (no slot taken)."""
        mine = self.held.get(agent_id, 0)
        if mine >= self.per_agent:
            return results.error(
                AGENT_CALL_LIMIT,
                f"agent {agent_id!r} already has {mine} {self.kind}, the most one agent may have "
                f"({self.per_agent_variable}={self.per_agent}). {self.not_done}; {SAFE_TO_REPEAT} once one of "
                "them has been answered",
                CallerAction.RETRY_SAME_CALL,
            )
        if self.total is not None and self.in_use >= self.total:
            return results.error(
                INGRESS_BUSY,
                f"the ingress already has {self.in_use} {self.kind}, its maximum ({self.total_variable}="
                f"{self.total}). {self.not_done}; {SAFE_TO_REPEAT} in a moment",
                CallerAction.RETRY_SAME_CALL,
            )
        self.held[agent_id] = mine + 1
        self.in_use += 1
        return None

    def give_back(self, agent_id: str) -> None:
        left = self.held.get(agent_id, 0) - 1
        if left > 0:
            self.held[agent_id] = left
        else:
            self.held.pop(agent_id, None)
        self.in_use -= 1


def money_slots(per_agent: int, total: int) -> CallSlots:
    return CallSlots("money calls waiting for their outcome", per_agent, "INTERLOCK_AGENT_MAX_MONEY_CALLS",
                     total, "INTERLOCK_INGRESS_MAX_MONEY_CALLS")  # fmt: skip


def other_slots(per_agent: int) -> CallSlots:
    # No total: these wait for a thread of their own limiter (ingress.app) rather than being refused.
    return CallSlots("read or status calls in flight", per_agent, "INTERLOCK_AGENT_MAX_OTHER_CALLS",
                     not_done="Nothing was read or changed for this call")  # fmt: skip
