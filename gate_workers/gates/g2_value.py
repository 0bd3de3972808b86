"""G2 value: the amount is judged against the real referent on the rail and the mandate's per-call range.

Ceiling for a refund = captured amount - amount already refunded - money of this payment's *other*
intents that may still move (AUTHORIZED, IN_FLIGHT, UNKNOWN, RECONCILING) or are HELD (a person may
release one at any moment). For a settlement = the balance read now - the merchant's other settlements
that may still move or are HELD; an APPLIED one is already out of the balance the rail reports. Intents of
every merchant on the same rail account count (ADR 0021). The proposal's own SIK is excluded so a retry is not
counted against itself. For a payout: the payee and the RazorpayX balance (gate_workers.payout_value: ADR 0028, and
an unlisted payee held for a person, ADR 0034). A call bound to a task must also stay
inside it: its subjects, the payment's order and customer, and its ceiling on the sum (gate_workers.task_binding).
"""

from __future__ import annotations

from gate_workers.context import GateContext, ResolvedAction
from gate_workers.payout_value import payee_result, payout_balance_refusal, with_payee
from gate_workers.task_binding import task_value
from interlock.messages import Verdict
from interlock.sik import SETTLEMENT_SUBJECT
from interlock.verdicts import GateResult, allow, block, hold
from ledger.queries import money_committed_for_subject

NAME = "G2"
CAPTURED_STATUSES = frozenset({"captured", "refunded"})


def check(action: ResolvedAction, ctx: GateContext) -> GateResult:
    if action.resolution_error is not None:
        return block(action.resolution_error, **action.resolution_detail)
    assert action.amount_minor is not None and action.currency is not None and action.sik is not None
    amount, currency = action.amount_minor, action.currency
    # One rail account, one payment, one balance: every merchant on the account counts (ADR 0021).
    merchants = ctx.account_merchants or (action.merchant_id,)
    if action.payment is not None:
        payment = action.payment
        if not payment.captured or payment.status not in CAPTURED_STATUSES:
            return block("G2_NOT_CAPTURED", payment_id=payment.id, status=payment.status)
        in_motion = money_committed_for_subject(ctx.ledger, merchants, payment.id, exclude_sik=action.sik)
        ceiling = payment.amount - payment.amount_refunded - in_motion
        if amount > ceiling:
            return block("G2_EXCEEDS_REFUNDABLE", amount_minor=amount, refundable_minor=max(ceiling, 0),
                         captured_minor=payment.amount, refunded_minor=payment.amount_refunded,
                         in_motion_minor=in_motion)  # fmt: skip
    elif action.balance is not None:
        balance = action.balance
        in_motion = money_committed_for_subject(ctx.ledger, merchants, SETTLEMENT_SUBJECT,
                                                exclude_sik=action.sik, currency=balance.currency)  # fmt: skip
        if amount > balance.balance - in_motion:
            return block("G2_EXCEEDS_BALANCE", amount_minor=amount, balance_minor=balance.balance,
                         in_motion_minor=in_motion, available_minor=max(balance.balance - in_motion, 0))  # fmt: skip
    elif action.fund_account is not None:
        payee = payee_result(action, ctx)
        refused = payee if payee.verdict is Verdict.BLOCK else payout_balance_refusal(action, ctx, merchants)
        if refused is not None:
            return refused
        return with_payee(payee, task_value(action, ctx) or _check_mandate_range(action.tool, amount, currency, ctx),
                          action.fund_account)  # fmt: skip
    return task_value(action, ctx) or _check_mandate_range(action.tool, amount, currency, ctx)


def _check_mandate_range(tool: str, amount: int, currency: str, ctx: GateContext) -> GateResult:
    mandate = ctx.mandate
    grant = mandate.grant(tool) if mandate is not None else None
    if mandate is None or grant is None or grant.value is None:
        return block("G2_NO_VALUE_GRANT", tool=tool)
    value = grant.value
    if currency not in value.currencies:
        return block("G2_CURRENCY_MISMATCH", currency=currency, allowed=list(value.currencies))
    if amount > value.max_amount_minor:
        return block("G2_ABOVE_MAX", amount_minor=amount, max_amount_minor=value.max_amount_minor)
    if amount < value.min_amount_minor:
        return block("G2_BELOW_MIN", amount_minor=amount, min_amount_minor=value.min_amount_minor)
    threshold = mandate.approval.hold_above_minor
    if threshold is not None and amount > threshold:
        return hold("G2_ABOVE_HOLD_THRESHOLD", amount_minor=amount, hold_above_minor=threshold,
                    approvers=list(mandate.approval.approvers))  # fmt: skip
    return allow("G2_WITHIN_VALUE", amount_minor=amount, currency=currency)
