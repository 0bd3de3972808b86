"""The sandbox front's own profile ("sandbox", the default): Razorpay MCP tool names and arguments, each
mapped to one REST call, with errors that keep the rail's HTTP status and error body.

The definitions are this module's data: what `interlock manifest pin --upstream` pins for the front.
Changing a description here changes that pin, exactly as an upstream release would.

Results: a 2xx answers the rail's JSON as text. Anything else is an `isError` result whose text is
`{"http_status": N, "error": {...}}` (the rail's own error body) or `{"http_status": N, "body": "..."}`
(a page that is not JSON), or `{"transport_error": "..."}` when the rail did not answer at all.
The other profile, razorpay-mcp-server's own contract, is sandbox.mcp_razorpay.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from mcp_types import CallToolResult, TextContent

_ID = re.compile(r"^[A-Za-z0-9_]{1,64}$")
_PAGING = {
    "count": {"type": "integer", "minimum": 1, "maximum": 100, "description": "number of items to return (max 100)"},
    "skip": {"type": "integer", "minimum": 0, "description": "number of items to skip"},
    "from": {"type": "integer", "description": "unix timestamp (seconds) from which to list"},
    "to": {"type": "integer", "description": "unix timestamp (seconds) up to which to list"},
}
_NOTES = {"type": "object", "description": "key-value pairs (at most 15) stored with the entity"}


@dataclass(frozen=True)
class FrontTool:
    name: str
    description: str
    properties: dict[str, Any]
    required: tuple[str, ...]
    read_only: bool

    def to_mcp(self) -> dict[str, Any]:
        schema = {"type": "object", "properties": self.properties, "required": list(self.required)}
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": schema,
            "annotations": {"readOnlyHint": self.read_only, "destructiveHint": not self.read_only},
        }


@dataclass(frozen=True)
class RestCall:
    method: str
    path: str
    json: dict[str, Any] | None = None
    params: dict[str, Any] | None = None


@dataclass(frozen=True)
class RestReply:
    """What the rail answered to a RestCall: its status and body, or the transport error when it did not."""

    status: int | None
    text: str = ""
    error: Exception | None = None

    def json_body(self) -> Any:
        try:
            return json.loads(self.text)
        except ValueError:
            return None


def _tool(name: str, description: str, properties: dict[str, Any], required: tuple[str, ...] = (),
          *, read_only: bool = True) -> FrontTool:  # fmt: skip
    return FrontTool(name, description, properties, required, read_only)


TOOLS: dict[str, FrontTool] = {
    t.name: t
    for t in (
        _tool("fetch_payment", "Use this tool to retrieve the details of a specific payment using its id. "
              "Amounts are in the smallest currency unit (paise).",
              {"payment_id": {"type": "string", "description": "payment_id is unique identifier of the payment"}},
              ("payment_id",)),  # fmt: skip
        _tool("fetch_refund", "Use this tool to retrieve the details of a specific refund using its id.",
              {"refund_id": {"type": "string", "description": "The unique identifier of the refund, e.g. rfnd_..."}},
              ("refund_id",)),  # fmt: skip
        _tool("create_refund", "Use this tool to create a normal refund for a payment. Amount should be in the "
              "smallest currency unit (e.g., for Rs 295, use 29500).",
              {"payment_id": {"type": "string", "description": "Unique identifier of the payment to refund"},
               "amount": {"type": "integer", "description": "Refund amount in the smallest currency unit"},
               "speed": {"type": "string", "enum": ["normal", "optimum"], "description": "refund speed"},
               "notes": _NOTES,
               "receipt": {"type": "string", "description": "a unique identifier for this refund, for your reference"}},
              ("payment_id", "amount"), read_only=False),  # fmt: skip
        _tool("fetch_multiple_refunds_for_payment", "Use this tool to fetch multiple refunds for a payment, "
              "newest first.",
              {"payment_id": {"type": "string", "description": "Unique identifier of the payment"}, **_PAGING},
              ("payment_id",)),  # fmt: skip
        _tool("create_instant_settlement", "Create an instant settlement of the merchant's balance. Amount is in "
              "the smallest currency unit; or pass settle_full_balance.",
              {"amount": {"type": "integer", "description": "amount to settle in the smallest currency unit"},
               "settle_full_balance": {"type": "boolean", "description": "settle the whole balance"},
               "description": {"type": "string", "description": "custom note, at most 30 characters"},
               "notes": _NOTES},
              (), read_only=False),  # fmt: skip
        _tool("fetch_all_instant_settlements", "Fetch all instant settlements, newest first.", dict(_PAGING)),
        _tool("fetch_balance", "Fetch the merchant's settlement balance (sandbox only).", {}),
    )
}


def rest_call(name: str, args: dict[str, Any]) -> RestCall:
    """The REST request behind tool *name*; ValueError names a missing or malformed argument."""
    if name == "fetch_payment":
        return RestCall("GET", f"/v1/payments/{_id(args, 'payment_id')}")
    if name == "fetch_refund":
        return RestCall("GET", f"/v1/refunds/{_id(args, 'refund_id')}")
    if name == "create_refund":
        body = {k: args[k] for k in ("amount", "speed", "notes", "receipt") if args.get(k) is not None}
        return RestCall("POST", f"/v1/payments/{_id(args, 'payment_id')}/refund", json=body)
    if name == "fetch_multiple_refunds_for_payment":
        return RestCall("GET", f"/v1/payments/{_id(args, 'payment_id')}/refunds", params=_paging(args))
    if name == "create_instant_settlement":
        body = {k: args[k] for k in ("amount", "settle_full_balance", "description", "notes") if k in args}
        return RestCall("POST", "/v1/settlements/ondemand", json=body)
    if name == "fetch_all_instant_settlements":
        return RestCall("GET", "/v1/settlements/ondemand", params=_paging(args))
    if name == "fetch_balance":
        return RestCall("GET", "/v1/balance")
    raise ValueError(f"unknown tool {name}")


def _id(args: dict[str, Any], field: str) -> str:
    # Ids go into the URL path: nothing that could change the path is forwarded.
    value = args.get(field)
    if not isinstance(value, str) or not _ID.match(value):
        raise ValueError(f"{field} must be 1-64 characters of [A-Za-z0-9_]")
    return value


def _paging(args: dict[str, Any]) -> dict[str, Any]:
    return {k: args[k] for k in ("count", "skip", "from", "to") if args.get(k) is not None}


def text_result(text: str, *, is_error: bool) -> CallToolResult:
    return CallToolResult(content=[TextContent(text=text)], is_error=is_error)


def envelope_error(payload: dict[str, Any]) -> CallToolResult:
    return text_result(json.dumps(payload), is_error=True)


class SandboxProfile:
    """The front's own contract: errors carry the rail's status and error body as JSON."""

    name = "sandbox"
    server_name = "sandbox-razorpay-mcp"
    rail_timeout_s = 30.0

    def tools(self) -> list[dict[str, Any]]:
        return [spec.to_mcp() for spec in TOOLS.values()]

    def request(self, name: str, arguments: dict[str, Any]) -> RestCall | CallToolResult:
        if name not in TOOLS:
            return envelope_error({"error": {"code": "BAD_REQUEST_ERROR", "description": f"unknown tool {name}"}})
        try:
            return rest_call(name, arguments)
        except ValueError as exc:
            return envelope_error({"error": {"code": "BAD_REQUEST_ERROR", "description": str(exc)}})

    def answer(self, name: str, call: RestCall, reply: RestReply) -> CallToolResult:
        if reply.status is None:
            return envelope_error({"transport_error": f"{type(reply.error).__name__}: {reply.error}"})
        body = reply.json_body()
        if 200 <= reply.status < 300 and isinstance(body, dict):
            return text_result(json.dumps(body), is_error=False)
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            return envelope_error({"http_status": reply.status, "error": body["error"]})
        return envelope_error({"http_status": reply.status, "body": reply.text[:2000]})
