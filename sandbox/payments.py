"""Captured payments: the entity Razorpay serves, GET /v1/payments[/{id}] and PATCH of notes.

A payment's order, customer, method and contact details are derived from its id unless the seed
names them, so the same seed gives the same entity on every start; task binding (a later check of
"this refund is for that order / customer") can rely on them. The sandbox only holds captured
payments: there is no create or capture, and `error_*` fields are always null.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandbox import validation
from sandbox.errors import not_found
from sandbox.journal import stable_id
from sandbox.rail import Rail, collection, notes_out

logger = logging.getLogger(__name__)

METHODS = ("card", "upi", "netbanking", "wallet")
DETAIL_FIELDS = ("order_id", "customer_id", "method", "email", "contact", "description")


def default_details(payment_id: str) -> dict[str, Any]:
    """The details a payment has when the seed does not name them: stable per payment id."""
    digest = hashlib.sha256(payment_id.encode()).hexdigest()
    return {
        "order_id": stable_id("order_", "order", payment_id),
        "customer_id": stable_id("cust_", "customer", payment_id),
        "method": "card",
        "email": f"customer.{digest[:8]}@example.com",
        "contact": "+919" + str(int(digest[8:24], 16))[-9:].rjust(9, "0"),
        "description": None,
    }


def payment_fees(amount: int) -> tuple[int, int]:
    """(fee including GST, GST) Razorpay charged on a captured payment: 2% + 18% GST, each rounded up."""
    fee = -(-amount * 2 // 100)
    tax = -(-fee * 18 // 100)
    return fee + tax, tax


def payment_view(payment: Mapping[str, Any]) -> dict[str, Any]:
    """The payment entity, with Razorpay's fields in Razorpay's order."""
    payment_id, amount, refunded = payment["id"], payment["amount"], payment["amount_refunded"]
    details = {**default_details(payment_id), **(payment.get("details") or {})}
    method = details["method"]
    fully = refunded >= amount
    fee, tax = payment_fees(amount)
    digest = hashlib.sha256(("acquirer\x1f" + payment_id).encode()).hexdigest()
    view: dict[str, Any] = {
        "id": payment_id,
        "entity": "payment",
        "amount": amount,
        "currency": payment["currency"],
        "status": "refunded" if fully else "captured",
        "order_id": details["order_id"],
        "invoice_id": None,
        "international": False,
        "method": method,
        "amount_refunded": refunded,
        "refund_status": None if refunded == 0 else ("full" if fully else "partial"),
        "captured": True,
        "description": details["description"],
        "card_id": stable_id("card_", "card", payment_id) if method == "card" else None,
        "bank": "HDFC" if method == "netbanking" else None,
        "wallet": "payzapp" if method == "wallet" else None,
        "vpa": _vpa(details) if method == "upi" else None,
        "email": details["email"],
        "contact": details["contact"],
        "customer_id": details["customer_id"],
        "notes": notes_out(payment["notes"]),
        "fee": fee,
        "tax": tax,
        "error_code": None,
        "error_description": None,
        "error_source": None,
        "error_step": None,
        "error_reason": None,
        "acquirer_data": _acquirer_data(method, digest),
        "created_at": payment["created_at"],
    }
    if method == "card":
        view["card"] = {
            "id": view["card_id"], "entity": "card", "name": "", "last4": str(int(digest[:8], 16))[-4:].rjust(4, "0"),
            "network": "Visa", "type": "credit", "issuer": None, "international": False, "emi": False,
            "sub_type": "consumer", "token_iin": None,
        }  # fmt: skip
    elif method == "upi":
        view["upi"] = {"payer_account_type": "bank_account", "vpa": view["vpa"]}
    return view


def _vpa(details: Mapping[str, Any]) -> str:
    return str(details["email"]).split("@", 1)[0].replace(".", "") + "@okhdfcbank"


def _acquirer_data(method: str, digest: str) -> dict[str, Any]:
    number = str(int(digest[:24], 16))
    if method == "card":
        return {"auth_code": number[-6:]}
    if method == "upi":
        return {"rrn": number[-12:], "upi_transaction_id": digest[:32].upper()}
    if method == "netbanking":
        return {"bank_transaction_id": number[-10:]}
    return {"transaction_id": None}


async def fetch_payment(rail: Rail, request: Request) -> Response:
    payment = rail.journal.payment(request.path_params["payment_id"])
    if payment is None:
        raise not_found()
    return JSONResponse(payment_view(payment))


async def list_payments(rail: Rail, request: Request) -> Response:
    query = validation.list_query(request)
    items = query.window(payment_view(p) for p in rail.journal.list_payments())
    return JSONResponse(collection(query.page(items)))


async def edit_payment(rail: Rail, request: Request) -> Response:
    """PATCH /v1/payments/{id}: replace the payment's notes, the only field Razorpay lets you edit."""
    payment_id = request.path_params["payment_id"]
    if rail.journal.payment(payment_id) is None:
        raise not_found()
    notes = validation.required_notes(await validation.json_object(request))
    with rail.journal.transaction() as conn:
        rail.journal.set_payment_notes(conn, payment_id, notes)
    logger.info("payment %s notes replaced", payment_id)
    updated = rail.journal.payment(payment_id)
    if updated is None:  # never: the row was just updated in this loop turn
        raise not_found()
    return JSONResponse(payment_view(updated))
