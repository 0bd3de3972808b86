"""RazorpayX payouts (SPEC §18): POST /v1/payouts, its fetch, list and cancel.

A payout is a money call: it runs under the money-scoped faults and is journaled, with its request and its
`X-Payout-Idempotency` key, in the transaction that debits the business account. Whether it starts `processing`
or waits `queued` is the account's balance at the moment it is applied (a slow apply decides later), and what
happens to it next is sandbox/payout_states.py's table, moved by sandbox/lifecycle.py.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandbox import banking, idempotency, payout_states, validation
from sandbox.errors import RailHttpError, not_found
from sandbox.idempotency import PAYOUTS, body_hash
from sandbox.journal import new_id, now_ms
from sandbox.lifecycle import Change
from sandbox.rail import Applied, Rail, collection, notes_out, recorded_headers

logger = logging.getLogger(__name__)

PAYOUT_FIELDS = (
    "account_number", "fund_account_id", "amount", "currency", "mode", "purpose", "queue_if_low_balance",
    "reference_id", "narration", "notes",
)  # fmt: skip
MIN_AMOUNT = 100
MODES = {"bank_account": ("IMPS", "NEFT", "RTGS"), "vpa": ("UPI",)}
ALL_MODES = ("IMPS", "NEFT", "RTGS", "UPI")
STATUSES = ("queued", "pending", "rejected", "scheduled", "processing", "processed", "cancelled", "reversed", "failed")
# Razorpay's purposes are refund, cashback, payout, salary, utility bill, vendor bill and any the business adds on
# its dashboard; the sandbox takes any such name.
PURPOSE = re.compile(r"^[A-Za-z0-9 _-]{1,30}$")
LIST_FILTERS = ("account_number", "fund_account_id", "contact_id", "reference_id", "mode", "status")
NOT_ENOUGH_BALANCE = "Your account does not have enough balance to carry out the payout operation."
INACTIVE = "Payouts cannot be created on an inactive fund account"
INACTIVE_CONTACT = "Payouts cannot be created on an inactive contact fund account"


async def create_payout(rail: Rail, request: Request) -> Response:
    key = validation.payout_idempotency_key(request.headers.get(PAYOUTS.header))
    body = await validation.json_object(request)
    digest = body_hash(body)
    replayed = idempotency.replay(rail, PAYOUTS, key, digest)
    if replayed is not None:
        return replayed
    _check_payout_body(rail, body)
    _payee(rail, body)
    headers = recorded_headers(request)

    def apply(fault: str | None) -> Applied:
        return Applied("payout", _apply_payout(rail, body, headers, key, digest, fault))

    describe = {"path": request.url.path, "idempotency_key": key}
    return await idempotency.claimed(rail, PAYOUTS, key, lambda: rail.money_call(apply, describe))


def _check_payout_body(rail: Rail, body: dict[str, Any]) -> None:
    validation.reject_unknown(body, PAYOUT_FIELDS)
    banking.account_number(rail, body.get("account_number"))
    validation.required(body, "fund_account_id")
    validation.positive_int(validation.required(body, "amount"), "amount", minimum=MIN_AMOUNT)
    validation.choice(validation.required(body, "currency"), "currency", (banking.CURRENCY,))
    validation.choice(validation.required(body, "mode"), "mode", ALL_MODES)
    purpose = validation.required(body, "purpose")
    if not isinstance(purpose, str) or not PURPOSE.match(purpose):
        raise RailHttpError(
            "The purpose may have at most 30 characters of letters, digits, spaces, '_' and '-'.", field="purpose"
        )
    validation.boolean(body.get("queue_if_low_balance", False), "queue_if_low_balance")
    validation.reference_id(body.get("reference_id"))
    validation.narration(body.get("narration"))
    validation.notes(body.get("notes"))


def _payee(rail: Rail, body: dict[str, Any]) -> dict[str, Any]:
    """The fund account paid: it must exist, be active (and its contact too) and take the payout's mode."""
    fund_account_id = body["fund_account_id"]
    fund_account = rail.journal.fund_account(fund_account_id) if isinstance(fund_account_id, str) else None
    if fund_account is None:
        raise not_found()
    if not fund_account["active"]:
        raise RailHttpError(INACTIVE, field="fund_account_id")
    contact = rail.journal.contact(fund_account["contact_id"])
    if contact is not None and not contact["active"]:
        raise RailHttpError(INACTIVE_CONTACT, field="fund_account_id")
    account_type = fund_account["account_type"]
    if body["mode"] not in MODES[account_type]:
        raise RailHttpError(f"{body['mode']} payouts cannot be made to a {account_type} fund account; use "
                            f"{' or '.join(MODES[account_type])}.", field="mode")  # fmt: skip
    return fund_account


def _apply_payout(
    rail: Rail, body: dict[str, Any], headers: dict[str, str], key: str, digest: str, fault: str | None
) -> dict[str, Any]:
    _payee(rail, body)  # again: a slow apply runs later, against the fund account as it is then
    created = now_ms()
    payout = payout_entity(body, created_ms=created)
    starts = payout_states.cost(payout) <= banking.balance_of(rail)
    if not starts and not validation.boolean(body.get("queue_if_low_balance", False), "queue_if_low_balance"):
        raise RailHttpError(NOT_ENOUGH_BALANCE)
    if starts:
        payout = payout_states.moved(payout, "processing")
    with rail.journal.transaction() as conn:
        rail.journal.insert_entity(
            conn, kind="payout", entity=payout, created_ms=created, request=body, headers=headers, fault=fault,
            idempotency_key=key,
        )  # fmt: skip
        rail.journal.record_idempotency_key(conn, key, digest, payout["id"], scope=PAYOUTS.scope)
        if starts:
            rail.journal.move_banking_balance(conn, rail.account_number, -payout_states.cost(payout))
            rail.lifecycle.plan(conn, "payout", payout["id"], created_ms=created)
    logger.info("payout %s of %s to %s is %s (fault %s)", payout["id"], payout["amount"], payout["fund_account_id"],
                payout["status"], fault)  # fmt: skip
    return payout


def payout_entity(body: dict[str, Any], *, created_ms: int) -> dict[str, Any]:
    """A new payout, in Razorpay's field order; it is `queued` until the account pays for it (payout_states)."""
    return {
        "id": new_id("pout_"),
        "entity": "payout",
        "fund_account_id": body["fund_account_id"],
        "amount": body["amount"],
        "currency": body["currency"],
        "notes": notes_out(validation.notes(body.get("notes"))),
        "fees": 0,
        "tax": 0,
        "status": "queued",
        "utr": None,
        "mode": body["mode"],
        "purpose": body["purpose"],
        "reference_id": body.get("reference_id"),
        "narration": body.get("narration"),
        "batch_id": None,
        "status_details": dict(payout_states.STATUS_DETAILS["queued"]),
        "created_at": created_ms // 1000,
        "fee_type": "",
    }


async def fetch_payout(rail: Rail, request: Request) -> Response:
    return JSONResponse(rail.visible_entity(request.path_params["payout_id"], "payout"))


async def list_payouts(rail: Rail, request: Request) -> Response:
    """GET /v1/payouts?account_number=...: newest first, filtered, then paged like every list (SPEC §14)."""
    query = validation.list_query(request, extra=LIST_FILTERS)
    params = request.query_params
    banking.account_number(rail, params.get("account_number"))
    if "mode" in params:
        validation.choice(params["mode"], "mode", ALL_MODES)
    if "status" in params:
        validation.choice(params["status"], "status", STATUSES)
    payouts = [p for p in rail.visible(rail.journal.list_entities("payout")) if _matches(rail, p, params)]
    return JSONResponse(collection(query.page(rail.deep_page("payouts", query.window(payouts)))))


def _matches(rail: Rail, payout: dict[str, Any], params: QueryParams) -> bool:
    for name in ("fund_account_id", "reference_id", "mode", "status"):
        if name in params and payout.get(name) != params[name]:
            return False
    if "contact_id" in params:
        fund_account = rail.journal.fund_account(payout["fund_account_id"])
        return fund_account is not None and fund_account["contact_id"] == params["contact_id"]
    return True


async def cancel_payout(rail: Rail, request: Request) -> Response:
    """POST /v1/payouts/{id}/cancel: only a `queued` payout can be cancelled (nothing was debited for it)."""
    validation.reject_unknown(await validation.json_object(request), ())
    found = rail.journal.entity(request.path_params["payout_id"], "payout")
    if found is None:
        raise not_found()
    was = found[0]
    try:
        payout = payout_states.moved(was, "cancelled")
    except payout_states.IllegalTransition:
        raise RailHttpError(f"Only queued payouts can be cancelled; this payout is {was['status']}.") from None
    with rail.journal.transaction() as conn:
        rail.journal.set_status(conn, payout, was=was)
    rail.lifecycle.announce([Change("payout", was["status"], payout)])
    return JSONResponse(payout)
