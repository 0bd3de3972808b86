"""The catalogue of the tools Interlock itself exposes to an agent (SPEC §10).

Each tool's name, description and input schema are exactly what an agent sees, and G6 (SPEC §7)
pins their hash in the mandate: any change here — one character of a description — changes
`tool_definition_hash` and must be re-reviewed by the human who signs the mandate. Schemas are
kept as canonical JSON text and handed out as fresh copies, so no caller can mutate what is pinned.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from interlock.canonical import canonical_hash, canonical_json
from interlock.notes import AGENT_MAX_NOTES, MAX_NOTE_CHARS, RESERVED_NOTE_KEYS

ID_PATTERN = r"^[A-Za-z0-9_]{1,64}$"
SIK_PATTERN = r"^[A-Z2-7]{32}$"  # first 32 characters of RFC 4648 base32 (SPEC §4)
OPERATION_REF_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
SETTLEMENT_DESCRIPTION_PATTERN = r"^[A-Za-z0-9 ]{1,30}$"  # Razorpay's limit on instant settlements (SPEC §4)
PAYOUT_TOOL = "create_payout"
FUND_ACCOUNT_PATTERN = r"^fa_[A-Za-z0-9]{14}$"  # a RazorpayX fund account id (SPEC §18)
PAYOUT_MODES = ("IMPS", "NEFT", "RTGS", "UPI")
PAYOUT_PURPOSE_PATTERN = r"^[A-Za-z0-9 _-]{1,30}$"  # refund, salary, vendor bill, ... or the business's own
PAYOUT_NARRATION_PATTERN = r"^[A-Za-z0-9 ]{1,30}$"  # RazorpayX: letters, digits and spaces, at most 30
MAX_DISTINCT_REASON_CHARS = 200

CALLER_ACTIONS = ("DONE", "RETRY_SAME_CALL", "WAIT_FOR_APPROVAL", "DO_NOT_RETRY", "ESCALATE_TO_OPERATOR")

_AMOUNT = {"type": "integer", "minimum": 1, "description": "integer minor units (paise): 50000 means Rs 500.00"}
_NOTES = {
    "type": "object",
    "maxProperties": AGENT_MAX_NOTES,
    "propertyNames": {"minLength": 1, "maxLength": MAX_NOTE_CHARS},
    "additionalProperties": {"type": "string", "maxLength": MAX_NOTE_CHARS},
    # The reserved keys are named in words rather than by a schema `not`, which is outside the schema subset some
    # model APIs accept for tools (as oneOf is, below).
    "description": f"free-form key/value notes kept on the rail entity (at most {AGENT_MAX_NOTES} keys; "
    f"{', '.join(RESERVED_NOTE_KEYS)} are Interlock's own)",
}
_DISTINCT = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_DISTINCT_REASON_CHARS,
    "description": "only to deliberately make a second, otherwise identical money movement; "
    "say why in plain words (it is written to the audit log). Omit it when retrying.",
}

_RETRY_SAFE = (
    "Retrying the same call is safe: Interlock recognises it as the same operation and never moves money twice; "
    "a repeat answers with the original outcome and replayed=true."
)

_RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "state": {
            "type": "string",
            "description": "what happened to the money: APPLIED, HELD, BLOCKED, FAILED_TERMINAL, UNKNOWN, "
            "IN_PROGRESS, or another ledger state",
        },
        "sik": {"type": ["string", "null"], "description": "Interlock's key for this business operation"},
        "intent": {
            "type": ["object", "null"],
            "properties": {
                "merchant_id": {"type": "string"},
                "tool": {"type": "string"},
                "subject": {"type": "string"},
                "amount_minor": {"type": "integer"},
                "currency": {"type": "string"},
            },
            "required": ["merchant_id", "tool", "subject", "amount_minor", "currency"],
            "additionalProperties": False,
        },
        "rail_entity_id": {"type": ["string", "null"]},
        "reason_code": {"type": ["string", "null"]},
        "caller_action": {"type": "string", "enum": list(CALLER_ACTIONS)},
        "replayed": {"type": "boolean"},
        "rail_status": {
            "type": "object",
            "description": "interlock_status only, for an APPLIED call: what the rail has said of the money since "
            "(a refund pending, processed or failed; a settlement created, initiated, processed, "
            "partially_processed or reversed; a payout queued, processing, processed, reversed, failed or "
            "cancelled). With an attention, a person must decide what follows.",
            "properties": {
                "status": {"type": "string"},
                "final": {"type": "boolean"},
                "attention": {"type": ["string", "null"]},
                "amounts": {"type": "object", "additionalProperties": {"type": "integer"}},
                "source": {"type": "string"},
                "updated_at": {"type": "integer"},
            },
            "required": ["status", "final", "attention", "amounts", "source", "updated_at"],
            "additionalProperties": False,
        },
        "task": {
            "type": "object",
            "description": "interlock_status only: the harness-signed task the call was bound to",
            "properties": {"task_id": {"type": "string"}, "task_digest": {"type": "string"}},
            "required": ["task_id", "task_digest"],
            "additionalProperties": False,
        },
    },
    "required": ["state", "sik", "intent", "rail_entity_id", "reason_code", "caller_action", "replayed"],
    "additionalProperties": False,
}

# Read tools return the rail's entity as-is; only the fields an agent relies on are promised.
_ENTITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "entity": {"type": "string"},
        "amount": {"type": "integer"},
        "currency": {"type": "string"},
        "status": {"type": "string"},
    },
    "required": ["id", "entity"],
}


def _annotations(*, read_only: bool, destructive: bool, open_world: bool) -> dict[str, bool]:
    # Every Interlock tool is idempotent: money tools by the SIK, reads trivially.
    return {
        "readOnlyHint": read_only,
        "destructiveHint": destructive,
        "idempotentHint": True,
        "openWorldHint": open_world,
    }


@dataclass(frozen=True)
class ToolSpec:
    """One tool as the agent sees it, plus whether calling it can move money."""

    name: str
    title: str
    description: str
    moves_money: bool
    _input_schema_json: str
    _output_schema_json: str
    _annotations_json: str

    @property
    def input_schema(self) -> dict[str, Any]:
        return json.loads(self._input_schema_json)  # type: ignore[no-any-return]

    @property
    def output_schema(self) -> dict[str, Any]:
        return json.loads(self._output_schema_json)  # type: ignore[no-any-return]

    @property
    def annotations(self) -> dict[str, Any]:
        return json.loads(self._annotations_json)  # type: ignore[no-any-return]

    @property
    def definition_hash(self) -> str:
        return tool_definition_hash(self.name, self.description, self.input_schema)

    def to_mcp(self) -> dict[str, Any]:
        """The tool as listed by MCP `tools/list` (camelCase keys)."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
            "annotations": {"title": self.title, **self.annotations},
        }


def tool_definition_hash(name: str, description: str, input_schema: dict[str, Any]) -> str:
    """sha256 hex of the canonical JSON of {name, description, input_schema} — the G6 pin (SPEC §7)."""
    return canonical_hash({"name": name, "description": description, "input_schema": input_schema})


def _spec(
    name: str,
    title: str,
    description: str,
    *,
    properties: dict[str, Any],
    required: list[str],
    moves_money: bool,
    output_schema: dict[str, Any],
    annotations: dict[str, bool],
) -> ToolSpec:
    input_schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return ToolSpec(
        name=name,
        title=title,
        description=description,
        moves_money=moves_money,
        _input_schema_json=canonical_json(input_schema).decode("utf-8"),
        _output_schema_json=canonical_json(output_schema).decode("utf-8"),
        _annotations_json=canonical_json(annotations).decode("utf-8"),
    )


_CATALOGUE = (
    _spec(
        "fetch_payment",
        "Fetch a payment",
        "Look up one payment on the payment rail by its id (e.g. pay_29QQoUBi66xm2f). Read-only; amounts in the "
        "result are integer minor units (paise). Safe to repeat.",
        properties={"payment_id": {"type": "string", "pattern": ID_PATTERN, "description": "the rail's payment id"}},
        required=["payment_id"],
        moves_money=False,
        output_schema=_ENTITY_SCHEMA,
        annotations=_annotations(read_only=True, destructive=False, open_world=True),
    ),
    _spec(
        "fetch_refund",
        "Fetch a refund",
        "Look up one refund on the payment rail by its id (e.g. rfnd_FP8QHiV938haTz). Read-only; amounts in the "
        "result are integer minor units (paise). Safe to repeat.",
        properties={"refund_id": {"type": "string", "pattern": ID_PATTERN, "description": "the rail's refund id"}},
        required=["refund_id"],
        moves_money=False,
        output_schema=_ENTITY_SCHEMA,
        annotations=_annotations(read_only=True, destructive=False, open_world=True),
    ),
    _spec(
        "create_refund",
        "Refund a payment",
        "Refund a captured payment, in full or in part. `amount` is an integer in minor units (paise: 50000 means "
        "Rs 500.00); omit it to refund everything still refundable. The refund is checked against your mandate and "
        "against what the payment still allows before any money moves; the result's `state` says what happened "
        "and `caller_action` says what to do next. " + _RETRY_SAFE,
        properties={
            "payment_id": {"type": "string", "pattern": ID_PATTERN, "description": "the payment to refund"},
            "amount": _AMOUNT,
            "speed": {"type": "string", "enum": ["normal", "optimum"], "description": "refund speed"},
            "notes": _NOTES,
            "interlock_distinct_reason": _DISTINCT,
        },
        required=["payment_id"],
        moves_money=True,
        output_schema=_RESULT_SCHEMA,
        annotations=_annotations(read_only=False, destructive=True, open_world=True),
    ),
    _spec(
        "create_instant_settlement",
        "Settle balance instantly",
        "Pay out the merchant's settlement balance to its bank account now (an instant settlement, which costs a "
        "fee). Give exactly one of `amount` (integer minor units, paise: 50000 means Rs 500.00) or "
        "`settle_full_balance: true`. Checked against your mandate, its limits and fee budget before any money "
        "moves; the result's `state` says what happened and `caller_action` says what to do next. " + _RETRY_SAFE,
        # Exactly one of amount / settle_full_balance is enforced by the ingress rather than by a top-level
        # oneOf, which several model APIs refuse in tool schemas.
        properties={
            "amount": _AMOUNT,
            "settle_full_balance": {"type": "boolean", "const": True, "description": "settle the whole balance"},
            "description": {
                "type": "string",
                "pattern": SETTLEMENT_DESCRIPTION_PATTERN,
                "description": "up to 30 letters, digits or spaces",
            },
            "notes": _NOTES,
            "interlock_distinct_reason": _DISTINCT,
        },
        required=[],
        moves_money=True,
        output_schema=_RESULT_SCHEMA,
        annotations=_annotations(read_only=False, destructive=True, open_world=True),
    ),
    _spec(
        PAYOUT_TOOL,
        "Pay a registered payee",
        "Send money from the business's RazorpayX account to one of its registered payees (a fund account, "
        "fa_...). `amount` is an integer in minor units (paise: 50000 means Rs 500.00). Only payees your mandate "
        "names can be paid, never more than the account's balance less payouts already on their way, and large "
        "payouts wait for a person's approval; the result's `state` says what happened and `caller_action` says "
        "what to do next. " + _RETRY_SAFE,
        properties={
            "fund_account_id": {"type": "string", "pattern": FUND_ACCOUNT_PATTERN, "description": "the payee"},
            "amount": _AMOUNT,
            "currency": {"type": "string", "enum": ["INR"], "description": "the payout's currency"},
            "mode": {"type": "string", "enum": list(PAYOUT_MODES),
                     "description": "IMPS, NEFT or RTGS to a bank account; UPI to a UPI id"},
            "purpose": {"type": "string", "pattern": PAYOUT_PURPOSE_PATTERN,
                        "description": "why: refund, cashback, payout, salary, utility bill, vendor bill, ..."},
            "narration": {"type": "string", "pattern": PAYOUT_NARRATION_PATTERN,
                          "description": "shown on the payee's bank statement: up to 30 letters, digits or spaces"},
            "notes": _NOTES,
            "interlock_distinct_reason": _DISTINCT,
        },
        required=["fund_account_id", "amount", "currency", "mode", "purpose"],
        moves_money=True,
        output_schema=_RESULT_SCHEMA,
        annotations=_annotations(read_only=False, destructive=True, open_world=True),
    ),
    _spec(
        "interlock_status",
        "Status of an operation",
        "Report the current state of an earlier money call, by its `sik` (from that call's result) or by the "
        "`operation_ref` your harness attached to it; give exactly one. Read-only and safe to repeat; it never "
        "moves money.",
        properties={
            "sik": {"type": "string", "pattern": SIK_PATTERN, "description": "the sik from an earlier result"},
            "operation_ref": {"type": "string", "pattern": OPERATION_REF_PATTERN},
        },
        required=[],
        moves_money=False,
        output_schema=_RESULT_SCHEMA,
        # Answers from Interlock's own ledger, not from the rail.
        annotations=_annotations(read_only=True, destructive=False, open_world=False),
    ),
)

TOOLS: dict[str, ToolSpec] = {spec.name: spec for spec in _CATALOGUE}
MONEY_TOOLS: frozenset[str] = frozenset(name for name, spec in TOOLS.items() if spec.moves_money)
READ_TOOLS: frozenset[str] = frozenset(name for name, spec in TOOLS.items() if not spec.moves_money)


def current_pins() -> dict[str, str]:
    """tool name → definition hash of every tool Interlock itself serves, as `interlock init` pins them."""
    return {name: spec.definition_hash for name, spec in TOOLS.items()}
