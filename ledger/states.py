"""The intent state machine (SPEC §6) as one table. `ledger.intents.transition()` is the only code
that changes an intent's state, and it consults nothing but TRANSITIONS.

The core rule this table encodes: the only edge into a rail call is AUTHORIZED -> IN_FLIGHT, and
after the first attempt the only edges back into AUTHORIZED are from CONFIRMED_NOT_APPLIED (or a
fresh, fully gated proposal after a definitive rail rejection).
"""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    PROPOSED = "PROPOSED"
    HELD = "HELD"
    AUTHORIZED = "AUTHORIZED"
    IN_FLIGHT = "IN_FLIGHT"
    APPLIED = "APPLIED"
    FAILED_TERMINAL = "FAILED_TERMINAL"
    UNKNOWN = "UNKNOWN"
    RECONCILING = "RECONCILING"
    CONFIRMED_NOT_APPLIED = "CONFIRMED_NOT_APPLIED"
    BLOCKED = "BLOCKED"
    QUARANTINED = "QUARANTINED"


class Event(StrEnum):
    GATES_PASSED = "GATES_PASSED"
    GATES_HELD = "GATES_HELD"
    GATES_BLOCKED = "GATES_BLOCKED"
    HOLD_RELEASED = "HOLD_RELEASED"
    HOLD_REJECTED = "HOLD_REJECTED"
    QUARANTINE = "QUARANTINE"
    ATTEMPT_STARTED = "ATTEMPT_STARTED"
    RAIL_APPLIED = "RAIL_APPLIED"
    RAIL_REJECTED = "RAIL_REJECTED"
    RAIL_AMBIGUOUS = "RAIL_AMBIGUOUS"
    LEASE_EXPIRED = "LEASE_EXPIRED"
    RECONCILE_STARTED = "RECONCILE_STARTED"
    RECONCILE_FOUND_APPLIED = "RECONCILE_FOUND_APPLIED"
    RECONCILE_CONFIRMED_ABSENT = "RECONCILE_CONFIRMED_ABSENT"
    RECONCILE_INCONCLUSIVE = "RECONCILE_INCONCLUSIVE"
    RECONCILE_CONFIRMED_REJECTED = "RECONCILE_CONFIRMED_REJECTED"
    EARLIER_ATTEMPT_APPLIED = "EARLIER_ATTEMPT_APPLIED"
    WEBHOOK_APPLIED = "WEBHOOK_APPLIED"
    TERMS_MISMATCH = "TERMS_MISMATCH"
    AUTHORIZATION_WITHDRAWN = "AUTHORIZATION_WITHDRAWN"
    RETRY_WITHDRAWN = "RETRY_WITHDRAWN"
    RETRY_AUTHORIZED = "RETRY_AUTHORIZED"
    REOPENED = "REOPENED"
    OPERATOR_RESOLVED_APPLIED = "OPERATOR_RESOLVED_APPLIED"
    OPERATOR_RESOLVED_NOT_APPLIED = "OPERATOR_RESOLVED_NOT_APPLIED"
    RESTORED_UNSETTLED = "RESTORED_UNSETTLED"
    RECOVERED_FROM_RAIL = "RECOVERED_FROM_RAIL"


S, E = State, Event

TRANSITIONS: dict[tuple[State, Event], State] = {
    (S.PROPOSED, E.GATES_PASSED): S.AUTHORIZED,
    (S.PROPOSED, E.GATES_HELD): S.HELD,
    (S.HELD, E.HOLD_RELEASED): S.AUTHORIZED,
    (S.HELD, E.HOLD_REJECTED): S.BLOCKED,
    (S.HELD, E.QUARANTINE): S.QUARANTINED,
    (S.AUTHORIZED, E.ATTEMPT_STARTED): S.IN_FLIGHT,
    (S.AUTHORIZED, E.GATES_BLOCKED): S.BLOCKED,
    # Nothing was sent under this authorisation: the mandate it was judged under was replaced (ADR 0005).
    (S.AUTHORIZED, E.AUTHORIZATION_WITHDRAWN): S.CONFIRMED_NOT_APPLIED,
    # A retry withdrawn before it was sent (ADR 0026): the absence that authorized it may have been read early — for
    # a keyed refund it is proved only by the retry's own answer — so the earlier attempt is reconciled again.
    (S.AUTHORIZED, E.RETRY_WITHDRAWN): S.UNKNOWN,
    (S.IN_FLIGHT, E.RAIL_APPLIED): S.APPLIED,
    (S.IN_FLIGHT, E.RAIL_REJECTED): S.FAILED_TERMINAL,
    (S.IN_FLIGHT, E.RAIL_AMBIGUOUS): S.UNKNOWN,
    (S.IN_FLIGHT, E.LEASE_EXPIRED): S.UNKNOWN,
    (S.UNKNOWN, E.RECONCILE_STARTED): S.RECONCILING,
    (S.UNKNOWN, E.QUARANTINE): S.QUARANTINED,
    (S.RECONCILING, E.RECONCILE_FOUND_APPLIED): S.APPLIED,
    (S.RECONCILING, E.RECONCILE_CONFIRMED_ABSENT): S.CONFIRMED_NOT_APPLIED,
    (S.RECONCILING, E.RECONCILE_INCONCLUSIVE): S.UNKNOWN,
    (S.RECONCILING, E.QUARANTINE): S.QUARANTINED,
    # A retry the rail refused definitively, and the stamp is absent after the list ran out: a true failure.
    (S.RECONCILING, E.RECONCILE_CONFIRMED_REJECTED): S.FAILED_TERMINAL,
    # A superseded attempt's answer carried our stamp: evidence of an apply is never outvoted by a later
    # "absent" (ADR 0005). Not from IN_FLIGHT (that attempt's own answer is pending) nor QUARANTINED
    # (a person decides there, and sees the evidence on the attempt row).
    (S.AUTHORIZED, E.EARLIER_ATTEMPT_APPLIED): S.APPLIED,
    (S.UNKNOWN, E.EARLIER_ATTEMPT_APPLIED): S.APPLIED,
    (S.RECONCILING, E.EARLIER_ATTEMPT_APPLIED): S.APPLIED,
    (S.CONFIRMED_NOT_APPLIED, E.EARLIER_ATTEMPT_APPLIED): S.APPLIED,
    (S.FAILED_TERMINAL, E.EARLIER_ATTEMPT_APPLIED): S.APPLIED,
    # A signed webhook showed an entity with our stamp and our terms (ADR 0027): the same evidence of presence as a
    # kept answer, from the same states, and never read the other way (no webhook is evidence of absence).
    (S.AUTHORIZED, E.WEBHOOK_APPLIED): S.APPLIED,
    (S.UNKNOWN, E.WEBHOOK_APPLIED): S.APPLIED,
    (S.RECONCILING, E.WEBHOOK_APPLIED): S.APPLIED,
    (S.CONFIRMED_NOT_APPLIED, E.WEBHOOK_APPLIED): S.APPLIED,
    (S.FAILED_TERMINAL, E.WEBHOOK_APPLIED): S.APPLIED,
    # An entity carries our stamp but not our terms (another payment, amount or currency): something moved under
    # our identity, so neither APPLIED nor a retry is safe; a person decides (ADR 0016). From the attempt's own
    # answer (IN_FLIGHT, fenced like any outcome), a list match (RECONCILING) and a kept answer (the states
    # EARLIER_ATTEMPT_APPLIED leaves).
    (S.IN_FLIGHT, E.TERMS_MISMATCH): S.QUARANTINED,
    (S.AUTHORIZED, E.TERMS_MISMATCH): S.QUARANTINED,
    (S.UNKNOWN, E.TERMS_MISMATCH): S.QUARANTINED,
    (S.RECONCILING, E.TERMS_MISMATCH): S.QUARANTINED,
    (S.CONFIRMED_NOT_APPLIED, E.TERMS_MISMATCH): S.QUARANTINED,
    (S.FAILED_TERMINAL, E.TERMS_MISMATCH): S.QUARANTINED,
    (S.CONFIRMED_NOT_APPLIED, E.RETRY_AUTHORIZED): S.AUTHORIZED,
    (S.CONFIRMED_NOT_APPLIED, E.REOPENED): S.AUTHORIZED,
    (S.FAILED_TERMINAL, E.REOPENED): S.AUTHORIZED,
    # The repeat of a not-applied call judged afresh and held for a person (ADR 0024): nothing is out on the rail
    # for it, and the release re-asserts the limits like any other.
    (S.CONFIRMED_NOT_APPLIED, E.GATES_HELD): S.HELD,
    (S.FAILED_TERMINAL, E.GATES_HELD): S.HELD,
    # A ledger restored from a replica that may lag the lost primary (ADR 0029): what the replica shows in motion may
    # have been sent, or answered, in the lost tail. Only the rail's stamp can say; the reconciler reads it.
    (S.AUTHORIZED, E.RESTORED_UNSETTLED): S.UNKNOWN,
    (S.IN_FLIGHT, E.RESTORED_UNSETTLED): S.UNKNOWN,
    (S.RECONCILING, E.RESTORED_UNSETTLED): S.UNKNOWN,
    # The restore's read of the rail found our stamp on our terms (ADR 0029): an entity the ledger never knew (its
    # intent is recorded now, PROPOSED in the same transaction), or one the lost tail made for an intent the replica
    # shows held or not applied (a hold released, a refusal reopened, then sent). Evidence of presence, as ever.
    (S.PROPOSED, E.RECOVERED_FROM_RAIL): S.APPLIED,
    (S.HELD, E.RECOVERED_FROM_RAIL): S.APPLIED,
    (S.CONFIRMED_NOT_APPLIED, E.RECOVERED_FROM_RAIL): S.APPLIED,
    (S.FAILED_TERMINAL, E.RECOVERED_FROM_RAIL): S.APPLIED,
    (S.QUARANTINED, E.OPERATOR_RESOLVED_APPLIED): S.APPLIED,
    (S.QUARANTINED, E.OPERATOR_RESOLVED_NOT_APPLIED): S.CONFIRMED_NOT_APPLIED,
}

ABSORBING: frozenset[State] = frozenset({S.APPLIED, S.BLOCKED})

# States whose money may still move: counted against refundable ceilings and limits (G2, G3).
MAY_MOVE_MONEY: frozenset[State] = frozenset({S.AUTHORIZED, S.IN_FLIGHT, S.UNKNOWN, S.RECONCILING})

# States counted against G3 windows and fee budgets: applied, or possibly moving money later.
COUNTS_AGAINST_LIMITS: frozenset[State] = MAY_MOVE_MONEY | {
    S.APPLIED, S.HELD, S.CONFIRMED_NOT_APPLIED, S.QUARANTINED,
}  # fmt: skip

# States that need nothing more from the rail.
SETTLED: frozenset[State] = frozenset({S.APPLIED, S.BLOCKED, S.FAILED_TERMINAL})
UNSETTLED: frozenset[State] = frozenset(State) - SETTLED


def unsettled_at(state: State, first_seen_at: int, updated_at: int, at_ms: int, clock_skew_ms: int) -> bool:
    """Whether an intent was unsettled, or not yet admitted, at *at_ms* (ADR 0009: a settlement repeated then is
    that intent, however far past the window's grace). An intent settled now was settled at *at_ms* only if its
    last transition came before it: only transitions move updated_at. The one case this overstates — a
    FAILED_TERMINAL reopened and failed again, or proved APPLIED by an earlier attempt's evidence, after
    *at_ms* — errs towards the same operation, the safe direction (a false merge delays money, a false split
    pays twice).

    *at_ms* is the ingress's clock (a call's received_at_ms); first_seen_at and updated_at are the clocks of the
    rail worker and the reconciler that wrote them, which may read up to *clock_skew_ms* behind it
    (INTERLOCK_CLOCK_SKEW_MS). An admission or a settling stamped that much before *at_ms* may have come after it
    (finding F8, ADR 0032): it counts as after, the same safe direction."""
    since = at_ms - clock_skew_ms
    return first_seen_at >= since or state in UNSETTLED or updated_at >= since


OPERATOR_EVENTS: frozenset[Event] = frozenset({E.OPERATOR_RESOLVED_APPLIED, E.OPERATOR_RESOLVED_NOT_APPLIED})

# Re-entries into AUTHORIZED after the first admission: each must carry a fresh re-assertion of the mandate,
# G2's per-call range and G3, made in the same transaction (ledger.limits.reassert; transition() checks).
REAUTHORIZING_EVENTS: frozenset[Event] = frozenset({E.HOLD_RELEASED, E.RETRY_AUTHORIZED, E.REOPENED})


def next_state(state: State | str, event: Event | str) -> State | None:
    """The state *event* leads to from *state*, or None when the table has no such edge."""
    try:
        return TRANSITIONS.get((State(state), Event(event)))
    except ValueError:
        return None
