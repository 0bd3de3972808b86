"""The sandbox front's tools: Razorpay MCP tool names and arguments, each mapped to one REST call.

The definitions are this module's data: what `interlock manifest pin --upstream` pins for the front.
Changing a description here changes that pin, exactly as an upstream release would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

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
