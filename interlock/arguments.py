"""Strict validation of tool-call arguments (SPEC §10), shared by the ingress (before anything is
enqueued) and the gate workers (defence in depth: a Proposal may not have come through the ingress).

Every refusal is an InvalidInput naming the field and the limit, so the agent's caller can act on it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from interlock.errors import InvalidInput
from interlock.money import parse_amount
from interlock.notes import AGENT_MAX_NOTES, MAX_NOTE_CHARS, RAIL_MAX_NOTES, RESERVED_NOTE_KEYS
from interlock.tools import (
    FUND_ACCOUNT_PATTERN,
    PAYOUT_MODES,
    PAYOUT_NARRATION_PATTERN,
    PAYOUT_PURPOSE_PATTERN,
)

MAX_ARGUMENTS_BYTES = 64 * 1024
MAX_DEPTH = 32
MAX_DISTINCT_CHARS = 200
_ID = re.compile(r"^[A-Za-z0-9_]{1,64}$")
_SIK = re.compile(r"^[A-Z2-7]{32}$")
_OPERATION_REF = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_DESCRIPTION = re.compile(r"^[A-Za-z0-9 ]{1,30}$")
_FUND_ACCOUNT = re.compile(FUND_ACCOUNT_PATTERN)
_PURPOSE = re.compile(PAYOUT_PURPOSE_PATTERN)
_NARRATION = re.compile(PAYOUT_NARRATION_PATTERN)
PAYOUT_CURRENCIES = ("INR",)
_ALLOWED = {
    "fetch_payment": {"payment_id"},
    "fetch_refund": {"refund_id"},
    "create_refund": {"payment_id", "amount", "speed", "notes", "interlock_distinct_reason"},
    "create_instant_settlement": {"amount", "settle_full_balance", "description", "notes", "interlock_distinct_reason"},
    "create_payout": {"fund_account_id", "amount", "currency", "mode", "purpose", "narration", "notes",
                      "interlock_distinct_reason"},
    "interlock_status": {"sik", "operation_ref"},
}


@dataclass(frozen=True, slots=True)
class MoneyCall:
    """A validated money call as the agent asked for it (before the gates resolve it on the rail)."""

    tool: str
    payment_id: str | None
    amount: int | None  # None: refund everything refundable / settle the full balance
    speed: str | None
    notes: dict[str, str]
    description: str | None
    distinct_reason: str | None
    # create_payout only: the payee (a lookup key, resolved on the rail) and how the money goes.
    payout: PayoutTerms | None = None


@dataclass(frozen=True, slots=True)
class PayoutTerms:
    """What a create_payout call says besides its amount: the payee it names and how the money goes (SPEC §18).
    Only the payee (the fund account's contact, as the rail states it) enters the SIK (ADR 0028); mode, purpose and
    narration are sent as given."""

    fund_account_id: str
    currency: str
    mode: str
    purpose: str
    narration: str | None


def check_envelope(arguments: Any) -> dict[str, Any]:
    """Size and depth limits, before looking at any field."""
    if not isinstance(arguments, dict):
        raise InvalidInput(f"arguments must be a JSON object, got {type(arguments).__name__}", field="arguments")
    size = len(json.dumps(arguments, ensure_ascii=False, default=str).encode("utf-8"))
    if size > MAX_ARGUMENTS_BYTES:
        raise InvalidInput(f"arguments are {size} bytes as JSON; the limit is {MAX_ARGUMENTS_BYTES} (64 KiB)",
                           field="arguments")  # fmt: skip
    if _depth(arguments) > MAX_DEPTH:
        raise InvalidInput(f"arguments nest deeper than {MAX_DEPTH} levels", field="arguments")
    return arguments


def _depth(value: Any, level: int = 1) -> int:
    if level > MAX_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level)
    return level


def check_fields(tool: str, arguments: dict[str, Any]) -> None:
    allowed = _ALLOWED.get(tool)
    if allowed is None:
        raise InvalidInput(f"unknown tool {tool!r}; known tools: {', '.join(sorted(_ALLOWED))}", field="tool")
    unknown = sorted(set(arguments) - allowed)
    if unknown:
        raise InvalidInput(f"unknown field {unknown[0]!r} for {tool}; allowed: {', '.join(sorted(allowed))}",
                           field=unknown[0])  # fmt: skip


def parse_id(value: Any, field: str) -> str:
    if not isinstance(value, str) or not _ID.match(value):
        raise InvalidInput(f"{field} must be 1-64 characters of [A-Za-z0-9_], got {value!r}", field=field)
    return value


def parse_notes(value: Any) -> dict[str, str]:
    """The agent's own notes, refused unless every key Interlock writes (interlock.notes) still fits beside them
    under the rail's limits: at most AGENT_MAX_NOTES keys, none of them reserved, each key 1 to MAX_NOTE_CHARS
    characters and each value a string of at most MAX_NOTE_CHARS."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInput(f"notes must be an object of string values, got {type(value).__name__}", field="notes")
    reserved = ", ".join(RESERVED_NOTE_KEYS)
    if len(value) > AGENT_MAX_NOTES:
        raise InvalidInput(f"notes: at most {AGENT_MAX_NOTES} of your own, this call has {len(value)}: Razorpay "
                           f"allows {RAIL_MAX_NOTES} and Interlock writes {len(RESERVED_NOTE_KEYS)} ({reserved})",
                           field="notes")  # fmt: skip
    for key, item in value.items():
        if key in RESERVED_NOTE_KEYS:
            raise InvalidInput(f"notes.{key} is reserved: Interlock writes {reserved} itself on every money call",
                               field=f"notes.{key}")  # fmt: skip
        if not key or len(key) > MAX_NOTE_CHARS:
            raise InvalidInput(f"notes keys must be 1 to {MAX_NOTE_CHARS} characters, got one of {len(key)}",
                               field="notes")  # fmt: skip
        if not isinstance(item, str):
            raise InvalidInput(f"notes.{key} must be a string, got {type(item).__name__}", field=f"notes.{key}")
        if len(item) > MAX_NOTE_CHARS:
            raise InvalidInput(f"notes.{key[:40]} is {len(item)} characters; values are limited to {MAX_NOTE_CHARS}",
                               field=f"notes.{key[:40]}")  # fmt: skip
    return dict(value)


def parse_distinct(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput("interlock_distinct_reason must be a non-empty string", field="interlock_distinct_reason")
    if len(value) > MAX_DISTINCT_CHARS:
        raise InvalidInput(f"interlock_distinct_reason is {len(value)} characters; the limit is {MAX_DISTINCT_CHARS}",
                           field="interlock_distinct_reason")  # fmt: skip
    return value


def parse_money_call(tool: str, arguments: Any) -> MoneyCall:
    """Validate a create_refund / create_instant_settlement / create_payout call; InvalidInput names the bad field."""
    arguments = check_envelope(arguments)
    check_fields(tool, arguments)
    notes = parse_notes(arguments.get("notes"))
    distinct = parse_distinct(arguments.get("interlock_distinct_reason"))
    amount = None if arguments.get("amount") is None else parse_amount(arguments["amount"], field="amount")
    if tool == "create_refund":
        if "payment_id" not in arguments:
            raise InvalidInput("payment_id is required for create_refund", field="payment_id")
        speed = arguments.get("speed")
        if speed is not None and speed not in ("normal", "optimum"):
            raise InvalidInput(f"speed must be 'normal' or 'optimum', got {speed!r}", field="speed")
        return MoneyCall(tool, parse_id(arguments["payment_id"], "payment_id"), amount, speed, notes, None, distinct)
    if tool == "create_instant_settlement":
        full = arguments.get("settle_full_balance")
        if full is not None and full is not True:
            raise InvalidInput("settle_full_balance may only be true", field="settle_full_balance")
        if (amount is None) == (full is None):
            raise InvalidInput("give exactly one of amount or settle_full_balance: true", field="amount")
        description = arguments.get("description")
        if description is not None and (not isinstance(description, str) or not _DESCRIPTION.match(description)):
            raise InvalidInput("description must be 1-30 letters, digits or spaces", field="description")
        return MoneyCall(tool, None, amount, None, notes, description, distinct)
    if tool == "create_payout":
        if amount is None:
            raise InvalidInput("amount is required for create_payout (integer minor units)", field="amount")
        return MoneyCall(tool, None, amount, None, notes, None, distinct, payout=_payout_terms(arguments))
    raise InvalidInput(f"{tool} does not move money", field="tool")


def _payout_terms(arguments: dict[str, Any]) -> PayoutTerms:
    for name in ("fund_account_id", "currency", "mode", "purpose"):
        if name not in arguments:
            raise InvalidInput(f"{name} is required for create_payout", field=name)
    fund_account_id = arguments["fund_account_id"]
    if not isinstance(fund_account_id, str) or not _FUND_ACCOUNT.match(fund_account_id):
        raise InvalidInput(f"fund_account_id must be a RazorpayX fund account id (fa_ and 14 letters or digits), "
                           f"got {fund_account_id!r}", field="fund_account_id")  # fmt: skip
    currency = arguments["currency"]
    if currency not in PAYOUT_CURRENCIES:
        raise InvalidInput(f"currency must be one of {', '.join(PAYOUT_CURRENCIES)} for a payout, got {currency!r}",
                           field="currency")  # fmt: skip
    mode = arguments["mode"]
    if mode not in PAYOUT_MODES:
        raise InvalidInput(f"mode must be one of {', '.join(PAYOUT_MODES)}, got {mode!r}", field="mode")
    purpose = arguments["purpose"]
    if not isinstance(purpose, str) or not _PURPOSE.match(purpose):
        raise InvalidInput("purpose must be 1-30 letters, digits, spaces, '_' or '-'", field="purpose")
    narration = arguments.get("narration")
    if narration is not None and (not isinstance(narration, str) or not _NARRATION.match(narration)):
        raise InvalidInput("narration must be 1-30 letters, digits or spaces", field="narration")
    return PayoutTerms(fund_account_id, currency, mode, purpose, narration)


def parse_status_query(arguments: Any) -> tuple[str | None, str | None]:
    """(sik, operation_ref) for interlock_status: exactly one of them."""
    arguments = check_envelope(arguments)
    check_fields("interlock_status", arguments)
    sik, ref = arguments.get("sik"), arguments.get("operation_ref")
    if (sik is None) == (ref is None):
        raise InvalidInput("give exactly one of sik or operation_ref", field="sik")
    if sik is not None and (not isinstance(sik, str) or not _SIK.match(sik)):
        raise InvalidInput("sik must be 32 characters of A-Z and 2-7", field="sik")
    if ref is not None:
        parse_operation_ref(ref)
    return sik, ref


# The `_meta` key under which the application harness, never the model, names the business operation (SPEC §4).
OPERATION_REF_META_KEY = "interlock/operation_ref"


def parse_operation_ref(value: Any) -> str:
    if not isinstance(value, str) or not _OPERATION_REF.match(value):
        raise InvalidInput("operation_ref must be 1-64 characters of [A-Za-z0-9_-]", field="operation_ref")
    return value
