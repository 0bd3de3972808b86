"""The sandbox's own control surface under /__sandbox (not part of Razorpay's API).

Health needs no auth (it is how a launcher knows the port is served); everything else takes the
same basic auth as /v1, so a sandbox bound beyond localhost cannot be reconfigured by a stranger.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandbox import banking, payout_states, validation
from sandbox.errors import RailHttpError, not_found
from sandbox.faults import FaultConfigError, parse_fault
from sandbox.payments import payment_view
from sandbox.rail import Rail
from sandbox.seed import SeedError, add_fund_account, add_payment, set_balance, set_banking_balance

logger = logging.getLogger(__name__)


async def health(rail: Rail, request: Request) -> Response:
    return JSONResponse(
        {
            "status": "ok",
            "pid": os.getpid(),
            "journal": str(rail.journal.path),
            # Idempotency keys whose first request is still being processed (a second one gets 409).
            "in_progress": sorted(key for _, key in rail.in_progress),
            "pending_applies": len(rail.tasks),
            # Requests (money or reads) waiting out a slow fault's delay now.
            "slow_waiting": rail.slow_waiting,
        }
    )


async def journal(rail: Rail, request: Request) -> Response:
    return JSONResponse(rail.journal.export())


async def get_faults(rail: Rail, request: Request) -> Response:
    return JSONResponse(rail.faults.describe())


async def set_faults(rail: Rail, request: Request) -> Response:
    """Body: a list of profiles, or {"faults": [...], "seed": N}; an empty list clears every fault."""
    raw = await request.body()
    body: Any = await validation.json_object(request) if raw.strip().startswith(b"{") else _json_list(raw)
    seed = None
    if isinstance(body, dict):
        validation.reject_unknown(body, ("faults", "seed"))
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise RailHttpError("seed must be an integer", field="seed")
        body = body.get("faults", [])
    if not isinstance(body, list):
        raise RailHttpError("faults must be a list of profiles", field="faults")
    try:
        faults = [parse_fault(spec) for spec in body]
    except FaultConfigError as exc:
        raise RailHttpError(str(exc), field="faults") from None
    rail.faults.configure(faults, seed)
    rail.journal.log_event("faults_configured", rail.faults.describe())
    return JSONResponse(rail.faults.describe())


async def create_payment(rail: Rail, request: Request) -> Response:
    """Add (or replace) a captured payment, e.g. a fresh one per chaos trial."""
    body = await validation.json_object(request)
    try:
        with rail.journal.transaction() as conn:
            payment = add_payment(rail.journal, conn, body)
    except SeedError as exc:
        raise RailHttpError(str(exc)) from None
    found = rail.journal.payment(payment["id"])
    return JSONResponse(payment_view(found or payment))


async def put_balance(rail: Rail, request: Request) -> Response:
    body = await validation.json_object(request)
    try:
        with rail.journal.transaction() as conn:
            set_balance(rail.journal, conn, body)
    except SeedError as exc:
        raise RailHttpError(str(exc)) from None
    return JSONResponse({"entity": "balance", "balance": rail.journal.balance(), "currency": "INR"})


async def create_fund_account(rail: Rail, request: Request) -> Response:
    """Add (or replace) a RazorpayX fund account and its contact; `active: false` makes one payouts refuse."""
    body = await validation.json_object(request)
    try:
        with rail.journal.transaction() as conn:
            fund_account = add_fund_account(rail.journal, conn, body)
    except SeedError as exc:
        raise RailHttpError(str(exc)) from None
    return JSONResponse(fund_account)


async def put_banking_balance(rail: Rail, request: Request) -> Response:
    """Set the RazorpayX business account's balance; queued payouts it now pays for start, oldest first."""
    body = await validation.json_object(request)
    try:
        with rail.journal.transaction() as conn:
            set_banking_balance(rail.journal, conn, body, rail.account_number)
            released = rail.lifecycle.release_queued(conn)
    except SeedError as exc:
        raise RailHttpError(str(exc)) from None
    rail.lifecycle.announce(released)
    return JSONResponse(banking.banking_balance(rail))


async def move_payout(rail: Rail, request: Request) -> Response:
    """Move a payout on by hand, as RazorpayX test mode's dashboard does: processing -> processed | failed |
    reversed, processed -> reversed. Its remaining schedule (with --lifecycle-ms) is dropped."""
    body = await validation.json_object(request)
    validation.reject_unknown(body, ("status",))
    status = validation.choice(validation.required(body, "status"), "status", ("processed", "failed", "reversed"))
    found = rail.journal.entity(request.path_params["payout_id"], "payout")
    if found is None:
        raise not_found()
    try:
        payout_states.moved(found[0], status)
    except payout_states.IllegalTransition as exc:
        raise RailHttpError(str(exc), status=409, field="status") from None
    with rail.journal.transaction() as conn:
        rail.lifecycle.unplan(conn, found[0]["id"])
        changes = rail.lifecycle.move_payout(conn, found[0], status)
    rail.lifecycle.announce(changes)
    return JSONResponse(changes[0].entity)


async def hold_lifecycle(rail: Rail, request: Request) -> Response:
    """Hold (`{"held": true}`) or release the lifecycle's schedule. A release applies what fell due meanwhile before
    it answers, so a caller that waits on nothing sees it done."""
    body = await validation.json_object(request)
    validation.reject_unknown(body, ("held",))
    rail.lifecycle.held = validation.boolean(validation.required(body, "held"), "held")
    moved = 0 if rail.lifecycle.held else rail.lifecycle.advance()
    logger.info("lifecycle %s (%s changes applied)", "held" if rail.lifecycle.held else "released", moved)
    return JSONResponse({"held": rail.lifecycle.held, "moved": moved})


async def release_slow(rail: Rail, request: Request) -> Response:
    """End the delay of every request the slow fault is holding now: each carries on at once, applies and answers."""
    released = rail.release_slow()
    logger.info("released %s slow requests", released)
    return JSONResponse({"released": released})


def _json_list(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw.strip() else []
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise RailHttpError("The request body is not valid JSON") from None
