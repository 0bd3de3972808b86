"""Proxy mode (INTERLOCK_RAIL=mcp-upstream): the agent sees the upstream's tools, through Interlock.

* Listing: the upstream's tools as it serves them now, minus those the mandate does not grant, minus
  those whose definition hash is not the mandate's pin (drifted or never pinned), plus Interlock's
  own interlock_status. Of each listed tool the agent sees only what the pin covers (name,
  description, inputSchema, which hash to the pin) and Interlock's own title and annotations; money
  tools declare Interlock's result as their output schema, since that is what the agent gets back.
  Every other field the upstream serves (its title, annotations, outputSchema, _meta, icons,
  execution) is dropped: none of it is pinned, and a readOnlyHint on create_refund is exactly what a
  host reads to skip the human's confirmation.
* Money tools (create_refund, create_instant_settlement, create_payout) take the normal path: Proposal → gates
  (G6 judges the upstream's current manifest there) → rail worker → the upstream via the adapter.
* Read tools Interlock knows to be reads (fetch_payment, fetch_refund) pass through after G1 and the
  same pin check, with the upstream's own result. Any other upstream tool is never passed through:
  the upstream's own readOnlyHint is a claim by the party G6 guards against. An upstream error result
  comes back in Interlock's error shape (its words kept, a caller_action added): razorpay-mcp-server
  answers in plain text, which an agent cannot act on without being told whether to repeat.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from mcp_types import CallToolResult, Tool, ToolAnnotations

from ingress import results
from ingress.app import Caller, Ingress
from ingress.money import call_money_tool
from ingress.status import call_status
from interlock.arguments import check_envelope
from interlock.clock import now_ms
from interlock.errors import InvalidInput
from interlock.messages import CallerAction, Verdict
from interlock.scope import check_scope
from interlock.tools import MONEY_TOOLS, READ_TOOLS, TOOLS
from rails.base import RailError, RailErrorKind
from rails.mcp_upstream import McpUpstreamRail, error_of, result_text
from rails.upstream_manifest import definition_hash

logger = logging.getLogger(__name__)

STATUS_TOOL = "interlock_status"


async def list_proxy_tools(ingress: Ingress, caller: Caller) -> list[Tool]:
    try:
        served = await ingress.blocking(ingress.manifest().tools)
    except RailError as exc:
        # Nothing we cannot check is ever listed; the agent still has interlock_status.
        logger.warning("upstream manifest unavailable for listing: %s", exc)
        served = {}
    listed = [_agent_view(tool) for tool in served.values() if provenance_reason(caller, tool) is None]
    return [*listed, Tool.model_validate(TOOLS[STATUS_TOOL].to_mcp())]


def provenance_reason(caller: Caller, tool: Tool) -> str | None:
    """Why *tool* may not be offered to this caller (None: it may). The G6 rule of SPEC §7, for the upstream."""
    mandate = caller.mandate
    if tool.name == STATUS_TOOL or tool.name not in MONEY_TOOLS | READ_TOOLS:
        return "PROXY_NOT_OFFERED"
    if mandate is None or mandate.grant(tool.name) is None:
        return "G1_TOOL_NOT_GRANTED"
    pinned = mandate.pin(tool.name)
    if pinned is None:
        return "G6_UNPINNED_TOOL"
    if pinned != definition_hash(tool):
        return "G6_MANIFEST_DRIFT"
    return None


def _agent_view(tool: Tool) -> Tool:
    """The tool as the agent is shown it: a new Tool built from the pinned fields alone (the upstream's name,
    description and input schema, which hashed to the pin) plus Interlock's own title, annotations and, for a
    money tool, Interlock's result schema. Nothing else of the upstream's Tool is copied: an unpinned field is
    a claim by the very party G6 guards against. A read tool declares no output schema: its result is the
    upstream's own, whose shape no pin covers."""
    ours = TOOLS[tool.name]
    return Tool(
        name=tool.name,
        title=ours.title,
        description=tool.description,
        input_schema=dict(tool.input_schema),
        annotations=ToolAnnotations.model_validate({"title": ours.title, **ours.annotations}),
        output_schema=ours.output_schema if ours.moves_money else None,
    )


async def dispatch_proxy(
    ingress: Ingress, caller: Caller, name: str, arguments: dict[str, Any] | None, meta: Mapping[str, Any] | None
) -> CallToolResult:
    args = {} if arguments is None else arguments
    if name == STATUS_TOOL:
        return await call_status(ingress, caller, args)
    if name in MONEY_TOOLS:
        # Judged by the gates, G6 included, against what the upstream serves when the gate runs.
        return await call_money_tool(ingress, caller, name, args, dict(meta or {}))
    return await _pass_through(ingress, caller, name, args)


async def _pass_through(ingress: Ingress, caller: Caller, name: str, args: dict[str, Any]) -> CallToolResult:
    try:
        served = await ingress.blocking(ingress.manifest().tools)
    except RailError as exc:
        return _unreachable(name, exc)
    tool = served.get(name)
    if tool is None or name not in READ_TOOLS:
        offered = [t.name for t in served.values() if provenance_reason(caller, t) is None]
        return results.unknown_tool(name, [*offered, STATUS_TOOL])
    scope = check_scope(caller.mandate, name, caller.agent_id, caller.merchant_id or "", now_ms())
    reason = scope.reason_code if scope.verdict is not Verdict.ALLOW else provenance_reason(caller, tool)
    if reason is not None:
        return results.error("BLOCKED", f"{name} is not allowed for agent {caller.agent_id!r}: {reason}",
                             CallerAction.DO_NOT_RETRY, reason_code=reason)  # fmt: skip
    try:
        check_envelope(args)
    except InvalidInput as exc:
        return results.invalid_input(exc)
    rail = ingress.rail()
    assert isinstance(rail, McpUpstreamRail)
    try:
        result: CallToolResult = await ingress.blocking(rail.call_raw, name, args)
    except RailError as exc:
        return _unreachable(name, exc)
    return result if not result.is_error else _upstream_error(name, args, result)


_ID_FIELD = {"fetch_payment": "payment_id", "fetch_refund": "refund_id"}


def _upstream_error(tool: str, args: dict[str, Any], result: CallToolResult) -> CallToolResult:
    exc = error_of(result, tool)
    said = " ".join(result_text(result).split())[:500]
    if exc.not_found:
        field = _ID_FIELD.get(tool)
        return results.error("NOT_FOUND", f"the rail has no entity {args.get(field or '')!r} (upstream: {said})",
                             CallerAction.DO_NOT_RETRY, field=field)  # fmt: skip
    if exc.kind is RailErrorKind.REJECTED:
        return results.error("RAIL_REJECTED", f"{tool}: the upstream refused: {said}", CallerAction.DO_NOT_RETRY,
                             field=exc.field)  # fmt: skip
    # A read moves nothing, so an error we cannot read as a refusal is safe to repeat.
    return results.error("RAIL_AMBIGUOUS", f"{tool}: the upstream failed: {said}", CallerAction.RETRY_SAME_CALL)


def _unreachable(tool: str, exc: RailError) -> CallToolResult:
    # A read moves nothing, so an unsent or unanswered one is safe to repeat.
    code = "RAIL_NOT_SENT" if exc.kind is RailErrorKind.NOT_SENT else "RAIL_AMBIGUOUS"
    return results.error(code, f"{tool}: the upstream did not answer: {exc}", CallerAction.RETRY_SAME_CALL)
