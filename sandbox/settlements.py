"""Instant (on-demand) settlements and the merchant balance they draw down.

Fees: fee = ceil(0.3% of the amount), tax = ceil(18% of fee), `fees` = fee + tax (the total charge
including tax, as Razorpay reports it; SPEC §14). Rounding up means the sandbox never charges less
than a projection at the published rate would expect, so a fee budget checked against it is safe.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandbox import validation
from sandbox.errors import RailHttpError
from sandbox.journal import new_id, now_ms, stable_id, stable_utr
from sandbox.rail import Applied, Rail, collection, notes_out, recorded_headers

logger = logging.getLogger(__name__)

SETTLEMENT_FIELDS = ("amount", "settle_full_balance", "description", "notes")
MIN_SETTLEMENT = 200
EXPAND = "expand[]"
CURRENCY = "INR"


def settlement_fees(amount: int) -> tuple[int, int]:
    """(fees including tax, tax) for an instant settlement of *amount* paise, all integers rounded up."""
    fee = -(-amount * 3 // 1000)
    tax = -(-fee * 18 // 100)
    return fee + tax, tax


async def create_settlement(rail: Rail, request: Request) -> Response:
    body = await validation.json_object(request)
    validation.reject_unknown(body, SETTLEMENT_FIELDS)
    full = validation.boolean(body.get("settle_full_balance", False), "settle_full_balance")
    if not full:
        if "amount" not in body:
            raise RailHttpError("The amount field is required.", field="amount")
        validation.positive_int(body["amount"], "amount", minimum=MIN_SETTLEMENT)
    validation.description(body.get("description"))
    validation.notes(body.get("notes"))
    headers = recorded_headers(request)

    def apply(fault: str | None) -> Applied:
        return Applied("settlement", _apply_settlement(rail, body, headers, fault))

    return await rail.money_call(apply, {"path": request.url.path})


def _apply_settlement(rail: Rail, body: dict[str, Any], headers: dict[str, str], fault: str | None) -> dict[str, Any]:
    balance = rail.journal.balance(CURRENCY)
    full = validation.boolean(body.get("settle_full_balance", False), "settle_full_balance")
    # settle_full_balance: true ignores any amount sent (SPEC §14).
    amount = balance if full else int(body["amount"])
    if amount < MIN_SETTLEMENT:
        raise RailHttpError(f"The amount must be at least {MIN_SETTLEMENT}.", field="amount")
    if amount > balance:
        raise RailHttpError("The settlement amount is greater than the available balance", field="amount")
    fees, tax = settlement_fees(amount)
    created = now_ms()
    status = rail.lifecycle.first_status("settlement")
    settled = amount - fees if status == "processed" else 0  # with a lifecycle, settled when it is processed
    settlement = {
        "id": new_id("setlod_"),
        "entity": "settlement.ondemand",
        "amount_requested": amount,
        "amount_settled": settled,
        "amount_pending": amount - fees - settled,
        "amount_reversed": 0,
        "fees": fees,
        "tax": tax,
        "currency": CURRENCY,
        "settle_full_balance": full,
        "status": status,
        "description": validation.description(body.get("description")),
        "notes": notes_out(validation.notes(body.get("notes"))),
        "created_at": created // 1000,
    }
    with rail.journal.transaction() as conn:
        rail.journal.insert_entity(
            conn, kind="settlement", entity=settlement, created_ms=created, request=body, headers=headers, fault=fault
        )
        rail.journal.debit_balance(conn, CURRENCY, amount)
        rail.lifecycle.plan(conn, "settlement", settlement["id"], created_ms=created)
    logger.info("settlement %s of %s (fees %s, fault %s)", settlement["id"], amount, fees, fault)
    return settlement


async def list_settlements(rail: Rail, request: Request) -> Response:
    query = validation.list_query(request, extra=(EXPAND,))
    payouts = _expand(request)
    items = query.page(query.window(rail.visible(rail.journal.list_entities("settlement"))))
    return JSONResponse(collection([with_payouts(e) if payouts else e for e in items]))


async def fetch_settlement(rail: Rail, request: Request) -> Response:
    validation.reject_unknown(dict(request.query_params), (EXPAND,))
    payouts = _expand(request)
    settlement = rail.visible_entity(request.path_params["settlement_id"], "settlement")
    return JSONResponse(with_payouts(settlement) if payouts else settlement)


def _expand(request: Request) -> bool:
    """True for `expand[]=ondemand_payouts`, the one expansion Razorpay offers on instant settlements."""
    wanted = request.query_params.getlist(EXPAND)
    if any(value != "ondemand_payouts" for value in wanted):
        raise RailHttpError("The selected expand is invalid.", field="expand")
    return bool(wanted)


def with_payouts(settlement: dict[str, Any]) -> dict[str, Any]:
    """The settlement with its one payout, as `expand[]=ondemand_payouts` shows it.

    The sandbox settles in one payout, in the settlement's own status (processed at once without a lifecycle);
    its id and UTR are derived from the settlement's id, so every read shows the same payout.
    """
    created = settlement["created_at"]
    status = settlement["status"]
    payout = {
        "id": stable_id("setlodp_", "payout", settlement["id"]),
        "entity": "settlement.ondemand_payout",
        "initiated_at": created,
        "processed_at": created if status in ("processed", "partially_processed", "reversed") else None,
        "reversed_at": created if status == "reversed" else None,
        "amount": settlement["amount_requested"],
        "amount_settled": settlement["amount_settled"],
        "fees": settlement["fees"],
        "tax": settlement["tax"],
        "utr": stable_utr(settlement["id"]),
        "status": status,
        "created_at": created,
    }
    return {**settlement, "ondemand_payouts": collection([payout])}


async def fetch_balance(rail: Rail, request: Request) -> Response:
    # Sandbox-only: Razorpay has no such endpoint; tests and the demo use it to see the drawdown.
    return JSONResponse({"entity": "balance", "balance": rail.journal.balance(CURRENCY), "currency": CURRENCY})
