"""The RazorpayX business account payouts are paid from: its number and its balance (GET /v1/banking_balances).

One account per sandbox, numbered by INTERLOCK_SANDBOX_ACCOUNT_NUMBER (default 7878780080316316), shown as a
RazorpayX Lite account (`razorpayx_lite`: no bank behind it, so `bank_name` and `bank_code` are null). Its
balance is kept apart from the payment gateway's `balance` that instant settlements draw down: on Razorpay they
are two products and two balances. `amount` and `available_amount` are the same (nothing is ever held), and
`refreshed_at` is when the balance last changed.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandbox import validation
from sandbox.errors import RailHttpError
from sandbox.rail import Rail, collection

ACCOUNT_TYPE = "razorpayx_lite"
ACCOUNT_TYPES = ("current_account", "razorpayx_lite", "fixed_deposit")
CURRENCY = "INR"


def account_number(rail: Rail, value: Any) -> str:
    """The `account_number` of a payout call: required, and the sandbox's own RazorpayX account."""
    if value is None or value == "":
        raise RailHttpError("The account number field is required.", field="account_number")
    if value != rail.account_number:
        raise RailHttpError("The account number is invalid.", field="account_number")
    return str(value)


def balance_of(rail: Rail) -> int:
    found = rail.journal.banking_balance(rail.account_number)
    return 0 if found is None else found[0]


def banking_balance(rail: Rail) -> dict[str, Any]:
    found = rail.journal.banking_balance(rail.account_number)
    amount, refreshed_ms = (0, 0) if found is None else found
    return {
        "entity": "banking_balance",
        "currency": CURRENCY,
        "account_number": rail.account_number,
        "account_type": ACCOUNT_TYPE,
        "bank_name": None,
        "bank_code": None,
        "amount": amount,
        "available_amount": amount,
        "refreshed_at": refreshed_ms // 1000 or None,
    }


async def fetch_banking_balances(rail: Rail, request: Request) -> Response:
    """GET /v1/banking_balances[?account_type=&bank_code=]: the accounts' balances, as a collection."""
    query = dict(request.query_params)
    validation.reject_unknown(query, ("account_type", "bank_code"))
    wanted = query.get("account_type")
    if wanted is not None and wanted not in ACCOUNT_TYPES:
        raise RailHttpError("The selected account type is invalid.", field="account_type")
    shown = (wanted is None or wanted == ACCOUNT_TYPE) and "bank_code" not in query  # a Lite account has no bank
    return JSONResponse(collection([banking_balance(rail)] if shown else []))
