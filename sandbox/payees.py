"""RazorpayX payees: contacts and their fund accounts, the entities payouts are made to (SPEC §18).

The sandbox serves `GET /v1/contacts/{id}` and `GET /v1/fund_accounts/{id}`; payees are created through the
control surface (`POST /__sandbox/fund_accounts`) or the seed file, never through /v1 (Razorpay's create, update
and activate APIs are not served). Fields a payee is created without are derived from its id, so the same seed
serves the same entities on every start.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandbox.errors import not_found
from sandbox.rail import Rail, notes_out

logger = logging.getLogger(__name__)

ACCOUNT_TYPES = ("bank_account", "vpa")
CONTACT_TYPES = ("employee", "vendor", "customer", "self")
# The bank name Razorpay shows for an IFSC's first four letters (the few the sandbox knows; others show the code).
BANKS = {
    "HDFC": "HDFC Bank", "ICIC": "ICICI Bank", "SBIN": "State Bank of India", "UTIB": "Axis Bank",
    "KKBK": "Kotak Mahindra Bank", "YESB": "Yes Bank", "RATN": "RBL Bank", "PUNB": "Punjab National Bank",
}  # fmt: skip
DEFAULT_IFSC = "HDFC0000053"
VPA_HANDLE = "okhdfcbank"


def default_name(entity_id: str) -> str:
    """A payee's name when none is given: stable per id."""
    return "Sandbox Payee " + hashlib.sha256(entity_id.encode()).hexdigest()[:6].upper()


def default_account_number(fund_account_id: str) -> str:
    return str(int(hashlib.sha256(("account\x1f" + fund_account_id).encode()).hexdigest(), 16))[-14:]


def default_vpa(fund_account_id: str) -> str:
    return "payee." + hashlib.sha256(("vpa\x1f" + fund_account_id).encode()).hexdigest()[:8] + "@" + VPA_HANDLE


def contact_entity(
    *,
    contact_id: str,
    name: str,
    email: str | None,
    contact: str | None,
    contact_type: str | None,
    reference_id: str | None,
    notes: dict[str, Any],
    active: bool,
    created_ms: int,
) -> dict[str, Any]:
    return {
        "id": contact_id,
        "entity": "contact",
        "name": name,
        "contact": contact,
        "email": email,
        "type": contact_type,
        "reference_id": reference_id,
        "batch_id": None,
        "active": active,
        "notes": notes_out(notes),
        "created_at": created_ms // 1000,
    }


def bank_account(name: str, ifsc: str, account_number: str) -> dict[str, Any]:
    return {"ifsc": ifsc, "bank_name": BANKS.get(ifsc[:4], ifsc[:4]), "name": name, "notes": [],
            "account_number": account_number}  # fmt: skip


def vpa(address: str) -> dict[str, Any]:
    username, _, handle = address.partition("@")
    return {"username": username, "handle": handle, "address": address}


def fund_account_entity(
    *, fund_account_id: str, contact_id: str, account_type: str, details: dict[str, Any], active: bool, created_ms: int
) -> dict[str, Any]:
    """The fund account as Razorpay shows it: `bank_account` or `vpa` holds its details, as its type says."""
    return {
        "id": fund_account_id,
        "entity": "fund_account",
        "contact_id": contact_id,
        "account_type": account_type,
        account_type: details,
        "active": active,
        "batch_id": None,
        "created_at": created_ms // 1000,
    }


async def fetch_fund_account(rail: Rail, request: Request) -> Response:
    fund_account = rail.journal.fund_account(request.path_params["fund_account_id"])
    if fund_account is None:
        raise not_found()
    return JSONResponse(fund_account)


async def fetch_contact(rail: Rail, request: Request) -> Response:
    contact = rail.journal.contact(request.path_params["contact_id"])
    if contact is None:
        raise not_found()
    return JSONResponse(contact)
