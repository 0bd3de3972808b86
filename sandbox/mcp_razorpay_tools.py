"""razorpay-mcp-server's tool definitions, as its tools/list serves them (the front's razorpay-mcp-server profile).

Mirrored from the public repository razorpay/razorpay-mcp-server (Go, on mark3labs/mcp-go):
* pkg/razorpay/payments.go   fetch_payment
* pkg/razorpay/refunds.go    create_refund, fetch_refund, update_refund, fetch_multiple_refunds_for_payment,
                             fetch_specific_refund_for_payment, fetch_all_refunds — the release that imports
                             razorpay-go/v2: amount required (a JSON number, minimum 100), no idempotency_key
* pkg/razorpay/settlements.go (commit ca2e35c7) create_instant_settlement, fetch_all_instant_settlements,
                             fetch_instant_settlement_with_id
* pkg/mcpgo/tool.go (commit 96c93322) how a parameter becomes JSON Schema: WithNumber → "number",
  Min → "minimum" (numbers) / "minLength" (strings), Max → "maximum" / "maxLength", Required → the
  tool's "required" list, DefaultValue → "default", MaxProperties → "maxProperties".
The server declares no annotations of its own: mcp-go's NewTool defaults are served.

Not mirrored: the server's other toolsets (payment links, orders, QR codes, payouts, regular settlements,
tokens, checkout) and the payment tools Interlock never offers (card details, capture, update, list);
the sandbox rail does not serve their endpoints. Any change here changes the pins, as a release would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# mark3labs/mcp-go NewTool: every tool carries these unless the server sets its own (razorpay-mcp-server does not).
MCP_GO_ANNOTATIONS = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": True}


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # JSON Schema type as mcp-go writes it: string, number, boolean, object, array
    description: str
    required: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def schema(self) -> dict[str, Any]:
        return {"type": self.type, "description": self.description, **self.extra}


@dataclass(frozen=True)
class RzpTool:
    name: str
    description: str
    params: tuple[Param, ...]

    def to_mcp(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "object", "properties": {p.name: p.schema() for p in self.params}}
        required = [p.name for p in self.params if p.required]
        if required:  # mcp-go: `required,omitempty`
            schema["required"] = required
        return {"name": self.name, "description": self.description, "inputSchema": schema,
                "annotations": dict(MCP_GO_ANNOTATIONS)}  # fmt: skip


def _s(name: str, description: str, *, required: bool = False, **extra: Any) -> Param:
    return Param(name, "string", description, required, extra)


def _n(name: str, description: str, *, required: bool = False, **extra: Any) -> Param:
    return Param(name, "number", description, required, extra)


_PAY = "ID should have a pay_ prefix."
_RFND = "ID should have a rfnd_ prefix."

TOOLS: dict[str, RzpTool] = {t.name: t for t in (
    RzpTool("fetch_payment",
            "Use this tool to retrieve the details of a specific payment using its id. Amount returned is in paisa",
            (_s("payment_id", "payment_id is unique identifier of the payment to be retrieved.", required=True),)),
    RzpTool("create_refund",
            "Use this tool to create a normal refund for a payment. Amount should be in the smallest currency unit "
            "(e.g., for ₹295, use 29500)",
            (_s("payment_id", f"Unique identifier of the payment which needs to be refunded. {_PAY}", required=True),
             _n("amount", "Payment amount in the smallest currency unit (e.g., for ₹295, use 29500)", required=True,
                minimum=100),
             _s("speed", "The speed at which the refund is to be processed. Default is 'normal'. For instant "
                "refunds, speed is set as 'optimum'."),
             Param("notes", "object", "Key-value pairs used to store additional information. A maximum of 15 "
                   "key-value pairs can be included."),
             _s("receipt", "A unique identifier provided by you for your internal reference."))),
    RzpTool("fetch_refund", "Use this tool to retrieve the details of a specific refund using its id.",
            (_s("refund_id", f"Unique identifier of the refund which is to be retrieved. {_RFND}", required=True),)),
    RzpTool("update_refund", "Use this tool to update the notes for a specific refund. Only the notes field can be "
            "modified.",
            (_s("refund_id", f"Unique identifier of the refund which needs to be updated. {_RFND}", required=True),
             Param("notes", "object", "Key-value pairs used to store additional information. A maximum of 15 "
                   "key-value pairs can be included, with each value not exceeding 256 characters.", True))),
    RzpTool("fetch_multiple_refunds_for_payment", "Use this tool to retrieve multiple refunds for a payment. By "
            "default, only the last 10 refunds are returned.",
            (_s("payment_id", f"Unique identifier of the payment for which refunds are to be retrieved. {_PAY}",
                required=True),
             _n("from", "Unix timestamp at which the refunds were created."),
             _n("to", "Unix timestamp till which the refunds were created."),
             _n("count", "The number of refunds to fetch for the payment."),
             _n("skip", "The number of refunds to be skipped for the payment."))),
    RzpTool("fetch_specific_refund_for_payment", "Use this tool to retrieve details of a specific refund made for a "
            "payment.",
            (_s("payment_id", f"Unique identifier of the payment for which the refund has been made. {_PAY}",
                required=True),
             _s("refund_id", f"Unique identifier of the refund to be retrieved. {_RFND}", required=True))),
    RzpTool("fetch_all_refunds", "Use this tool to retrieve details of all refunds. By default, only the last 10 "
            "refunds are returned.",
            (_n("from", "Unix timestamp at which the refunds were created"),
             _n("to", "Unix timestamp till which the refunds were created"),
             _n("count", "The number of refunds to fetch. You can fetch a maximum of 100 refunds"),
             _n("skip", "The number of refunds to be skipped"))),
    RzpTool("create_instant_settlement", "Create an instant settlement to get funds transferred to your bank account",
            (_n("amount", "The amount you want to get settled instantly in amount in the smallest currency sub-unit "
                "(e.g., for ₹295, use 29500)", required=True, minimum=200),
             Param("settle_full_balance", "boolean", "If true, Razorpay will settle the maximum amount possible and "
                   "ignore amount parameter", extra={"default": False}),
             _s("description", "Custom note for the instant settlement.", maxLength=30, pattern="^[a-zA-Z0-9 ]*$"),
             Param("notes", "object", "Key-value pairs for additional information. Max 15 pairs, 256 chars each",
                   extra={"maxProperties": 15}))),
    RzpTool("fetch_all_instant_settlements", "Fetch all instant settlements with optional filtering, pagination, "
            "and payout details",
            (_n("count", "Number of instant settlement records to fetch (default: 10, max: 100)", minimum=1,
                maximum=100),
             _n("skip", "Number of instant settlement records to skip (default: 0)", minimum=0),
             _n("from", "Unix timestamp (in seconds) from when instant settlements are to be fetched", minimum=0),
             _n("to", "Unix timestamp (in seconds) up till when instant settlements are to be fetched", minimum=0),
             Param("expand", "array", "Pass this if you want to fetch payout details as part of the response for all "
                   "instant settlements. Supported values: ondemand_payouts"))),
    RzpTool("fetch_instant_settlement_with_id", "Fetch details of a specific instant settlement using its ID",
            (_s("settlement_id", "The ID of the instant settlement to fetch. ID starts with 'setlod_'",
                required=True),)),
)}  # fmt: skip
