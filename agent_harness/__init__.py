"""The harness kit: what an application needs around its agent to use Interlock well (docs/agents.md).

Per business action it attaches the operation_ref and a signed task to each money call's `_meta`
(`interlock/operation_ref`, `interlock/task`, `interlock/task_sig`) — chosen by the application, never by the
model — and it follows each answer's `caller_action`: RETRY_SAME_CALL repeats the same call with backoff,
DO_NOT_RETRY and DONE go back to the model, WAIT_FOR_APPROVAL and ESCALATE_TO_OPERATOR are surfaced to a person.

`agent_harness.openai_agents`, `agent_harness.langchain_mcp` and `agent_harness.pydantic_ai` plug it into each
framework's own MCP client; each imports its framework, which Interlock itself does not depend on. The kit
imports only Interlock's vocabulary (interlock/), so it runs in the agent's environment, not the proxy's.
"""

from agent_harness.action import (
    Action,
    Escalation,
    NoBusinessAction,
    RetryPolicy,
    SentCall,
    action_for,
    log_escalation,
    structured,
)
from agent_harness.harness import Harness

__all__ = [
    "Action",
    "Escalation",
    "Harness",
    "NoBusinessAction",
    "RetryPolicy",
    "SentCall",
    "action_for",
    "log_escalation",
    "structured",
]
