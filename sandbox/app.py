"""The sandbox's ASGI app: Razorpay's /v1 routes plus the /__sandbox control surface."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sandbox import banking, control, payees, payments, payouts, refunds, settlements
from sandbox.errors import RailHttpError, unauthorized, unknown_url
from sandbox.rail import Rail

logger = logging.getLogger(__name__)

Handler = Callable[[Rail, Request], Awaitable[Response]]


def endpoint(handler: Handler, *, read: bool = False, auth: bool = True) -> Callable[[Request], Awaitable[Response]]:
    """Wrap *handler* with basic auth, read-scoped faults and Razorpay's error rendering."""

    async def handle(request: Request) -> Response:
        rail: Rail = request.app.state.rail
        if rail.lifecycle.on:
            rail.lifecycle.ensure_running()  # moves entities on from the first request (after a restart too)
        if auth and not rail.authorized(request):
            return unauthorized()
        try:
            if read:
                replaced = await rail.read_faults()
                if replaced is not None:
                    return replaced
            return await handler(rail, request)
        except RailHttpError as exc:
            return exc.response()

    return handle


async def unknown_route(request: Request) -> Response:
    return unknown_url()


def create_app(rail: Rail) -> Starlette:
    # A known path with another method falls through to unknown_route, as Razorpay answers it.
    routes = [
        Route("/v1/payments", endpoint(payments.list_payments, read=True), methods=["GET"]),
        Route("/v1/payments/{payment_id}", endpoint(payments.fetch_payment, read=True), methods=["GET"]),
        Route("/v1/payments/{payment_id}", endpoint(payments.edit_payment), methods=["PATCH"]),
        Route("/v1/payments/{payment_id}/refund", endpoint(refunds.create_refund), methods=["POST"]),
        Route("/v1/payments/{payment_id}/refunds", endpoint(refunds.list_payment_refunds, read=True), methods=["GET"]),
        Route(
            "/v1/payments/{payment_id}/refunds/{refund_id}",
            endpoint(refunds.fetch_payment_refund, read=True),
            methods=["GET"],
        ),
        Route("/v1/refunds", endpoint(refunds.list_refunds, read=True), methods=["GET"]),
        Route("/v1/refunds", endpoint(refunds.create_refund_by_body), methods=["POST"]),
        Route("/v1/refunds/{refund_id}", endpoint(refunds.fetch_refund, read=True), methods=["GET"]),
        Route("/v1/refunds/{refund_id}", endpoint(refunds.edit_refund), methods=["PATCH"]),
        Route("/v1/settlements/ondemand", endpoint(settlements.create_settlement), methods=["POST"]),
        Route("/v1/settlements/ondemand", endpoint(settlements.list_settlements, read=True), methods=["GET"]),
        Route(
            "/v1/settlements/ondemand/{settlement_id}",
            endpoint(settlements.fetch_settlement, read=True),
            methods=["GET"],
        ),
        Route("/v1/balance", endpoint(settlements.fetch_balance, read=True), methods=["GET"]),
        Route("/v1/payouts", endpoint(payouts.create_payout), methods=["POST"]),
        Route("/v1/payouts", endpoint(payouts.list_payouts, read=True), methods=["GET"]),
        Route("/v1/payouts/{payout_id}", endpoint(payouts.fetch_payout, read=True), methods=["GET"]),
        Route("/v1/payouts/{payout_id}/cancel", endpoint(payouts.cancel_payout), methods=["POST"]),
        Route("/v1/fund_accounts/{fund_account_id}", endpoint(payees.fetch_fund_account, read=True), methods=["GET"]),
        Route("/v1/contacts/{contact_id}", endpoint(payees.fetch_contact, read=True), methods=["GET"]),
        Route("/v1/banking_balances", endpoint(banking.fetch_banking_balances, read=True), methods=["GET"]),
        Route("/__sandbox/health", endpoint(control.health, auth=False), methods=["GET"]),
        Route("/__sandbox/journal", endpoint(control.journal), methods=["GET"]),
        Route("/__sandbox/faults", endpoint(control.get_faults), methods=["GET"]),
        Route("/__sandbox/faults", endpoint(control.set_faults), methods=["POST"]),
        Route("/__sandbox/payments", endpoint(control.create_payment), methods=["POST"]),
        Route("/__sandbox/balance", endpoint(control.put_balance), methods=["POST"]),
        Route("/__sandbox/fund_accounts", endpoint(control.create_fund_account), methods=["POST"]),
        Route("/__sandbox/banking_balance", endpoint(control.put_banking_balance), methods=["POST"]),
        Route("/__sandbox/payouts/{payout_id}/status", endpoint(control.move_payout), methods=["POST"]),
        Route("/__sandbox/lifecycle", endpoint(control.hold_lifecycle), methods=["POST"]),
        Route("/__sandbox/slow/release", endpoint(control.release_slow), methods=["POST"]),
        Route("/{path:path}", unknown_route, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
    ]
    app = Starlette(routes=routes)
    app.state.rail = rail
    return app
