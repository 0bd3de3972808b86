"""Resolve a Proposal's referent on the rail (read-only) before any gate judges it.

The agent's payment_id is only a lookup key: the subject that enters the SIK is the id the rail
returned. A refund without an amount becomes "everything still refundable", a full-balance
settlement becomes the current balance — concrete numbers, judged like any other.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass, replace
from typing import Protocol

from gate_workers.context import ResolvedAction
from interlock.arguments import MoneyCall, parse_money_call
from interlock.config import DEFAULT_CLOCK_SKEW_MS, DEFAULT_SETTLEMENT_GRACE_MS
from interlock.errors import InvalidInput
from interlock.fees import DEFAULT_FEE_RATE
from interlock.mandate import Mandate
from interlock.messages import Proposal
from interlock.sik import SETTLEMENT_SUBJECT, compute_sik, in_window_grace, window_bucket
from interlock.tools import PAYOUT_TOOL
from ledger.queries import (
    PAYEE_PARAM,
    earlier_full_request,
    intent_state,
    intent_unsettled_at,
    money_committed_for_subject,
    payouts_not_known_debited,
)
from rails.models import Balance, BankingBalance, FundAccount, Page, Payment, Payout
from rails.pager import MAX_OURS, NOT_DEBITED, payout_basis
from rails.razorpay import RailError, RailErrorKind

logger = logging.getLogger(__name__)

# The rail has no way to read the balance (not an outage): settlements cannot be judged by G2 (issue 13, item 11).
BALANCE_UNREADABLE = "G2_BALANCE_UNREADABLE"
# The rail cannot make payouts (an upstream MCP server without a payout tool): G2 refuses every one.
PAYOUTS_UNSUPPORTED = "G2_PAYOUTS_UNSUPPORTED"
_NO_SUCH_URL = "requested url was not found"


class RailReader(Protocol):
    def fetch_payment(self, payment_id: str) -> Payment: ...

    def fetch_balance(self) -> Balance: ...

    def fetch_fund_account(self, fund_account_id: str) -> FundAccount: ...

    def fetch_banking_balance(self, account_number: str) -> BankingBalance: ...

    def fetch_payout(self, payout_id: str) -> Payout: ...

    def list_payouts(self, account_number: str, *, reference_id: str | None = None, status: str | None = None,
                     count: int = ..., skip: int = ...) -> Page[Payout]: ...  # fmt: skip


def resolve(
    proposal: Proposal, rail: RailReader, ledger: sqlite3.Connection, mandate: Mandate | None, at_ms: int, *,
    grace_ms: int = DEFAULT_SETTLEMENT_GRACE_MS, balance_read_missing: str | None = None,
    account_merchants: tuple[str, ...] = (), payouts_missing: str | None = None,
    clock_skew_ms: int = DEFAULT_CLOCK_SKEW_MS,
) -> ResolvedAction:
    """Resolve the call's referent. *at_ms* is when the call was made — the Proposal's received_at_ms, the
    ingress's clock — and picks a settlement's idempotency window, so a job picked up late is keyed the same.
    *balance_read_missing* says what the rail lacks when it is known to have no balance read (proxy mode).
    *account_merchants* are the merchants on this mandate's rail account (ADR 0021): a full refund is what none
    of them has in motion on the payment. *payouts_missing* says why the rail cannot make payouts (proxy mode).
    *clock_skew_ms* is how far the ledger's stamps may be from the ingress's clock (INTERLOCK_CLOCK_SKEW_MS)."""
    base = ResolvedAction(
        request_id=proposal.request_id, agent_id=proposal.agent_id, merchant_id=proposal.merchant_id,
        tool=proposal.tool, arguments=proposal.arguments, operation_ref=proposal.operation_ref, received_at_ms=at_ms,
    )  # fmt: skip
    try:
        call = parse_money_call(proposal.tool, proposal.arguments)
    except InvalidInput as exc:
        return _unresolved(base, "G0_MALFORMED_CALL", field=exc.field, error=str(exc))
    if call.tool == "create_refund":
        return _resolve_refund(base, call, rail, ledger, account_merchants or (base.merchant_id,))
    if call.tool == PAYOUT_TOOL:
        return _resolve_payout(base, call, rail, ledger, mandate, at_ms, grace_ms, payouts_missing, clock_skew_ms,
                               account_merchants or (base.merchant_id,))
    return _resolve_settlement(base, call, rail, ledger, mandate, at_ms, grace_ms, balance_read_missing,
                               clock_skew_ms)  # fmt: skip


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
    base: ResolvedAction, call: MoneyCall, rail: RailReader, ledger: sqlite3.Connection, merchants: tuple[str, ...]
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
            # Full refund: what the rail still allows minus what Interlock already has in motion (or held) on it.
            in_motion = money_committed_for_subject(ledger, merchants, payment.id, exclude_sik="")
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
    at_ms: int, grace_ms: int, balance_read_missing: str | None, clock_skew_ms: int,
) -> ResolvedAction:
    if balance_read_missing is not None:
        return _unresolved(base, BALANCE_UNREADABLE, lookup="balance", missing=balance_read_missing)
    try:
        balance = rail.fetch_balance()
    except RailError as exc:
        if not _no_balance_read(exc):
            return _rail_failure(base, exc, "balance")
        missing = f"a balance read (the rail answered {exc.method} {exc.path}: {exc.http_status} {exc.description})"
        return _unresolved(base, BALANCE_UNREADABLE, lookup="balance", missing=missing, error=str(exc))
    return _key_settlement(base, call, balance, ledger, mandate, at_ms, grace_ms, clock_skew_ms)


@dataclass(frozen=True, slots=True)
class _Window:
    """A windowed tool's keys for one call (ADR 0009 and its amendment; ADR 0028 for payouts): the call's window,
    and the previous window's intent when this call is a repeat of it."""

    base: ResolvedAction
    ledger: sqlite3.Connection
    subject: str
    currency: str
    distinct: str | None
    window: int
    in_grace: bool
    clock_skew_ms: int  # how far the ledger's stamps may be from the ingress's clock (INTERLOCK_CLOCK_SKEW_MS)

    def key(self, bucket: int, amount: int) -> str:
        return compute_sik(merchant_id=self.base.merchant_id, tool=self.base.tool, subject=self.subject,
                           amount_minor=amount, currency=self.currency, extra=None, window=bucket,
                           distinct=self.distinct)  # fmt: skip

    def previous_intent(self, amount: int) -> str | None:
        """The previous window's SIK when this call is a repeat of that intent: within grace in any state
        (it may be APPLIED by now); later when it was unsettled, or not yet admitted, when this call was
        received (the caller was still being told to repeat). The rail worker judges the same again at admit."""
        if self.window == 0:
            return None
        sik = self.key(self.window - 1, amount)
        assert self.base.received_at_ms is not None
        unsettled = intent_unsettled_at(self.ledger, self.base.merchant_id, sik, self.base.received_at_ms,
                                        self.clock_skew_ms)  # fmt: skip
        return sik if unsettled is not None and (self.in_grace or unsettled) else None

    def keyed(self, amount: int) -> dict[str, object]:
        """The ResolvedAction fields that key *amount* in this window: sik, window, grace_siks, previous_sik."""
        sik = self.key(self.window, amount)
        # The previous window's key always (a repeat whose first call is still queued, or racing it: the rail
        # worker applies the grace rule at admit), and the next window's always (a first call stalled past the
        # next boundary behind its own repeat).
        previous_sik = self.key(self.window - 1, amount) if self.window > 0 else None
        grace_siks: tuple[str, ...] = (self.key(self.window + 1, amount),)
        window = self.window
        previous = None if intent_state(self.ledger, self.base.merchant_id, sik) is not None \
            else self.previous_intent(amount)  # fmt: skip
        if previous is not None:
            # A repeat that crossed into the next window is that call, not a new operation: answer it with the
            # earlier intent, even once that one is APPLIED (the caller was promised it cannot pay twice).
            window, sik, grace_siks = window - 1, previous, ()
        return {"sik": sik, "window": window, "grace_siks": grace_siks, "previous_sik": previous_sik}


def _window(base: ResolvedAction, ledger: sqlite3.Connection, mandate: Mandate | None, at_ms: int, grace_ms: int,
            clock_skew_ms: int, *, subject: str, currency: str, distinct: str | None) -> _Window | None:  # fmt: skip
    """The call's window, or None when the mandate sets none for the tool (SPEC §4: then the operation has no
    defined identity, and G1 refuses such a mandate)."""
    window_ms = mandate.window_ms(base.tool) if mandate is not None else None
    if window_ms is None:
        return None
    bucket = window_bucket(at_ms, window_ms)
    assert bucket is not None
    return _Window(base, ledger, subject, currency, distinct, bucket, in_window_grace(at_ms, window_ms, grace_ms),
                   clock_skew_ms)  # fmt: skip


def _key_settlement(
    base: ResolvedAction, call: MoneyCall, balance: Balance, ledger: sqlite3.Connection, mandate: Mandate | None,
    at_ms: int, grace_ms: int, clock_skew_ms: int,
) -> ResolvedAction:
    """Key a settlement in its idempotency window, with the grace rule of ADR 0009."""
    found = _window(base, ledger, mandate, at_ms, grace_ms, clock_skew_ms, subject=SETTLEMENT_SUBJECT,
                    currency=balance.currency, distinct=call.distinct_reason)  # fmt: skip
    if found is None:
        return _replace(_unresolved(base, "G1_NO_IDEMPOTENCY_WINDOW"), balance=balance)
    window = found
    params: dict[str, object] = {"notes": call.notes}
    amount = call.amount
    if amount is None:
        params["full"] = True
        assert mandate is not None
        window_ms = mandate.window_ms(base.tool)
        assert window_ms is not None
        earlier = earlier_full_request(ledger, base.merchant_id, base.tool, SETTLEMENT_SUBJECT, call.distinct_reason,
                                       since_ms=(window.window - 1) * window_ms - clock_skew_ms)  # fmt: skip
        # The repeat of a full-balance settlement is that settlement, whatever the balance is now — if it is
        # one this call lands on; an earlier window's, outside the grace rule, is another day's operation.
        repeated = earlier is not None and earlier[0] in (window.key(window.window, earlier[1]),
                                                          window.previous_intent(earlier[1]))  # fmt: skip
        amount = earlier[1] if earlier is not None and repeated else balance.balance
    if amount <= 0:
        return _replace(_unresolved(base, "G2_EXCEEDS_BALANCE", balance=balance.balance), balance=balance)
    params["amount"] = amount
    if call.description is not None:
        params["description"] = call.description
    return _replace(base, subject=SETTLEMENT_SUBJECT, amount_minor=amount, currency=balance.currency,
                    requested_amount=call.amount, balance=balance, distinct_reason=call.distinct_reason,
                    params=params, **window.keyed(amount))  # fmt: skip


def _resolve_payout(
    base: ResolvedAction, call: MoneyCall, rail: RailReader, ledger: sqlite3.Connection, mandate: Mandate | None,
    at_ms: int, grace_ms: int, payouts_missing: str | None, clock_skew_ms: int, merchants: tuple[str, ...],
) -> ResolvedAction:
    """The payee as the rail knows it (never the agent's word), the RazorpayX balance and the payouts on it not yet
    debited; the SIK keys the fund account and amount in the mandate's window (ADR 0028)."""
    terms = call.payout
    assert terms is not None and call.amount is not None
    if payouts_missing is not None:
        return _unresolved(base, PAYOUTS_UNSUPPORTED, missing=payouts_missing)
    grant = mandate.grant(base.tool) if mandate is not None else None
    account = mandate.rail.account_number if mandate is not None else None
    if grant is None or account is None:
        return _unresolved(base, "G1_TOOL_NOT_GRANTED", tool=base.tool)  # G1 says so first; never resolved without
    try:
        fund_account = rail.fetch_fund_account(terms.fund_account_id)
    except RailError as exc:
        if exc.not_found:
            return _unresolved(base, "G2_PAYEE_NOT_FOUND", fund_account_id=terms.fund_account_id)
        return _rail_failure(base, exc, terms.fund_account_id)
    try:
        banking, waiting = payout_basis(rail, account, fee_minor=DEFAULT_FEE_RATE.project_payout(),
                                        ours=payouts_not_known_debited(ledger, merchants, undebited=NOT_DEBITED,
                                                                       limit=MAX_OURS + 1))  # fmt: skip
    except RailError as exc:
        return _replace(_rail_failure(base, exc, f"banking balance of {account}"), fund_account=fund_account)
    # The payee is the contact, not the account: its bank account and its UPI id are one payee to the SIK, so "the
    # IMPS did not arrive, try UPI" lands on the first payout (ADR 0028 amendment). The money goes to the fund account.
    payee = fund_account.contact_id or fund_account.id
    found = _window(base, ledger, mandate, at_ms, grace_ms, clock_skew_ms, subject=payee, currency=terms.currency,
                    distinct=call.distinct_reason)  # fmt: skip
    if found is None:
        return _replace(_unresolved(base, "G1_NO_IDEMPOTENCY_WINDOW"), fund_account=fund_account)
    # Everything the rail is sent, decided here and kept with the intent: every retry sends the same body.
    params: dict[str, object] = {
        "notes": call.notes, "amount": call.amount, "account_number": account, "mode": terms.mode,
        "purpose": terms.purpose, "queue_if_low_balance": grant.queue_if_low_balance, PAYEE_PARAM: payee,
    }  # fmt: skip
    if terms.narration is not None:
        params["narration"] = terms.narration
    return _replace(base, subject=fund_account.id, amount_minor=call.amount, currency=terms.currency,
                    requested_amount=call.amount, fund_account=fund_account, banking_balance=banking,
                    payouts_waiting_minor=waiting, distinct_reason=call.distinct_reason, params=params,
                    **found.keyed(call.amount))  # fmt: skip


def _no_balance_read(exc: RailError) -> bool:
    """The rail answered that it has no balance endpoint (Razorpay: 400 "The requested URL was not found on
    the server."; others 404/405): a repeat gets the same answer, so this is not an outage to wait out."""
    if exc.http_status in (404, 405):
        return True
    return exc.kind is RailErrorKind.REJECTED and _NO_SUCH_URL in (exc.description or "").lower()
