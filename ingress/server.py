"""The MCP server itself, on the SDK's low-level `Server`: a proxy lists and dispatches tools by
name and shapes every result itself, which is exactly what the low-level handlers give us.

In SDK v2 a handler's exception is not turned into an isError result, so every path here returns a
CallToolResult; the one catch-all below turns a bug into a retryable error instead of a dead call.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp_types import CallToolRequestParams, CallToolResult, ListToolsResult, PaginatedRequestParams, Tool

from ingress import results
from ingress.app import Caller, Ingress
from ingress.money import call_money_tool
from ingress.proxy import dispatch_proxy, list_proxy_tools
from ingress.reads import call_read_tool
from ingress.status import call_status
from interlock.messages import CallerAction
from interlock.tools import MONEY_TOOLS, TOOLS

logger = logging.getLogger(__name__)

STATUS_TOOL = "interlock_status"
INSTRUCTIONS = (
    "Interlock moves money only within a human-approved mandate and never twice for one operation. "
    "Amounts are integers in minor units (paise). Every money result has `state` (what happened to the money) "
    "and `caller_action` (what to do next); when it says RETRY_SAME_CALL, repeat the identical call."
)


def granted_tools(caller: Caller) -> list[str]:
    """The tools this caller's mandate grants, plus interlock_status, in catalogue order."""
    grants = set() if caller.mandate is None else set(caller.mandate.scope.grants)
    return [name for name in TOOLS if name in grants or name == STATUS_TOOL]


def build_server(ingress: Ingress) -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None) -> ListToolsResult:
        caller = ingress.caller(ctx.request)
        if ingress.proxy and caller is not None:
            return ListToolsResult(tools=await list_proxy_tools(ingress, caller))
        names = [] if caller is None else granted_tools(caller)
        return ListToolsResult(tools=[Tool.model_validate(TOOLS[name].to_mcp()) for name in names])

    async def call_tool(ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        caller = ingress.caller(ctx.request)
        if caller is None:
            # The HTTP middleware answers 401 before this; reaching here means no identity: refuse.
            return results.error("UNAUTHENTICATED", "no agent identity on this call", CallerAction.DO_NOT_RETRY)
        # A money call takes its slot in ingress.money (the proxy's money tools too); every other call here.
        slots = None if params.name in MONEY_TOOLS else ingress.other_slots
        refusal = None if slots is None else slots.take(caller.agent_id)
        if refusal is not None:
            logger.warning("tool call %s by %s refused: %s", params.name, caller.agent_id, results.error_body(refusal))
            return refusal
        try:
            return await dispatch(ingress, caller, params.name, params.arguments, params.meta)
        except Exception:
            logger.exception("tool call %s by %s failed unexpectedly", params.name, caller.agent_id)
            return results.error(
                "INTERNAL_ERROR",
                "Interlock hit an internal error on this call; repeating the same call is safe and will not pay twice",
                CallerAction.RETRY_SAME_CALL,
            )
        finally:
            if slots is not None:
                slots.give_back(caller.agent_id)

    return Server(
        "interlock",
        version=_version(),
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        # Mcp-Param header validation (2026-07-28 HTTP) runs before identity is known; the catalogue
        # schema is the same for every agent, so answer it from there rather than from a per-agent list.
        get_tool_input_schema=lambda name: TOOLS[name].input_schema if name in TOOLS else None,
    )


async def dispatch(
    ingress: Ingress,
    caller: Caller,
    name: str,
    arguments: dict[str, Any] | None,
    meta: Mapping[str, Any] | None,
) -> CallToolResult:
    if ingress.proxy:
        return await dispatch_proxy(ingress, caller, name, arguments, meta)
    if name not in TOOLS:
        return results.unknown_tool(name, granted_tools(caller))
    args = {} if arguments is None else arguments
    if name in MONEY_TOOLS:
        # An ungranted money tool is still proposed: G1 refuses it in the gates and the refusal is recorded.
        return await call_money_tool(ingress, caller, name, args, dict(meta or {}))
    if name == STATUS_TOOL:
        return await call_status(ingress, caller, args)
    return await call_read_tool(ingress, caller, name, args)


def _version() -> str:
    try:
        return version("interlock")
    except PackageNotFoundError:
        return "0"
