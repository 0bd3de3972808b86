"""Refunds: POST /v1/payments/{id}/refund (and POST /v1/refunds), refund lists, fetches and notes edits."""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandbox import idempotency, validation
from sandbox.errors import RailHttpError, not_found
from sandbox.idempotency import REFUNDS, body_hash
from sandbox.journal import new_id, now_ms
from sandbox.rail import Applied, Rail, collection, notes_out, recorded_headers

logger = logging.getLogger(__name__)

REFUND_FIELDS = ("amount", "speed", "notes", "receipt")


async def create_refund(rail: Rail, request: Request) -> Response:
    """POST /v1/payments/{id}/refund — Razorpay's documented way to refund."""
    payment_id = request.path_params["payment_id"]
    if rail.journal.payment(payment_id) is None:
        raise not_found()
    body = await validation.json_object(request)
    return await _refund(rail, request, payment_id, body, recorded=body)


async def create_refund_by_body(rail: Rail, request: Request) -> Response:
    """POST /v1/refunds with `payment_id` in the body.

    Not in Razorpay's API reference (which documents only POST /v1/payments/{id}/refund), but the
    official SDKs call it (Python `refund.create`, Go `Refund.Create`) and Razorpay answers it: without
    a payment_id, 400 "The payment id field is required."; with one, the same refund as the
    documented route — same checks, same idempotency key space, same faults.
    """
    body = await validation.json_object(request)
    payment_id = body.get("payment_id")
    if payment_id is None or payment_id == "":
        raise RailHttpError("The payment id field is required.", field="payment_id")
    if not isinstance(payment_id, str) or rail.journal.payment(payment_id) is None:
        raise not_found()
    rest = {k: v for k, v in body.items() if k != "payment_id"}
    return await _refund(rail, request, payment_id, rest, recorded=body)


async def _refund(
    rail: Rail, request: Request, payment_id: str, body: dict[str, Any], *, recorded: dict[str, Any]
) -> Response:
    key = validation.idempotency_key(request.headers.get(REFUNDS.header))
    digest = body_hash({"payment_id": payment_id, "body": body})
    if key is not None:
        replayed = idempotency.replay(rail, REFUNDS, key, digest)
        if replayed is not None:
            return replayed
    _check_refund_body(body)
    headers = recorded_headers(request)

    def apply(fault: str | None) -> Applied:
        # Re-validated here, not earlier: a slow apply runs later, against the payment as it is then.
        refund = _apply_refund(rail, payment_id, body, recorded, headers, key, digest, fault)
        return Applied("refund", refund)

    describe = {"path": request.url.path, "idempotency_key": key}
    return await idempotency.claimed(rail, REFUNDS, key, lambda: rail.money_call(apply, describe))


def _check_refund_body(body: dict[str, Any]) -> None:
    validation.reject_unknown(body, REFUND_FIELDS)
    if "amount" in body:
        validation.positive_int(body["amount"], "amount", below_minimum="The amount must be at least INR 1.00")
    validation.speed(body.get("speed"))
    validation.notes(body.get("notes"))
    validation.receipt(body.get("receipt"))


def _apply_refund(
    rail: Rail,
    payment_id: str,
    body: dict[str, Any],
    recorded: dict[str, Any],
    headers: dict[str, str],
    key: str | None,
    body_hash: str,
    fault: str | None,
) -> dict[str, Any]:
    payment = rail.journal.payment(payment_id)
    if payment is None:
        raise not_found()
    remaining = payment["amount"] - payment["amount_refunded"]
    if remaining <= 0:
        raise RailHttpError("The payment has been fully refunded already", field="amount")
    amount = body.get("amount", remaining)
    if amount > remaining:
        raise RailHttpError("The refund amount provided is greater than amount captured", field="amount")
    receipt = validation.receipt(body.get("receipt"))
    if receipt is not None and rail.journal.receipt_used(payment_id, receipt):
        raise RailHttpError("The receipt has already been used for a refund of this payment", field="receipt")
    created = now_ms()
    refund = refund_entity(
        payment_id=payment_id,
        amount=amount,
        currency=payment["currency"],
        notes=validation.notes(body.get("notes")),
        receipt=receipt,
        speed=validation.speed(body.get("speed")),
        created_ms=created,
        status=rail.lifecycle.first_status("refund"),
    )
    with rail.journal.transaction() as conn:
        rail.journal.insert_entity(
            conn, kind="refund", entity=refund, created_ms=created, request=recorded, headers=headers,
            fault=fault, idempotency_key=key,
        )  # fmt: skip
        rail.journal.add_refunded(conn, payment_id, amount)
        if key is not None:
            rail.journal.record_idempotency_key(conn, key, body_hash, refund["id"])
        rail.lifecycle.plan(conn, "refund", refund["id"], created_ms=created)
    logger.info("refund %s of %s on %s (fault %s)", refund["id"], amount, payment_id, fault)
    return refund


def refund_entity(
    *,
    payment_id: str,
    amount: int,
    currency: str,
    notes: dict[str, Any],
    receipt: str | None,
    speed: str | None,
    created_ms: int,
    status: str = "processed",
) -> dict[str, Any]:
    refund: dict[str, Any] = {
        "id": new_id("rfnd_"),
        "entity": "refund",
        "amount": amount,
        "currency": currency,
        "payment_id": payment_id,
        "notes": notes_out(notes),
        "receipt": receipt,
        "acquirer_data": {"arn": None},
        "created_at": created_ms // 1000,
        "batch_id": None,
        "status": status,
        # Razorpay shows both speeds on every refund; a request without `speed` asked for "normal".
        "speed_processed": "instant" if speed == "optimum" else "normal",
        "speed_requested": speed or "normal",
    }
    return refund


async def list_payment_refunds(rail: Rail, request: Request) -> Response:
    payment_id = request.path_params["payment_id"]
    if rail.journal.payment(payment_id) is None:
        raise not_found()
    query = validation.list_query(request)
    items = query.window(rail.visible(rail.journal.list_entities("refund", payment_id=payment_id)))
    return JSONResponse(collection(query.page(rail.deep_page(f"payment:{payment_id}", items))))


async def list_refunds(rail: Rail, request: Request) -> Response:
    query = validation.list_query(request)
    items = query.window(rail.visible(rail.journal.list_entities("refund")))
    return JSONResponse(collection(query.page(rail.deep_page("refunds", items))))


async def fetch_refund(rail: Rail, request: Request) -> Response:
    return JSONResponse(rail.visible_entity(request.path_params["refund_id"], "refund"))


async def fetch_payment_refund(rail: Rail, request: Request) -> Response:
    """GET /v1/payments/{id}/refunds/{refund_id}: a refund of another payment does not exist here."""
    payment_id = request.path_params["payment_id"]
    if rail.journal.payment(payment_id) is None:
        raise not_found()
    refund = rail.visible_entity(request.path_params["refund_id"], "refund")
    if refund["payment_id"] != payment_id:
        raise not_found()
    return JSONResponse(refund)


async def edit_refund(rail: Rail, request: Request) -> Response:
    """PATCH /v1/refunds/{id}: replace the refund's notes, the only field Razorpay lets you edit."""
    found = rail.journal.entity(request.path_params["refund_id"], "refund")
    if found is None:
        raise not_found()
    notes = validation.required_notes(await validation.json_object(request))
    was = found[0]
    refund = {**was, "notes": notes_out(notes)}
    with rail.journal.transaction() as conn:
        rail.journal.replace_entity(conn, refund, was=was)
    logger.info("refund %s notes replaced", refund["id"])
    return JSONResponse(refund)
