"""Execute an AUTHORIZED intent (SPEC §8 steps 3-5).

ATTEMPT_STARTED → IN_FLIGHT with a new attempt row and the lease epoch, COMMIT (fsync: I2), and
only then the money call, stamped with the SIK, with a timeout shorter than the lease. The outcome
write is fenced on (lease_epoch, attempt_seq): a superseded worker's write is refused.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from interlock import mutations
from interlock.clock import now_ms
from interlock.errors import IllegalTransition, StaleLease
from interlock.failpoints import arm, failpoint
from interlock.messages import Outcome
from interlock.sik import idempotency_key_for, receipt_for, stamp_notes
from ledger import audit, intents, leases
from ledger.db import transaction
from ledger.intents import Intent
from ledger.states import Event, State
from ledger.views import outcome_from_intent
from rail_worker.classify import Classified, classify_entity, classify_error
from rail_worker.runtime import RailRuntime
from rails.razorpay import RailError

logger = logging.getLogger(__name__)

DURING_CALL_DELAY_MS = 5


def execute(rt: RailRuntime, merchant_id: str, sik: str, *, request_id: str | None) -> Outcome | None:
    """Run one attempt if the intent is AUTHORIZED; returns the Outcome to publish (None: nothing to say)."""
    lease = rt.current_lease()
    failpoint("rail.before_wal")
    now = now_ms()
    with transaction(rt.ledger) as conn:
        leases.assert_holder(conn, lease)  # fence: a superseded worker starts no attempt
        intent = intents.require_intent(conn, merchant_id, sik)
        if intent.state is not State.AUTHORIZED:
            # Someone already executed it (a redelivered job): report, never call again.
            return outcome_from_intent(intent, request_id=request_id, replayed=True) if request_id else None
        request = rail_request(intent)
        intent = intents.start_attempt(
            conn, merchant_id, sik, now=now, lease_owner=rt.owner, lease_epoch=lease.epoch,
            lease_expires_at=now + rt.settings.lease_ttl_ms, request=request,
        )  # fmt: skip
    committed = time.monotonic()
    # Committed: the IN_FLIGHT row is on disk before any byte goes to the rail (I2).
    failpoint("rail.after_wal_before_call")
    if (time.monotonic() - committed) * 1000 >= rt.settings.lease_ttl_ms - rt.settings.rail_timeout_ms:
        # Stalled between the commit and the send (a pause, a starved CPU): the IN_FLIGHT lease may have run
        # out and the reconciler may already treat this attempt as abandoned. Sending now could race a retry.
        result = Classified(Event.RAIL_AMBIGUOUS, "NOT_SENT", reason_code="RAIL_NOT_SENT_STALE",
                            detail={"stalled_ms": int((time.monotonic() - committed) * 1000)})  # fmt: skip
    else:
        result = call_rail(rt, intent, request)
    if result.event is Event.RAIL_AMBIGUOUS and mutations.active("blind_retry"):
        # The defect I3 forbids, for the chaos matrix's self-test: a fresh key, the same money, again.
        request = {**request, "idempotency_key": f"mut_{intent.attempt_seq}_{now_ms()}", "receipt": None}
        result = call_rail(rt, intent, request)
    failpoint("rail.after_call_before_commit")
    try:
        intent = record(rt, intent, result, lease_epoch=lease.epoch)
    except (StaleLease, IllegalTransition) as exc:
        logger.error("outcome of %s attempt %d refused (fenced): %s", sik, intent.attempt_seq, exc)
        record_fenced(rt, intent, result)
        return None
    failpoint("rail.after_commit_before_ack")
    if intent.state is State.UNKNOWN:
        rt.hint_reconciler(merchant_id, sik)
    logger.info("intent %s attempt %d: %s %s", sik, intent.attempt_seq, intent.state, intent.rail_entity_id or "")
    return outcome_from_intent(intent, request_id=request_id, replayed=False) if request_id else None


def rail_request(intent: Intent) -> dict[str, Any]:
    """Exactly what goes to the rail. Nothing attempt-specific: a retry must send the same body (SPEC §14)."""
    params = intent.params
    notes = stamp_notes(intent.sik, params.get("notes") or {})
    if intent.tool == "create_refund":
        request: dict[str, Any] = {
            "payment_id": intent.subject_id, "amount": intent.amount_minor, "notes": notes,
            "receipt": receipt_for(intent.sik), "idempotency_key": idempotency_key_for(intent.sik),
        }  # fmt: skip
        if params.get("speed"):
            request["speed"] = params["speed"]
        return request
    request = {"amount": intent.amount_minor, "notes": notes}
    if params.get("description"):
        request["description"] = params["description"]
    return request


def call_rail(rt: RailRuntime, intent: Intent, request: dict[str, Any]) -> Classified:
    timer = arm("rail.during_call", DURING_CALL_DELAY_MS)
    try:
        if intent.tool == "create_refund":
            refund = rt.rail.create_refund(
                request["payment_id"], request["amount"], speed=request.get("speed"), notes=request["notes"],
                receipt=request["receipt"], idempotency_key=request["idempotency_key"],
            )  # fmt: skip
            return classify_entity(refund, intent.sik)
        settlement = rt.rail.create_instant_settlement(
            request["amount"], description=request.get("description"), notes=request["notes"]
        )
        return classify_entity(settlement, intent.sik)
    except RailError as exc:
        return classify_error(exc)
    except Exception as exc:  # noqa: BLE001 - after the request may have left, anything unexpected is ambiguous
        logger.exception("unexpected error during the rail call of %s", intent.sik)
        return Classified(Event.RAIL_AMBIGUOUS, "AMBIGUOUS", reason_code="RAIL_AMBIGUOUS",
                          detail={"error": f"{type(exc).__name__}: {exc}"[:500]})  # fmt: skip
    finally:
        if timer is not None:
            timer.join()  # the during_call kill lands while the request is out, never after we record


def record(rt: RailRuntime, intent: Intent, result: Classified, *, lease_epoch: int) -> Intent:
    now = now_ms()
    with transaction(rt.ledger) as conn:
        intents.finish_attempt(
            conn, intent.merchant_id, intent.sik, intent.attempt_seq, now=now, outcome=result.outcome,
            rail_entity_id=result.rail_entity_id, http_status=result.http_status, fee_minor=result.fee_minor,
            tax_minor=result.tax_minor, error_code=result.error_code, response=result.response,
        )  # fmt: skip
        fields: dict[str, Any] = {"reason_code": result.reason_code}
        if result.rail_entity_id is not None:
            fields["rail_entity_id"] = result.rail_entity_id
        return intents.transition(
            conn, intent.merchant_id, intent.sik, result.event, now=now, actor=rt.owner,
            detail={"attempt_seq": intent.attempt_seq, **result.detail}, expect_epoch=lease_epoch,
            expect_attempt_seq=intent.attempt_seq, set_fields=fields,
        )  # fmt: skip


def record_fenced(rt: RailRuntime, intent: Intent, result: Classified) -> None:
    """A superseded worker may not change the intent, but what the rail told it is evidence: keep it on
    the attempt row and in the audit log, so an operator (or the reconciler's finding) can be checked."""
    now = now_ms()
    try:
        with transaction(rt.ledger) as conn:
            intents.finish_attempt(
                conn, intent.merchant_id, intent.sik, intent.attempt_seq, now=now, outcome=f"FENCED_{result.outcome}",
                rail_entity_id=result.rail_entity_id, http_status=result.http_status, error_code=result.error_code,
                response=result.response,
            )  # fmt: skip
            audit.append(conn, "FENCED_OUTCOME", {
                "merchant_id": intent.merchant_id, "sik": intent.sik, "attempt_seq": intent.attempt_seq,
                "outcome": result.outcome, "rail_entity_id": result.rail_entity_id, "worker": rt.owner,
            }, now)  # fmt: skip
    except Exception:  # noqa: BLE001 - best effort: the reconciler finds the entity by its stamp regardless
        logger.exception("could not keep the fenced outcome of %s", intent.sik)
