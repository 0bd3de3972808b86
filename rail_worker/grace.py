"""ADR 0009 at admission, authoritatively: which intent a settlement Decision is a repeat of, and how long a
Decision may wait before it is admitted at all.

The gate keys a call from a ledger snapshot taken when it judged the call; the first call of a repeat may
still be waiting in the rail queue then (the rail worker down or backlogged across a window's boundary),
so only the admitting transaction, which sees every earlier admission, can tell. It measures against the
call's *received* time (Decision.received_at_ms, the ingress's clock): a repeat received while its first
call was unsettled, or not yet admitted, is that call — even if the first is APPLIED by the time the
repeat is admitted.
"""

from __future__ import annotations

import sqlite3

from interlock.config import Settings
from interlock.mandate import Mandate
from interlock.messages import Decision
from interlock.sik import SETTLEMENT_SUBJECT, compute_sik, in_window_grace
from ledger import intents
from ledger.intents import Intent
from ledger.queries import earlier_full_request
from ledger.states import unsettled_at

# Refused at admission: the call waited longer than a Decision may (nothing moved; a repeat is judged afresh).
DECISION_EXPIRED = "DECISION_EXPIRED"


def received_at(decision: Decision) -> int:
    """When the ingress received the call; a Decision from an older gate carries only when it was decided
    (later: its own age and the grace are then counted from there)."""
    return decision.received_at_ms if decision.received_at_ms is not None else decision.decided_at_ms


def expired(decision: Decision, mandate: Mandate | None, settings: Settings, now: int) -> bool:
    """Whether the Decision waited too long to be admitted: more than INTERLOCK_DECISION_MAX_AGE_MS since its call
    was received, or — a settlement — past the end of the window after the one it was received in. SIKs link a
    call only to the adjacent windows, so a first call still unadmitted when its repeat is received is then
    always in the repeat's window or the one before (where the repeat's previous_sik finds it), and a first
    call stalled behind its repeat is always in the window before the repeat's (its grace_siks find it).

    The repeat's window is read on its ingress's clock, which may run up to INTERLOCK_CLOCK_SKEW_MS ahead of
    this worker's: a first call is admitted only while *now* is that much before the end of the window after
    its own, so a repeat received before the admission is never stamped two windows on (ADR 0032)."""
    received = received_at(decision)
    if now - received > settings.decision_max_age_ms:
        return True
    window_ms = mandate.window_ms(decision.tool) if mandate is not None else None
    return window_ms is not None and (now + settings.clock_skew_ms) // window_ms > received // window_ms + 1


def same_call_intent(conn: sqlite3.Connection, decision: Decision, mandate: Mandate | None, grace_ms: int,
                     clock_skew_ms: int) -> Intent | None:  # fmt: skip
    """The intent of this same call keyed in an adjacent window, when `decision.sik` has none: the next
    window's always (grace_siks: a first call stalled behind its own repeat); the previous window's within the
    grace after the boundary in any state, and later when that intent was unsettled, or not yet admitted,
    when this call was received — the ingress's clock against the stamps of the processes that admitted and
    settled it, up to *clock_skew_ms* apart (finding F8). A full-balance settlement also lands on the previous
    window's full-balance intent of another amount ("everything" is a different number once the first one has
    moved)."""
    for sik in decision.grace_siks:
        intent = intents.get_intent(conn, decision.merchant_id, sik)
        if intent is not None:
            return intent
    window_ms = mandate.window_ms(decision.tool) if mandate is not None else None
    received = received_at(decision)
    in_grace = window_ms is not None and in_window_grace(received, window_ms, grace_ms)
    for intent in _previous_window_intents(conn, decision, window_ms, received, clock_skew_ms):
        if in_grace or unsettled_at(intent.state, intent.first_seen_at, intent.updated_at, received, clock_skew_ms):
            return intent
    return None


def _previous_window_intents(conn: sqlite3.Connection, decision: Decision, window_ms: int | None,
                             received: int, clock_skew_ms: int) -> list[Intent]:  # fmt: skip
    found = []
    if decision.previous_sik is not None:
        intent = intents.get_intent(conn, decision.merchant_id, decision.previous_sik)
        if intent is not None:
            found.append(intent)
    terms = decision.terms
    if decision.params.get("full") is True and window_ms is not None and terms is not None:
        window = received // window_ms
        # Admitted since the previous window began, on the clock of the worker that admitted it (up to
        # clock_skew_ms behind the ingress that keyed its window).
        earlier = earlier_full_request(conn, decision.merchant_id, decision.tool, SETTLEMENT_SUBJECT,
                                       decision.distinct_reason,
                                       since_ms=max(window - 1, 0) * window_ms - clock_skew_ms)  # fmt: skip
        if earlier is not None and window > 0 and earlier[0] != decision.previous_sik:
            sik, amount = earlier
            previous = compute_sik(merchant_id=decision.merchant_id, tool=decision.tool, subject=SETTLEMENT_SUBJECT,
                                   amount_minor=amount, currency=terms.currency, window=window - 1,
                                   distinct=decision.distinct_reason)  # fmt: skip
            intent = intents.get_intent(conn, decision.merchant_id, sik) if sik == previous else None
            if intent is not None:
                found.append(intent)
    return found
