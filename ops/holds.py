"""Held calls: list, approve, reject, and expire them (SPEC §6 HELD, §11 approval).

An approval is valid only (a) from an approver who authenticated with their own credential (ops.approvers,
ADR 0015), still current in INTERLOCK_APPROVERS, whom the intent's own mandate names, (b) while that mandate is
still the configured one (same mandate_hash) and active, (c) before the hold expires, (d) for the exact terms
the approver was shown: the terms digest (sik, merchant, tool, subject, amount, currency, mandate_hash,
params_hash) is required, and any amount, subject or mandate_hash given must match too, (e) while the amount
still fits G2 on a fresh rail read (the payment or the balance, less the other intents in motion or held). It
releases that one intent — HELD -> AUTHORIZED in one transaction with an audit record naming the authenticated
approver, the credential and why — and hands it to the rail worker through the normal execute job. A hold is
left once: a second approval finds it AUTHORIZED (or further) and is refused, never re-applied. A changed
amount is a different SIK, so it is a different intent and needs its own approval. A payout held for a payee on no
list may also add that payee to its mandate's payees, by the approver's explicit choice (ops.held_payees, ADR 0034).
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass, replace
from typing import Any

import redis

from interlock.canonical import canonical_hash
from interlock.clock import now_ms
from interlock.errors import ConfigError, InterlockError, OperatorRefused
from interlock.fees import DEFAULT_FEE_RATE
from interlock.mandate import Mandate, MandateStore
from interlock.queues import EXECUTE_JOB
from ledger import operator
from ledger.db import transaction
from ledger.intents import Intent
from ledger.queries import (
    PAYOUT_TOOL,
    applied_after,
    applied_mark,
    money_committed_for_subject,
    money_committed_for_tool,
    payouts_not_known_debited,
)
from ledger.states import State
from ops import held_payees
from ops.approvers import Approver, approver_problem
from ops.context import OpsContext
from ops.format import format_minor
from ops.rail_check import REFUND_TOOL
from rails.models import Balance, BankingBalance, FundAccount, Payment
from rails.pager import MAX_OURS, NOT_DEBITED, payout_basis
from rails.razorpay import RailError

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Expected:
    """What the approver saw besides the terms digest; each given field must equal the held intent's."""

    amount_minor: int | None = None
    subject: str | None = None
    mandate_hash: str | None = None


@dataclass(frozen=True, slots=True)
class Released:
    intent: Intent
    enqueued: bool  # False: Redis was unreachable; the reconciler's sweep re-enqueues AUTHORIZED intents
    # With allow_payee: the PAYEE_ALLOWED record's seq, or None when the payee was on the list already.
    payee_allowed_seq: int | None = None


def terms_of(intent: Intent) -> dict[str, Any]:
    """The terms an approval binds to."""
    return {
        "sik": intent.sik, "merchant_id": intent.merchant_id, "tool": intent.tool, "subject": intent.subject_id,
        "amount_minor": intent.amount_minor, "currency": intent.currency, "mandate_hash": intent.mandate_hash,
        "params_hash": intent.params_hash,
    }  # fmt: skip


def terms_digest(intent: Intent) -> str:
    """A short digest of terms_of(): what the console's approve form carries back, and `holds list` prints."""
    return canonical_hash(terms_of(intent))[:16]


def find_intent(conn: sqlite3.Connection, sik: str, merchant_id: str | None = None) -> Intent:
    found = [i for i in operator.intents_with_sik(conn, sik) if merchant_id is None or i.merchant_id == merchant_id]
    if not found:
        where = f" for merchant {merchant_id}" if merchant_id else ""
        raise OperatorRefused(sik, f"no intent with this SIK in the ledger{where}")
    if len(found) > 1:
        raise OperatorRefused(sik, "several merchants have an intent with this SIK; pass --merchant")
    return found[0]


def sweep_expired(ctx: OpsContext, now: int | None = None) -> list[Intent]:
    """HELD past hold_expires_at -> BLOCKED (HOLD_EXPIRED). Run by every hold command and console page."""
    given, now = now, now if now is not None else now_ms()
    with ctx.ledger() as conn:
        if not operator.expired_holds(conn, now):
            return []  # the common case takes no write lock
        with transaction(conn):  # the time under the write lock, like every ledger writer
            expired = operator.expire_holds(conn, now_ms() if given is None else given)
    for intent in expired:
        logger.info("hold on %s expired: BLOCKED (HOLD_EXPIRED)", intent.sik)
    return expired


def list_holds(ctx: OpsContext) -> list[Intent]:
    sweep_expired(ctx)
    with ctx.ledger(readonly=True) as conn:
        return sorted(operator.intents_in_state(conn, State.HELD), key=lambda i: i.hold_expires_at or 0)


def payees_shown(ctx: OpsContext, held: list[Intent]) -> dict[str, dict[str, Any]]:
    """SIK -> each held payout's payee as G2 read it from the rail when it held the call (ops.held_payees.shown): what
    `holds list` and the console show beside the call's terms, with the digest that adds it to the allow-list."""
    if not any(i.tool == PAYOUT_TOOL for i in held):
        return {}
    with ctx.ledger(readonly=True) as conn:
        return {i.sik: found for i in held if (found := held_payees.shown(conn, i)) is not None}


def describe_payee(payee: dict[str, Any]) -> str:
    """One line of a payee as the rail reports it: whose, where the money lands, which contact."""
    bank = f" ({payee['bank_name']})" if payee.get("bank_name") else ""
    where = (f"VPA {payee.get('vpa')}" if payee.get("account_type") == "vpa" else
             f"account {payee.get('account_number')} IFSC {payee.get('ifsc')}{bank}")
    name = f"{payee.get('name')}, " if payee.get("name") else ""
    inactive = "" if payee.get("active", True) else " INACTIVE"
    return f"{name}{where}, contact {payee.get('contact_id')}{inactive}"


def approve(
    ctx: OpsContext, sik: str, *, approver: Approver, terms_digest: str, reason: str,
    expected: Expected | None = None, merchant_id: str | None = None, now: int | None = None,
    allow_payee: str | None = None,
) -> Released:  # fmt: skip
    """Release one held call for *approver*, who saw the terms whose digest is *terms_digest*. With *allow_payee* (the
    payee digest the approver was shown), a held payout's payee is also added to its mandate's payees (ADR 0034)."""
    _require_current(ctx, sik, approver)
    if not terms_digest.strip():
        raise OperatorRefused(sik, "an approval names the terms digest of the call it approves (`holds list` "
                                   "prints it as terms=…; pass --terms)")  # fmt: skip
    mandates = ctx.mandates()
    rail_view = _read_referent(ctx, mandates, sik, merchant_id)  # before the write lock: a rail call may take seconds
    seq: int | None = None
    with ctx.ledger() as conn:
        with transaction(conn):  # every check reads the row under the write lock it is released under
            # The time too: the rail read above, or a wait for the lock, must not age the expiry and window checks.
            now = now if now is not None else now_ms()
            intent = find_intent(conn, sik, merchant_id)
            if intent.state is State.HELD and intent.hold_expires_at is not None and now >= intent.hold_expires_at:
                operator.reject_hold(conn, intent, actor=operator.HOLD_EXPIRY_ACTOR, now=now,
                                     reason="hold expired before it was approved", code=operator.HOLD_EXPIRED)
                problem: str | None = (f"the hold expired at {intent.hold_expires_at} (now {now}); the call is now "
                                       "BLOCKED with reason HOLD_EXPIRED — the agent must make a new call")
            else:
                mandate = mandates.get(intent.agent_id)
                problem = (_approval_problem(mandates, intent, approver.approver_id, now)
                           or _terms_problem(intent, terms_digest, expected or Expected())
                           or (held_payees.allow_problem(intent, rail_view.fund_account, mandate, allow_payee)
                               if allow_payee is not None else None)
                           or _value_problem(conn, intent, rail_view, _account_merchants(mandates, intent), mandate))
                if problem is None:
                    intent = operator.release_hold(conn, intent, approver=approver.approver_id, reason=reason,
                                                   approved_terms=terms_of(intent), now=now, mandate=mandate,
                                                   credential=approver.credential,
                                                   clock_skew_ms=ctx.settings.clock_skew_ms)  # fmt: skip
                    if allow_payee is not None and rail_view.fund_account is not None:  # the same commit as the release
                        seq = held_payees.allow(conn, intent, rail_view.fund_account, mandate, approver=approver,
                                                now=now)  # fmt: skip
    if problem is not None:  # raised after the commit: an expired hold stays BLOCKED
        raise OperatorRefused(sik, problem)
    logger.info("hold on %s released by %s (%s): %s", sik, approver.approver_id, approver.credential, reason)
    if seq is not None:
        logger.info("payee %s added to the payees of %s's mandate %s by %s (audit seq %d)", intent.subject_id,
                    intent.agent_id, intent.mandate_hash[:12], approver.approver_id, seq)  # fmt: skip
    return Released(intent, _enqueue_execute(ctx, intent), payee_allowed_seq=seq)


@dataclass(frozen=True, slots=True)
class _RailView:
    """G2's referent as the rail reports it at approval time, or why it could not be read."""

    payment: Payment | None = None
    balance: Balance | None = None
    # A payout: its payee as the rail says it is now, the RazorpayX balance and the payouts it holds undebited.
    fund_account: FundAccount | None = None
    banking_balance: BankingBalance | None = None
    payouts_waiting_minor: int = 0
    problem: str | None = None
    # The ledger's applied order as read before the rail (ledger.queries.applied_mark): what became APPLIED after
    # it may be missing from the read, so the release counts it (finding F9).
    applied_mark: int | None = None


def _read_referent(ctx: OpsContext, mandates: MandateStore, sik: str, merchant_id: str | None) -> _RailView:
    with ctx.ledger(readonly=True) as conn:
        intent = find_intent(conn, sik, merchant_id)
        mark = applied_mark(conn)
        # Our payouts not yet seen debited, fetched by id before the balance (rails.pager.payout_basis; F11).
        ours = (payouts_not_known_debited(conn, _account_merchants(mandates, intent), undebited=NOT_DEBITED,
                                          limit=MAX_OURS + 1) if intent.tool == PAYOUT_TOOL else [])  # fmt: skip
    if intent.state is not State.HELD:
        return _RailView()  # refused under the lock as not HELD; nothing to read
    return replace(_read_rail(ctx, intent, ours), applied_mark=mark)


def _read_rail(ctx: OpsContext, intent: Intent, ours: list[str]) -> _RailView:
    what = {REFUND_TOOL: f"payment {intent.subject_id}", PAYOUT_TOOL: f"payee {intent.subject_id} and balance"}.get(
        intent.tool, "settlement balance")
    try:
        with ctx.rail() as rail:
            if intent.tool == REFUND_TOOL:
                return _RailView(payment=rail.fetch_payment(intent.subject_id))
            if intent.tool == PAYOUT_TOOL:
                account = str(intent.params["account_number"])
                fund_account = rail.fetch_fund_account(intent.subject_id)
                banking, waiting = payout_basis(rail, account, ours=ours, fee_minor=DEFAULT_FEE_RATE.project_payout())
                return _RailView(fund_account=fund_account, banking_balance=banking, payouts_waiting_minor=waiting)
            return _RailView(balance=rail.fetch_balance())
    except (RailError, ConfigError) as exc:
        # Fail closed: an approval is judged against the rail as it is now, never against the gate's old read.
        return _RailView(problem=f"could not re-read the {what} on the rail to re-run G2 ({exc}); nothing was "
                                 "released — approve again once the rail answers")  # fmt: skip


def _account_merchants(mandates: MandateStore, intent: Intent) -> tuple[str, ...]:
    """The merchants on this intent's rail account (ADR 0021): their money in motion shares one G2 count."""
    mandate = mandates.get(intent.agent_id)
    return mandates.account_merchants(mandate) if mandate is not None else (intent.merchant_id,)


def _value_problem(conn: sqlite3.Connection, intent: Intent, view: _RailView, merchants: tuple[str, ...],
                   mandate: Mandate | None = None) -> str | None:  # fmt: skip
    """G2 again, against the fresh rail read and the ledger inside the release transaction: money moved or
    held since the call was held (another refund, a settlement) may leave no room for it any more."""
    if view.problem is not None:
        return view.problem
    amount, currency = intent.amount_minor, intent.currency
    others = money_committed_for_subject(conn, merchants, intent.subject_id, exclude_sik=intent.sik,
                                         currency=currency)  # fmt: skip
    if view.applied_mark is not None and view.banking_balance is None:
        others += applied_after(conn, merchants, mark=view.applied_mark, exclude_sik=intent.sik, currency=currency,
                                subject_id=intent.subject_id)  # fmt: skip
    if view.payment is not None:
        pay = view.payment
        room = pay.amount - pay.amount_refunded - others
        basis = (f"payment {pay.id}: captured {format_minor(pay.amount, currency)} - refunded "
                 f"{format_minor(pay.amount_refunded, currency)} - other intents in motion or held "
                 f"{format_minor(others, currency)}")  # fmt: skip
        code = "G2_EXCEEDS_REFUNDABLE"
    elif view.banking_balance is not None and view.fund_account is not None:
        refused = held_payees.payee_problem(conn, intent, view.fund_account, mandate)
        if refused is not None:
            return refused
        if intent.params.get("queue_if_low_balance") is True:
            return None  # the mandate lets the rail queue what the balance cannot cover
        fee = DEFAULT_FEE_RATE.project_payout()  # debited beside each payout's amount
        others = money_committed_for_tool(conn, merchants, PAYOUT_TOOL, exclude_sik=intent.sik, currency=currency,
                                          per_call_minor=fee)  # fmt: skip
        if view.applied_mark is not None:
            others += applied_after(conn, merchants, mark=view.applied_mark, exclude_sik=intent.sik,
                                    currency=currency, tool=PAYOUT_TOOL, per_call_minor=fee)  # fmt: skip
        banking = view.banking_balance
        room = banking.amount - view.payouts_waiting_minor - others - fee
        basis = (f"RazorpayX balance {format_minor(banking.amount, banking.currency)} - payouts the rail holds "
                 f"undebited {format_minor(view.payouts_waiting_minor, currency)} - other payouts in motion or held "
                 f"{format_minor(others, currency)}")  # fmt: skip
        code = "G2_EXCEEDS_PAYOUT_BALANCE"
    elif view.balance is not None:
        room = view.balance.balance - others
        basis = (f"balance {format_minor(view.balance.balance, view.balance.currency)} - other settlements in "
                 f"motion or held {format_minor(others, currency)}")  # fmt: skip
        code = "G2_EXCEEDS_BALANCE"
    else:  # not read because it was not HELD then; fail closed rather than release unchecked
        return "it was not HELD when the rail was read for G2; approve again"
    if amount <= room:
        return None
    return (f"{code}: the held {format_minor(amount, currency)} no longer fits ({basis} = "
            f"{format_minor(max(room, 0), currency)} left, read from the rail now); reject it — the agent can make "
            "a new call for what is left")  # fmt: skip


def reject(ctx: OpsContext, sik: str, *, approver: Approver, reason: str, merchant_id: str | None = None,
           now: int | None = None) -> Intent:  # fmt: skip
    if not reason.strip():
        raise OperatorRefused(sik, "a rejection needs a reason (--reason TEXT)")
    _require_current(ctx, sik, approver)
    mandates = ctx.mandates()
    with ctx.ledger() as conn:
        with transaction(conn):
            now = now if now is not None else now_ms()  # under the write lock, like every ledger writer
            intent = find_intent(conn, sik, merchant_id)
            problem = _not_held(intent) or approver_problem(mandates, intent, approver.approver_id)
            if problem is None:
                intent = operator.reject_hold(conn, intent, actor=approver.approver_id, reason=reason, now=now,
                                              credential=approver.credential)  # fmt: skip
    if problem is not None:
        raise OperatorRefused(sik, problem)
    logger.info("hold on %s rejected by %s (%s): %s", sik, approver.approver_id, approver.credential, reason)
    return intent


def _require_current(ctx: OpsContext, sik: str, approver: Approver) -> None:
    """The credential is checked against the file as it is now: a removed or rotated one decides nothing."""
    if not ctx.approvers().current(approver):
        raise OperatorRefused(sik, f"the credential {approver.credential} of {approver.approver_id!r} is no longer "
                                   "in INTERLOCK_APPROVERS (removed or rotated); authenticate again")  # fmt: skip


def _not_held(intent: Intent) -> str | None:
    if intent.state is State.HELD:
        return None
    return (f"it is {intent.state.value}, not HELD — only a held call can be approved or rejected "
            "(a hold is decided once)")  # fmt: skip


def _approval_problem(mandates: MandateStore, intent: Intent, approver: str, now: int) -> str | None:
    problem = _not_held(intent) or approver_problem(mandates, intent, approver)
    if problem is not None:
        return problem
    mandate = mandates.require(intent.agent_id)
    if mandate.mandate_id != intent.mandate_id or mandate.mandate_hash != intent.mandate_hash:
        return (f"the call was held under mandate {intent.mandate_id} {intent.mandate_hash[:12]}…, but the configured "
                f"mandate is {mandate.mandate_id} {mandate.mandate_hash[:12]}…; an approval binds to the mandate the "
                "call was judged under — reject it and let the agent repeat the call under the current mandate")
    if not mandate.is_active(now):
        return f"mandate {mandate.mandate_id} is not active now (valid {mandate.issued_at}..{mandate.expires_at})"
    return None


def _terms_problem(intent: Intent, digest: str, expected: Expected) -> str | None:
    checks = [
        ("terms digest", digest.strip(), terms_digest(intent)),
        ("amount_minor", expected.amount_minor, intent.amount_minor),
        ("subject", expected.subject, intent.subject_id),
        ("mandate_hash", expected.mandate_hash, intent.mandate_hash),
    ]
    for name, wanted, actual in checks:
        if wanted is not None and wanted != actual:
            return (f"the approval names {name} {wanted!r} but the held call has {actual!r}; an approval binds to "
                    "the exact terms of one call — a call with other terms is a different intent")
    return None


def _enqueue_execute(ctx: OpsContext, intent: Intent) -> bool:
    """Hand the released intent to the rail worker (recovery and release go through the normal path)."""
    try:
        ctx.rail_jobs().enqueue(EXECUTE_JOB, intent.merchant_id, intent.sik, None, result_ttl=600, failure_ttl=86400)
        return True
    except (redis.RedisError, InterlockError) as exc:
        logger.warning("released %s but could not enqueue it (%s); the reconciler's sweep will", intent.sik, exc)
        return False
