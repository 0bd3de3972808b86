"""Classify the rail's answer to a money call (SPEC §8 step 4).

Our stamp in a 2xx body, on an entity whose terms (payment, amount, currency) are the intent's → APPLIED;
our stamp on other terms → TERMS_MISMATCH (QUARANTINED, for a person: ADR 0016). A 2xx without our stamp
is a replayed or foreign response and must never be recorded as ours → UNKNOWN. A definitive 4xx →
FAILED_TERMINAL. Everything else — 5xx, timeout, reset, 409 in progress, nothing sent — → UNKNOWN, for
the reconciler to settle by reading the rail. A rejection that says our receipt or idempotency key is
already in use means an earlier attempt reached the rail: that too is UNKNOWN, not a failure. So is any
definitive 4xx on a retry (attempt 2 or later): "fully refunded", "exceeds captured" or "insufficient
balance" may be the rail describing our own first attempt after a false "not applied" — the reconciler
reads the rail by stamp, and only a confirmed absence makes the refusal terminal (ADR 0005).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ledger.intents import Intent
from ledger.states import Event
from rails.models import Payout, Refund, Settlement
from rails.razorpay import RailError, RailErrorKind

# The attempt-row outcome of a definitive refusal of a retry: UNKNOWN until the stamp is confirmed absent.
REJECTED_AFTER_RETRY = "REJECTED_AFTER_RETRY"
# The attempt-row outcome of a stamped answer with other terms than the intent's (ADR 0016).
TERMS_MISMATCH = "TERMS_MISMATCH"
# The reason code of a refusal naming our receipt or idempotency key as already used: the rail holds an entity of
# ours (a list that does not show it yet lags; it is not evidence of absence: finding F2, docs/simulation.md).
KEY_IN_USE = "RAIL_KEY_IN_USE"


@dataclass(frozen=True, slots=True)
class Classified:
    event: Event
    outcome: str  # recorded on the attempt row
    rail_entity_id: str | None = None
    http_status: int | None = None
    error_code: str | None = None
    fee_minor: int | None = None
    tax_minor: int | None = None
    reason_code: str | None = None
    response: Any = None
    detail: dict[str, Any] = field(default_factory=dict)


def classify_entity(entity: Refund | Settlement | Payout, sik: str, intent: Intent | None = None) -> Classified:
    """The rail's 2xx answer to *intent*'s call. Without *intent* only the stamp is judged (a caller with no
    intent to compare terms with); the rail worker always passes it."""
    if not entity.carries_stamp(sik):
        # A 2xx for some other entity (dup_response, a gateway replay): the real one may or may not exist.
        return Classified(Event.RAIL_AMBIGUOUS, "REPLAYED_RESPONSE", http_status=200,
                          reason_code="RAIL_REPLAYED_RESPONSE", response=entity.raw,
                          detail={"foreign_entity_id": entity.id})  # fmt: skip
    differs = intent.mismatch(entity.raw) if intent is not None else None
    if differs is not None:
        # Stamped, so something moved under our identity, but not what we asked: never APPLIED, never retried.
        return Classified(Event.TERMS_MISMATCH, TERMS_MISMATCH, rail_entity_id=entity.id, http_status=200,
                          reason_code="RAIL_TERMS_MISMATCH", response=entity.raw,
                          detail={"rail_entity_id": entity.id, **differs})  # fmt: skip
    # A payout shows its fees from `processing` on; a queued one says 0, which is not yet a charge.
    fee = entity.fees if isinstance(entity, Settlement) or (isinstance(entity, Payout) and entity.fees) else None
    tax = entity.tax if isinstance(entity, Settlement) or (isinstance(entity, Payout) and entity.fees) else None
    return Classified(Event.RAIL_APPLIED, "APPLIED", rail_entity_id=entity.id, http_status=200, fee_minor=fee,
                      tax_minor=tax, response=entity.raw)  # fmt: skip


def classify_error(exc: RailError, *, attempt_seq: int = 1) -> Classified:
    response = exc.body[:2000] if exc.body else None
    if exc.kind is RailErrorKind.REJECTED and not _says_we_were_here(exc):
        detail = {"description": exc.description, "field": exc.field}
        if attempt_seq > 1:
            return Classified(Event.RAIL_AMBIGUOUS, REJECTED_AFTER_RETRY, http_status=exc.http_status,
                              error_code=exc.code, reason_code="RAIL_REJECTED_AFTER_RETRY", response=response,
                              detail=detail)  # fmt: skip
        return Classified(Event.RAIL_REJECTED, "REJECTED", http_status=exc.http_status, error_code=exc.code,
                          reason_code="RAIL_REJECTED", response=response, detail=detail)  # fmt: skip
    if exc.kind is RailErrorKind.REJECTED:
        reason = KEY_IN_USE  # our receipt or key is taken: an earlier attempt of ours reached the rail
    elif exc.kind is RailErrorKind.NOT_SENT:
        reason = "RAIL_NOT_SENT"
    else:
        reason = "RAIL_AMBIGUOUS"
    return Classified(Event.RAIL_AMBIGUOUS, exc.kind.value, http_status=exc.http_status, error_code=exc.code,
                      reason_code=reason, response=response, detail={"error": str(exc)[:500]})  # fmt: skip


def _says_we_were_here(exc: RailError) -> bool:
    text = f"{exc.field or ''} {exc.description or ''}".lower()
    return "receipt" in text or "idempotency" in text
