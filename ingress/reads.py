"""Read tools (fetch_payment, fetch_refund): G1 only (SPEC §7), then straight to the rail's REST client.

A read that G1 refuses is an error result, not a success with state BLOCKED: the read tools' output
schema promises a rail entity, and a conforming MCP client rejects a successful result that is not one.
The refusal still carries the G1 reason code.
"""

from __future__ import annotations

from typing import Any

from mcp_types import CallToolResult

from ingress import results
from ingress.app import Caller, Ingress
from interlock.arguments import check_envelope, check_fields, parse_id
from interlock.clock import now_ms
from interlock.errors import ConfigError, InvalidInput
from interlock.messages import CallerAction, Verdict
from interlock.scope import check_scope
from rails.base import Rail, RailError, RailErrorKind

_ID_FIELD = {"fetch_payment": "payment_id", "fetch_refund": "refund_id"}


async def call_read_tool(ingress: Ingress, caller: Caller, tool: str, arguments: dict[str, Any]) -> CallToolResult:
    field = _ID_FIELD[tool]
    try:
        check_fields(tool, check_envelope(arguments))
        entity_id = parse_id(arguments.get(field), field)
    except InvalidInput as exc:
        return results.invalid_input(exc)

    scope = check_scope(caller.mandate, tool, caller.agent_id, caller.merchant_id or "", now_ms())
    if scope.verdict is not Verdict.ALLOW:
        return results.error(
            "BLOCKED",
            f"{tool} is not allowed for agent {caller.agent_id!r}: {scope.reason_code}",
            CallerAction.DO_NOT_RETRY,
            reason_code=scope.reason_code,
        )
    try:
        rail = ingress.rail()
    except ConfigError as exc:
        return results.error("RAIL_NOT_CONFIGURED", str(exc), CallerAction.ESCALATE_TO_OPERATOR)
    try:
        raw = await ingress.blocking(_fetch, rail, tool, entity_id)
    except RailError as exc:
        return _rail_error(tool, field, entity_id, exc)
    return results.success(raw)


def _fetch(rail: Rail, tool: str, entity_id: str) -> dict[str, Any]:
    entity = rail.fetch_payment(entity_id) if tool == "fetch_payment" else rail.fetch_refund(entity_id)
    return dict(entity.raw)


def _rail_error(tool: str, field: str, entity_id: str, exc: RailError) -> CallToolResult:
    if exc.not_found:
        return results.error(
            "NOT_FOUND", f"the rail has no entity {entity_id!r}", CallerAction.DO_NOT_RETRY, field=field
        )
    if exc.kind is RailErrorKind.REJECTED:
        return results.error("RAIL_REJECTED", f"{tool}: the rail refused: {exc}", CallerAction.DO_NOT_RETRY)
    # A read moves nothing, so any uncertain or unsent read is safe to repeat.
    return results.error(f"RAIL_{exc.kind.value}", f"{tool}: the rail did not answer: {exc}",
                         CallerAction.RETRY_SAME_CALL)  # fmt: skip
