"""Any framework that drives an MCP SDK `ClientSession` it is given — LangChain's `langchain-mcp-adapters`
(`load_mcp_tools(session)`, and so LangGraph agents): a session whose money calls carry the open business
action's `_meta` and follow their `caller_action` (agent_harness.action).

A wrapper rather than a subclass, so it fits whichever MCP SDK version the framework runs on: the adapters call
`session.call_tool(name, arguments, ...)` and their tool-call interceptors cannot set `_meta`, which only the
session's `call_tool(meta=...)` sends.
"""

from __future__ import annotations

from typing import Any

from agent_harness.action import action_for, structured


class HarnessSession:
    """*session*, an initialised `mcp.ClientSession`, with the harness around `call_tool`; everything else is
    the session's own."""

    def __init__(self, session: Any) -> None:
        self._session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        action = action_for(name)
        if action is None:
            return await self._session.call_tool(name, arguments, *args, **kwargs)

        async def send_once(own: dict[str, Any]) -> Any:
            meta = {**(kwargs.get("meta") or {}), **own}
            return await self._session.call_tool(name, arguments, *args, **{**kwargs, "meta": meta})

        return await action.call(name, arguments or {}, send_once, structured)
