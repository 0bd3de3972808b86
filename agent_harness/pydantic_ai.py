"""PydanticAI (`pydantic-ai-slim[mcp]`): a `process_tool_call` hook for `pydantic_ai.mcp.MCPToolset` — the
toolset's documented place to add request `_meta` and a retry policy to each tool call. Money calls carry the
open business action's `_meta` and follow their `caller_action` (agent_harness.action)."""

from __future__ import annotations

from typing import Any

from agent_harness.action import action_for, structured


async def process_tool_call(ctx: Any, call_tool: Any, name: str, args: dict[str, Any]) -> Any:
    """`MCPToolset(url, process_tool_call=process_tool_call)`; *call_tool* is the toolset's `CallToolFunc`."""
    action = action_for(name)
    if action is None:
        return await call_tool(name, args)
    return await action.call(name, args, lambda own: call_tool(name, args, metadata=own), structured)
