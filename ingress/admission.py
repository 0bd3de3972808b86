"""How many money calls may wait for their outcome at once: per agent, and in all (ADR 0015).

A waiting money call holds a Redis connection (BLPOP on its outcome) and a worker thread for up to
INTERLOCK_OUTCOME_WAIT_MS. Without a cap one agent's burst took every connection of the pool, and the next
agent's call — enqueued, its outcome published — was answered IN_PROGRESS at once because its wait could not
get a connection. So a call takes a slot before anything is enqueued; past the agent's cap, or the ingress's,
it is refused with nothing recorded (RETRY_SAME_CALL: repeating later is safe, nothing was proposed), and the
wait pools are sized to the ingress's cap (ingress.app), so an admitted wait always gets its connection.
Every caller runs on the one event loop thread: the counts need no lock.
"""

from __future__ import annotations

from mcp_types import CallToolResult

from ingress import results
from interlock.messages import CallerAction

AGENT_CALL_LIMIT = "AGENT_CALL_LIMIT"
INGRESS_BUSY = "INGRESS_BUSY"
NOT_RECORDED = "This call was not recorded and nothing was paid; repeating the same call is safe and will not pay twice"


class MoneyCallSlots:
    def __init__(self, per_agent: int, total: int) -> None:
        self.per_agent = per_agent
        self.total = total
        self.held: dict[str, int] = {}
        self.in_use = 0

    def take(self, agent_id: str) -> CallToolResult | None:
        """Take a slot for *agent_id*'s call (None), or the refusal to answer with (no slot taken)."""
        mine = self.held.get(agent_id, 0)
        if mine >= self.per_agent:
            return results.error(
                AGENT_CALL_LIMIT,
                f"agent {agent_id!r} already has {mine} money calls waiting for their outcome, the most one agent "
                f"may have (INTERLOCK_AGENT_MAX_MONEY_CALLS={self.per_agent}). {NOT_RECORDED} once one of them "
                "has been answered",
                CallerAction.RETRY_SAME_CALL,
            )
        if self.in_use >= self.total:
            return results.error(
                INGRESS_BUSY,
                f"the ingress already has {self.in_use} money calls waiting for their outcome, its maximum "
                f"(INTERLOCK_INGRESS_MAX_MONEY_CALLS={self.total}). {NOT_RECORDED} in a moment",
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
