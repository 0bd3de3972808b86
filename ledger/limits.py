"""G3 over committed ledger state: sliding windows (calls, minor units per currency) and fee budgets.

Evaluated twice: by a gate worker from a read-only snapshot, and again by the rail worker inside
the admit transaction (BEGIN IMMEDIATE), which is the authoritative check — racing gate workers
can each see room for one more call, but only one admit at a time can take it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from interlock.config import DEFAULT_CLOCK_SKEW_MS
from interlock.fees import FeeRate
from interlock.mandate import Mandate
from interlock.messages import Verdict
from interlock.task import EXCEEDS_TASK_CEILING, TASK_WRONG_AUDIENCE, V1_TASK_ERROR
from interlock.verdicts import GateResult, allow, block
from ledger.intents import Intent
from ledger.queries import PAYOUT_TOOL, SETTLEMENT_TOOL, fees_in_window, money_under_task, window_subject, window_usage


def check_limits(
    conn: sqlite3.Connection,
    mandate: Mandate,
    *,
    merchant_id: str,
    agent_id: str,
    sik: str,
    tool: str,
    amount_minor: int,
    currency: str,
    now_ms: int,
    rate: FeeRate,
    subject: str | None = None,
    clock_skew_ms: int = DEFAULT_CLOCK_SKEW_MS,
) -> GateResult:
    """BLOCK when this call would cross a window or fee budget (SPEC §14: crossing is BLOCK, not HOLD).

    The intent with this call's own SIK is excluded, so re-checking an already admitted intent
    does not count it twice. *subject* (the payee, the payment) is what a per_subject window counts apart.
    The intents' authorized_at were stamped by the processes that authorized them (the rail worker at admission,
    an operator at a release, a reconciler at a retry), and *now_ms* is this caller's clock: each window counts
    back *clock_skew_ms* further (INTERLOCK_CLOCK_SKEW_MS, ADR 0032), so a call authorized within the window by a
    clock behind this one is never left out.
    """
    for index, window in enumerate(mandate.limits.windows):
        if window.tool is not None and window.tool != tool:
            continue  # another tool's window
        used = window_usage(conn, merchant_id, agent_id, since_ms=now_ms - window.window_ms + 1 - clock_skew_ms,
                            currency=window.currency, exclude_sik=sik, tool=window.tool,
                            subject_id=subject if window.per_subject else None)  # fmt: skip
        if window.max_calls is not None and used.calls + 1 > window.max_calls:
            return block("G3_WINDOW_CALLS", window=index, window_ms=window.window_ms, calls=used.calls,
                         max_calls=window.max_calls)  # fmt: skip
        if window.max_amount_minor is not None and window.currency == currency:
            if used.amount_minor + amount_minor > window.max_amount_minor:
                return block("G3_WINDOW_AMOUNT", window=index, window_ms=window.window_ms,
                             counted_minor=used.amount_minor, amount_minor=amount_minor,
                             max_amount_minor=window.max_amount_minor)  # fmt: skip
    budget = mandate.limits.fee_budgets.get(currency)
    if budget is not None and tool in (SETTLEMENT_TOOL, PAYOUT_TOOL):
        counted = fees_in_window(conn, merchant_id, agent_id, since_ms=now_ms - budget.window_ms + 1 - clock_skew_ms,
                                 currency=currency, rate=rate, exclude_sik=sik)  # fmt: skip
        projected = rate.project_for(tool, amount_minor)
        if counted + projected > budget.max_fee_minor:
            return block("G3_FEE_BUDGET", counted_fee_minor=counted, projected_fee_minor=projected,
                         max_fee_minor=budget.max_fee_minor, window_ms=budget.window_ms)  # fmt: skip
    return allow("G3_WITHIN_LIMITS")


def check_task_ceiling(
    conn: sqlite3.Connection, *, signer: str | None, task_id: str, sik: str, amount_minor: int, ceiling_minor: int,
    recovered_for: tuple[str, Sequence[str]] | None = None,
) -> GateResult:
    """BLOCK when this call plus everything else bound to the same signed task (APPLIED or still able to move)
    would pass the task's max_amount_minor: a refund split into in-limit calls is still one refund (seed A-10),
    and the count is per (signer, task_id) across merchants, agents and tools (SPEC §10 v2), so presenting the
    ticket elsewhere starts from what it already moved. Advisory in the gate (G2), authoritative in the rail
    worker's admit transaction, like G3. *recovered_for*: the merchant and agents the task is addressed to, whose
    intents a restore recovered from the rail count too (queries.money_under_task)."""
    counted = money_under_task(conn, signer, task_id, exclude_sik=sik, recovered_for=recovered_for)
    if counted + amount_minor > ceiling_minor:
        return block(EXCEEDS_TASK_CEILING, task_id=task_id, counted_minor=counted, amount_minor=amount_minor,
                     max_amount_minor=ceiling_minor)  # fmt: skip
    return allow("G2_WITHIN_TASK_CEILING", task_id=task_id, counted_minor=counted, max_amount_minor=ceiling_minor)


def reassert(conn: sqlite3.Connection, intent: Intent, mandate: Mandate | None, *, now_ms: int,
             rate: FeeRate, clock_skew_ms: int = DEFAULT_CLOCK_SKEW_MS) -> GateResult:  # fmt: skip
    """Everything the ledger can re-check when an intent (re-)enters AUTHORIZED, inside that transaction:
    the mandate still covers it (G1: configured, active, tool granted), the amount is inside the grant's
    range and currency (G2's mandate ceiling), G3's windows and fee budget still have room, and the sum under
    its task (if it is bound to one) still fits the task's ceiling.

    A hold released hours later or a retry authorized after a window filled up is judged against what is
    true now, never against the state the intent was first admitted under (issue 13, item 5)."""
    if mandate is None or mandate.agent_id != intent.agent_id or mandate.merchant_id != intent.merchant_id:
        return block("G1_NO_MANDATE", agent_id=intent.agent_id)
    if not mandate.is_active(now_ms):
        return block("G1_MANDATE_EXPIRED", issued_at=mandate.issued_at, expires_at=mandate.expires_at, now_ms=now_ms)
    grant = mandate.grant(intent.tool)
    if grant is None or grant.value is None:
        return block("G1_TOOL_NOT_GRANTED", tool=intent.tool)
    value = grant.value
    if intent.currency not in value.currencies:
        return block("G2_CURRENCY_MISMATCH", currency=intent.currency, allowed=list(value.currencies))
    if not value.min_amount_minor <= intent.amount_minor <= value.max_amount_minor:
        return block("G2_OUTSIDE_RANGE", amount_minor=intent.amount_minor, min_amount_minor=value.min_amount_minor,
                     max_amount_minor=value.max_amount_minor)  # fmt: skip
    limits = check_limits(conn, mandate, merchant_id=intent.merchant_id, agent_id=intent.agent_id, sik=intent.sik,
                          tool=intent.tool, amount_minor=intent.amount_minor, currency=intent.currency,
                          now_ms=now_ms, rate=rate, clock_skew_ms=clock_skew_ms,
                          subject=window_subject(intent.tool, intent.subject_id, intent.params))  # fmt: skip
    if limits.verdict is not Verdict.ALLOW:
        return limits
    if intent.task_id is not None and intent.task_signer is None:
        # Admitted under a v1 task (no audience, before the signer was recorded): released or retried now, it is
        # judged by today's rule, which refuses a task bound to no one.
        return block(TASK_WRONG_AUDIENCE, task_id=intent.task_id, error=V1_TASK_ERROR)
    if intent.task_id is not None and intent.task_ceiling_minor is not None:
        ceiling = check_task_ceiling(conn, signer=intent.task_signer, task_id=intent.task_id, sik=intent.sik,
                                     amount_minor=intent.amount_minor, ceiling_minor=intent.task_ceiling_minor,
                                     recovered_for=(intent.merchant_id, (intent.agent_id,)))  # fmt: skip
        if ceiling.verdict is not Verdict.ALLOW:
            return ceiling
    return allow("REASSERTED", mandate_hash=mandate.mandate_hash, now_ms=now_ms)
