"""Shaping tool results (SPEC §10): `isError` describes the tool call, `state` describes the money.

A successful result carries the structured content its tool's output schema promises, and the same
JSON as text for clients that show only text. An error result (malformed call, unknown tool, nothing
recorded) carries no structured content at all (ADR 0012): a client validates structured content against
the tool's output schema even when isError is set, and the error's shape is not the tool's. It carries,
as text, the message with its caller_action in words, then one JSON object, the same for every tool:
`{error: {code, message, field?, reason_code?}, caller_action}` — the machine-readable part.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_types import CallToolResult, TextContent

from interlock.errors import InvalidInput
from interlock.messages import CallerAction

# Reason code of the answer given when no outcome arrived before the deadline.
OUTCOME_PENDING = "OUTCOME_PENDING"
STATUS_NOT_FOUND = "STATUS_NOT_FOUND"


def success(structured: dict[str, Any]) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(text=json.dumps(structured, sort_keys=True))],
        structured_content=structured,
        is_error=False,
    )


# Reason codes an agent cannot act on from the code alone: said in words, as a text block after the JSON
# (the structured content keeps the output schema's shape).
EXPLANATIONS: dict[str, str] = {
    "G2_BALANCE_UNREADABLE": (
        "Interlock cannot read this merchant's settlement balance on the rail, so G2 cannot check that a "
        "settlement fits, and none is made. What is missing: a balance read — Razorpay's REST API has no "
        "GET /v1/balance (only Interlock's sandbox rail offers one), and an upstream MCP server needs a "
        "fetch_balance tool. Nothing was paid. Repeating the call gets the same answer: an operator must "
        "connect Interlock to a rail that can report the balance."
    ),
    "G1_FREE_TEXT_REFUSED": (
        "The text sent with this call (the narration, a description or a note) breaks the mandate's rule for "
        "the text that may go out with money: too long, of a shape it does not allow, not the one narration "
        "this payee gets, or any narration to a payee on no list. Nothing was recorded and nothing was paid. "
        "The same call gets the same answer; the call without that text is judged afresh."
    ),
    "G2_PAYEE_NOT_ALLOWED": (
        "The payee (the fund account, as the rail reports it) is not one the mandate lets this agent pay: "
        "payouts go only to the fund accounts or contacts a person listed in the mandate. Nothing was paid. "
        "Do not try another payee id; ask a person to add this one to the mandate if it should be paid."
    ),
    "G2_PAYEE_UNLISTED_HELD": (
        "The payee (the fund account, as the rail reports it) is on no list of the mandate, which holds such a "
        "payout for a person to decide rather than refusing it. Nothing is paid unless an approver releases this "
        "call. Do not try another payee id; ask interlock_status for the outcome later."
    ),
    "G2_PAYOUTS_UNSUPPORTED": (
        "This Interlock reaches the rail through an upstream MCP server, which has no tool that makes a "
        "RazorpayX payout. Nothing was paid; repeating the call gets the same answer."
    ),
    "G2_RAIL_UNAVAILABLE": (
        "The rail could not be read just now (an outage, not a refusal). Nothing was paid; repeating the "
        "same call is safe and will not pay twice."
    ),
    "SHARD_NOT_OWNER": (
        "This call reached a shard of Interlock that no longer serves (or never served) this merchant: it was "
        "routed by an out-of-date shard map, or waited in a queue while the merchant moved. Nothing was "
        "recorded and nothing was paid. Repeating the same call is safe; it succeeds once the ingress routes "
        "by the current map (an operator restarts it after `interlock shards apply`)."
    ),
    "SHARD_MAP_STALE": (
        "The shard that received this call holds a different shard map from the one its ledger accepted, so it "
        "admits nothing until an operator restarts it with the applied map. Nothing was recorded and nothing "
        "was paid. Repeating the same call is safe and will not pay twice."
    ),
}


def money_outcome(structured: dict[str, Any]) -> CallToolResult:
    """A money call's outcome (SPEC §10), with the words for a reason code that needs them."""
    result = success(structured)
    explanation = EXPLANATIONS.get(str(structured.get("reason_code")))
    if explanation is None:
        return result
    return CallToolResult(content=[*result.content, TextContent(text=explanation)],
                          structured_content=structured, is_error=False)  # fmt: skip


def in_progress() -> CallToolResult:
    """Nothing recorded for this call within the deadline: repeating the same call is safe (the SIK dedups)."""
    return success(
        {
            "state": "IN_PROGRESS",
            "sik": None,
            "intent": None,
            "rail_entity_id": None,
            "reason_code": OUTCOME_PENDING,
            "caller_action": CallerAction.RETRY_SAME_CALL.value,
            "replayed": False,
        }
    )


def error(
    code: str,
    message: str,
    caller_action: CallerAction,
    *,
    field: str | None = None,
    reason_code: str | None = None,
) -> CallToolResult:
    detail: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        detail["field"] = field
    if reason_code is not None:
        detail["reason_code"] = reason_code
    body = {"error": detail, "caller_action": caller_action.value}
    text = f"{message} (caller_action: {caller_action.value})"
    # No structured_content: it would be checked against the tool's output schema, which describes the
    # money (or the rail entity), not a refused call — and a client that rejects it loses this answer.
    return CallToolResult(
        content=[TextContent(text=text), TextContent(text=json.dumps(body, sort_keys=True))],
        is_error=True,
    )


def error_body(result: CallToolResult) -> dict[str, Any] | None:
    """The `{error, caller_action}` object of an error result (None for a success): its JSON text block."""
    if not result.is_error:
        return None
    for block in result.content:
        text = getattr(block, "text", None)
        if not text or not text.startswith("{"):
            continue
        try:
            parsed = json.loads(text)
        except ValueError:
            continue
        if isinstance(parsed, dict) and "error" in parsed and "caller_action" in parsed:
            return parsed
    return None


def invalid_input(exc: InvalidInput) -> CallToolResult:
    # Malformed arguments: the same call will be refused again, so the caller must change it.
    return error("INVALID_INPUT", str(exc), CallerAction.DO_NOT_RETRY, field=exc.field)


def unknown_tool(name: str, known: list[str]) -> CallToolResult:
    return error(
        "UNKNOWN_TOOL",
        f"unknown tool {name!r}; this server offers: {', '.join(known)}",
        CallerAction.DO_NOT_RETRY,
        field="name",
    )
