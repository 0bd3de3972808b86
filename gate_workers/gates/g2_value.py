"""G2 value: the amount is judged against the real referent on the rail and the mandate's per-call range.

Ceiling for a refund = captured amount - amount already refunded - money of this payment's *other*
intents that may still move (AUTHORIZED, IN_FLIGHT, UNKNOWN, RECONCILING) or are HELD (a person may
release one at any moment). For a settlement = the balance read now - the merchant's other settlements
that may still move or are HELD; an APPLIED one is already out of the balance the rail reports. Intents of
every merchant on the same rail account count (ADR 0021). The proposal's own SIK is excluded so a retry is not
counted against itself. For a payout: the payee as the rail returned it must be on the grant's payees and active,
and the amount within the RazorpayX balance less the payouts the rail holds undebited (queued, pending, scheduled)
and less this account's payout intents that may still move (ADR 0028). A call bound to a task must also stay
inside it: its subjects, the payment's order and customer, and its ceiling on the sum (gate_workers.task_binding).
"""

from __future__ import annotations

from gate_workers.context import GateContext, ResolvedAction
from gate_workers.task_binding import task_value
from interlock.sik import SETTLEMENT_SUBJECT
from interlock.verdicts import GateResult, allow, block, hold
from ledger.queries import money_committed_for_subject, money_committed_for_tool

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
        refused = _payee_refusal(action, ctx) or _payout_balance_refusal(action, ctx, merchants)
        if refused is not None:
            return refused
    return task_value(action, ctx) or _check_mandate_range(action.tool, amount, currency, ctx)


def _payee_refusal(action: ResolvedAction, ctx: GateContext) -> GateResult | None:
    """The fund account, as the rail returned it, must be one the grant names — by its id or its contact's — and
    active (ADR 0028). The agent's id was only the lookup key."""
    fund_account = action.fund_account
    assert fund_account is not None
    grant = ctx.mandate.grant(action.tool) if ctx.mandate is not None else None
    payees = grant.payees if grant is not None else None
    if payees is None or not payees.allow(fund_account.id, fund_account.contact_id):
        return block("G2_PAYEE_NOT_ALLOWED", fund_account_id=fund_account.id, contact_id=fund_account.contact_id)
    if not fund_account.active:
        return block("G2_PAYEE_INACTIVE", fund_account_id=fund_account.id, contact_id=fund_account.contact_id)
    return None


def _payout_balance_refusal(action: ResolvedAction, ctx: GateContext, merchants: tuple[str, ...]) -> GateResult | None:
    """The RazorpayX balance less what the rail holds undebited and less Interlock's own payouts that may still
    move; a mandate that lets the rail queue a payout the balance cannot cover (queue_if_low_balance) skips it."""
    banking = action.banking_balance
    assert banking is not None and action.amount_minor is not None and action.currency is not None
    if action.params.get("queue_if_low_balance") is True:
        return None
    fee = ctx.fee_rate.project_payout()  # the rail debits each payout's fee beside its amount
    in_motion = money_committed_for_tool(ctx.ledger, merchants, action.tool, exclude_sik=action.sik or "",
                                         currency=action.currency, per_call_minor=fee)  # fmt: skip
    available = banking.amount - action.payouts_waiting_minor - in_motion
    if action.amount_minor + fee > available:
        return block("G2_EXCEEDS_PAYOUT_BALANCE", amount_minor=action.amount_minor, fee_minor=fee,
                     balance_minor=banking.amount, waiting_on_rail_minor=action.payouts_waiting_minor,
                     in_motion_minor=in_motion, available_minor=max(available, 0))  # fmt: skip
    return None


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
