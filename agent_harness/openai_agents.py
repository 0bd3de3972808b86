"""The OpenAI Agents SDK (`openai-agents`): its MCP servers with Interlock's harness around each money call.

Drop-in subclasses of `agents.mcp.MCPServerStreamableHttp` and `MCPServerStdio`: `call_tool`, which the SDK
calls for every tool the model invokes, sends money calls with the open business action's `_meta` and follows
their `caller_action` (agent_harness.action). The SDK's own `tool_meta_resolver` only adds `_meta`; the retry
needs the call itself, hence the subclass.
"""

from __future__ import annotations

from typing import Any

from agents.mcp import MCPServerStdio as _SdkStdio
from agents.mcp import MCPServerStreamableHttp as _SdkStreamableHttp

from agent_harness.action import action_for, structured


class _Harnessed:
    async def call_tool(self, tool_name: str, arguments: dict[str, Any] | None,
                        meta: dict[str, Any] | None = None) -> Any:  # fmt: skip
        send_once = super().call_tool  # type: ignore[misc]
        action = action_for(tool_name)
        if action is None:
            return await send_once(tool_name, arguments, meta=meta)
        return await action.call(tool_name, arguments or {},
                                 lambda own: send_once(tool_name, arguments, meta={**(meta or {}), **own}),
                                 structured)  # fmt: skip


class MCPServerStreamableHttp(_Harnessed, _SdkStreamableHttp):
    """`agents.mcp.MCPServerStreamableHttp` whose money calls carry the business action's `_meta`."""


class MCPServerStdio(_Harnessed, _SdkStdio):
    """`agents.mcp.MCPServerStdio` whose money calls carry the business action's `_meta`."""
