"""Resolve a Proposal's referent on the rail (read-only) before any gate judges it.

The agent's payment_id is only a lookup key: the subject that enters the SIK is the id the rail
returned. A refund without an amount becomes "everything still refundable", a full-balance
settlement becomes the current balance — concrete numbers, judged like any other.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import replace
from typing import Protocol

from gate_workers.context import ResolvedAction
from interlock.arguments import MoneyCall, parse_money_call
from interlock.errors import InvalidInput
from interlock.mandate import Mandate
from interlock.messages import Proposal
from interlock.sik import SETTLEMENT_SUBJECT, compute_sik, window_bucket
from ledger.queries import earlier_full_request, is_unsettled, money_in_motion_for_subject
from rails.models import Balance, Payment
from rails.razorpay import RailError

logger = logging.getLogger(__name__)


class RailReader(Protocol):
    def fetch_payment(self, payment_id: str) -> Payment: ...

    def fetch_balance(self) -> Balance: ...


def resolve(
    proposal: Proposal, rail: RailReader, ledger: sqlite3.Connection, mandate: Mandate | None, now_ms: int
) -> ResolvedAction:
    base = ResolvedAction(
        request_id=proposal.request_id, agent_id=proposal.agent_id, merchant_id=proposal.merchant_id,
        tool=proposal.tool, arguments=proposal.arguments, operation_ref=proposal.operation_ref,
    )  # fmt: skip
    try:
        call = parse_money_call(proposal.tool, proposal.arguments)
    except InvalidInput as exc:
        return _unresolved(base, "G0_MALFORMED_CALL", field=exc.field, error=str(exc))
    if call.tool == "create_refund":
        return _resolve_refund(base, call, rail, ledger)
    return _resolve_settlement(base, call, rail, ledger, mandate, now_ms)


def _unresolved(base: ResolvedAction, reason: str, **detail: object) -> ResolvedAction:
    return _replace(base, resolution_error=reason, resolution_detail=dict(detail))


def _replace(base: ResolvedAction, **changes: object) -> ResolvedAction:
    return replace(base, **changes)  # type: ignore[arg-type]


def _rail_failure(base: ResolvedAction, exc: RailError, what: str) -> ResolvedAction:
    if exc.not_found:
        return _unresolved(base, "G2_PAYMENT_NOT_FOUND", lookup=what)
    logger.warning("rail read failed while resolving %s: %s", what, exc)
    return _unresolved(base, "G2_RAIL_UNAVAILABLE", lookup=what, error=str(exc), kind=str(exc.kind))


def _resolve_refund(
    base: ResolvedAction, call: MoneyCall, rail: RailReader, ledger: sqlite3.Connection
) -> ResolvedAction:
    assert call.payment_id is not None
    try:
        payment = rail.fetch_payment(call.payment_id)
    except RailError as exc:
        return _rail_failure(base, exc, call.payment_id)
    amount = call.amount
    params: dict[str, object] = {"notes": call.notes}
    if amount is None:
        params["full"] = True
        earlier = earlier_full_request(ledger, base.merchant_id, base.tool, payment.id, call.distinct_reason)
        if earlier is not None:
            amount = earlier[1]  # the repeat of a full refund is that refund, whatever is refundable now
        else:
            # Full refund: what the rail still allows minus what Interlock already has in motion on it.
            in_motion = money_in_motion_for_subject(ledger, base.merchant_id, payment.id, exclude_sik="")
            amount = payment.amount - payment.amount_refunded - in_motion
        if amount <= 0:
            return _replace(_unresolved(base, "G2_EXCEEDS_REFUNDABLE", refundable=max(amount, 0)),
                            payment=payment, subject=payment.id, currency=payment.currency)  # fmt: skip
    params["amount"] = amount
    if call.speed is not None:
        params["speed"] = call.speed
    sik = compute_sik(merchant_id=base.merchant_id, tool=base.tool, subject=payment.id, amount_minor=amount,
                      currency=payment.currency, window=None, distinct=call.distinct_reason)  # fmt: skip
    return _replace(base, subject=payment.id, amount_minor=amount, currency=payment.currency,
                    requested_amount=call.amount, payment=payment, sik=sik, distinct_reason=call.distinct_reason,
                    params=params)  # fmt: skip


def _resolve_settlement(
    base: ResolvedAction, call: MoneyCall, rail: RailReader, ledger: sqlite3.Connection, mandate: Mandate | None,
    now_ms: int,
) -> ResolvedAction:
    try:
        balance = rail.fetch_balance()
    except RailError as exc:
        return _rail_failure(base, exc, "balance")
    window_ms = mandate.window_ms(base.tool) if mandate is not None else None
    if window_ms is None:
        # SPEC §4: a settlement without a mandate window has no defined identity; G1 refuses such a mandate.
        return _replace(_unresolved(base, "G1_NO_IDEMPOTENCY_WINDOW"), balance=balance)
    window = window_bucket(now_ms, window_ms)
    assert window is not None
    params: dict[str, object] = {"notes": call.notes}
    amount = call.amount
    if amount is None:
        params["full"] = True
        earlier = earlier_full_request(ledger, base.merchant_id, base.tool, SETTLEMENT_SUBJECT, call.distinct_reason,
                                       since_ms=(window - 1) * window_ms)  # fmt: skip
        amount = earlier[1] if earlier is not None else balance.balance
    if amount <= 0:
        return _replace(_unresolved(base, "G2_EXCEEDS_BALANCE", balance=balance.balance), balance=balance)
    params["amount"] = amount
    if call.description is not None:
        params["description"] = call.description

    def key(bucket: int) -> str:
        return compute_sik(merchant_id=base.merchant_id, tool=base.tool, subject=SETTLEMENT_SUBJECT,
                           amount_minor=amount, currency=balance.currency, extra=None, window=bucket,
                           distinct=call.distinct_reason)  # fmt: skip

    sik = key(window)
    if is_unsettled(ledger, base.merchant_id, key(window - 1)):
        # A retry that crossed into the next window while the first call is still unsettled is that call,
        # not a new settlement: answer it with the earlier intent.
        window, sik = window - 1, key(window - 1)
    return _replace(base, subject=SETTLEMENT_SUBJECT, amount_minor=amount, currency=balance.currency,
                    requested_amount=call.amount, balance=balance, sik=sik, window=window,
                    distinct_reason=call.distinct_reason, params=params)  # fmt: skip
