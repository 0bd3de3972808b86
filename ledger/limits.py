"""G3 over committed ledger state: sliding windows (calls, minor units per currency) and fee budgets.

Evaluated twice: by a gate worker from a read-only snapshot, and again by the rail worker inside
the admit transaction (BEGIN IMMEDIATE), which is the authoritative check — racing gate workers
can each see room for one more call, but only one admit at a time can take it.
"""

from __future__ import annotations

import sqlite3

from interlock.fees import FeeRate
from interlock.mandate import Mandate
from interlock.verdicts import GateResult, allow, block
from ledger.queries import SETTLEMENT_TOOL, fees_in_window, window_usage


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
) -> GateResult:
    """BLOCK when this call would cross a window or fee budget (SPEC §14: crossing is BLOCK, not HOLD).

    The intent with this call's own SIK is excluded, so re-checking an already admitted intent
    does not count it twice.
    """
    for index, window in enumerate(mandate.limits.windows):
        used = window_usage(conn, merchant_id, agent_id, since_ms=now_ms - window.window_ms + 1,
                            currency=window.currency, exclude_sik=sik)  # fmt: skip
        if window.max_calls is not None and used.calls + 1 > window.max_calls:
            return block("G3_WINDOW_CALLS", window=index, window_ms=window.window_ms, calls=used.calls,
                         max_calls=window.max_calls)  # fmt: skip
        if window.max_amount_minor is not None and window.currency == currency:
            if used.amount_minor + amount_minor > window.max_amount_minor:
                return block("G3_WINDOW_AMOUNT", window=index, window_ms=window.window_ms,
                             counted_minor=used.amount_minor, amount_minor=amount_minor,
                             max_amount_minor=window.max_amount_minor)  # fmt: skip
    budget = mandate.limits.fee_budgets.get(currency)
    if budget is not None and tool == SETTLEMENT_TOOL:
        counted = fees_in_window(conn, merchant_id, agent_id, since_ms=now_ms - budget.window_ms + 1,
                                 currency=currency, rate=rate, exclude_sik=sik)  # fmt: skip
        projected = rate.project(amount_minor)
        if counted + projected > budget.max_fee_minor:
            return block("G3_FEE_BUDGET", counted_fee_minor=counted, projected_fee_minor=projected,
                         max_fee_minor=budget.max_fee_minor, window_ms=budget.window_ms)  # fmt: skip
    return allow("G3_WITHIN_LIMITS")
