"""G2 for a payout (ADR 0028, ADR 0034): whom it pays, as the rail reports the fund account, and whether the
RazorpayX balance covers it. Split from gate_workers/gates/g2_value.py, which composes these with the value range.

The payee must be on the grant's payees — by its fund account id or its contact's — or added by an approver under
this mandate version (ledger.payee_amendments), and active. One on no list is held for a person when the grant
says `unlisted: hold` and the mandate names approvers; else refused. An inactive payee is refused either way.
The amount must fit the RazorpayX balance less the payouts the rail holds undebited (queued, pending, scheduled)
and less this account's payout intents that may still move.
"""

from __future__ import annotations

from gate_workers.context import GateContext, ResolvedAction
from interlock.messages import Verdict
from interlock.verdicts import GateResult, allow, block, hold
from ledger.payee_amendments import MandateVersion, allowed_fund_accounts
from ledger.queries import money_committed_for_tool
from rails.models import FundAccount

PAYEE_UNLISTED_HELD = "G2_PAYEE_UNLISTED_HELD"


def payee_result(action: ResolvedAction, ctx: GateContext) -> GateResult:
    """The fund account, as the rail returned it, must be one the grant names — by its id or its contact's, or
    added by an approver under this mandate version (ADR 0034) — and active (ADR 0028). The agent's id was only the
    lookup key. One on no list is held for a person when the grant says `unlisted: hold`, else refused."""
    fund_account = action.fund_account
    assert fund_account is not None
    mandate = ctx.mandate
    grant = mandate.grant(action.tool) if mandate is not None else None
    payees = grant.payees if grant is not None else None
    who = {"fund_account_id": fund_account.id, "contact_id": fund_account.contact_id}
    if mandate is None or payees is None:
        return block("G2_PAYEE_NOT_ALLOWED", **who)
    listed = payee_listed(action, ctx)
    holds_unlisted = payees.unlisted == "hold" and bool(mandate.approval.approvers)
    if not listed and not holds_unlisted:
        return block("G2_PAYEE_NOT_ALLOWED", **who)
    if not fund_account.active:
        return block("G2_PAYEE_INACTIVE", **who)
    if not listed:
        return hold(PAYEE_UNLISTED_HELD, **who, payee=fund_account.shown(), payee_digest=fund_account.digest,
                    approvers=list(mandate.approval.approvers))  # fmt: skip
    return allow("G2_PAYEE_LISTED", **who)


def payee_listed(action: ResolvedAction, ctx: GateContext) -> bool:
    """Whether a payout's fund account, as the rail returned it, is on its grant's payees — by its id or its
    contact's — or was added by an approver under this mandate version (ADR 0034)."""
    fund_account, mandate = action.fund_account, ctx.mandate
    grant = mandate.grant(action.tool) if mandate is not None else None
    if fund_account is None or mandate is None or grant is None or grant.payees is None:
        return False
    return grant.payees.allow(fund_account.id, fund_account.contact_id) or fund_account.id in allowed_fund_accounts(
        ctx.ledger, MandateVersion(action.merchant_id, action.agent_id, mandate.mandate_hash))


def payout_balance_refusal(action: ResolvedAction, ctx: GateContext, merchants: tuple[str, ...]) -> GateResult | None:
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


def with_payee(payee: GateResult, value: GateResult, fund_account: FundAccount) -> GateResult:
    """G2's result for a payout whose payee is not refused: the value's refusal stands; a payee held for a person
    holds the call even where the value would pass (or hold it too); a call held for its amount shows the approver
    whom it pays as well."""
    if value.verdict is Verdict.BLOCK:
        return value
    if payee.verdict is Verdict.HOLD:
        return hold(payee.reason_code, **payee.detail, value=value.reason_code)
    if value.verdict is Verdict.HOLD:
        return hold(value.reason_code, **value.detail, payee=fund_account.shown(), payee_digest=fund_account.digest)
    return value
