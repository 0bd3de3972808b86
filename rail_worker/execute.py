"""Execute an AUTHORIZED intent (SPEC §8 steps 3-5) under the send-side rule of ADR 0005.

Inside one BEGIN IMMEDIATE, with `now` read only once the write lock is held: renew this worker's lease
(refused when it was superseded or has already expired), consult every earlier attempt's evidence (a
stamped entity settles the intent as APPLIED instead of sending again), re-check the mandate (G1), and
move ATTEMPT_STARTED → IN_FLIGHT with a row lease. COMMIT (fsync: I2). Then a request may leave only
while both the worker's lease and the row's lease outlive the moment it leaves plus the call's total
deadline; the check is repeated by the rail client immediately before the first byte is written
(rails.deadline.send_window). The outcome write is fenced on (lease_epoch, attempt_seq); a superseded
worker's answer is kept as evidence and, when it carries our stamp, settles the intent.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

from interlock.clock import now_ms
from interlock.errors import IllegalTransition, StaleLease
from interlock.failpoints import arm, failpoint
from interlock.messages import Outcome, Trace, trace_now
from interlock.sik import idempotency_key_for, receipt_for, stamp_notes
from ledger import audit, intents, leases
from ledger.intents import Intent
from ledger.states import Event, State
from ledger.views import outcome_from_intent
from rail_worker.classify import Classified, classify_entity, classify_error
from rail_worker.runtime import RailRuntime
from rails.deadline import send_window
from rails.razorpay import RailError

logger = logging.getLogger(__name__)

DURING_CALL_DELAY_MS = 5
# How long (in lease TTLs) a failing outcome write is retried before the answer is left to the reconciler.
RECORD_RETRY_TTLS = 3


@dataclass(frozen=True, slots=True)
class Started:
    """An attempt whose IN_FLIGHT row is committed: what the call needs once it leaves the transaction."""

    intent: Intent
    request: dict[str, Any]
    lease_epoch: int
    request_id: str | None
    trace: Trace = field(default_factory=dict)


def execute(rt: RailRuntime, merchant_id: str, sik: str, *, request_id: str | None,
            trace: Trace | None = None) -> Outcome | None:  # fmt: skip
    """Run one attempt if the intent is AUTHORIZED; returns the Outcome to publish (None: nothing to say)."""
    begun = begin_attempt(rt, merchant_id, sik, request_id=request_id, trace=trace)
    return complete(rt, begun) if isinstance(begun, Started) else begun


def begin_attempt(rt: RailRuntime, merchant_id: str, sik: str, *, request_id: str | None,
                  trace: Trace | None = None) -> Started | Outcome | None:  # fmt: skip
    """The transaction before the call: ATTEMPT_STARTED → IN_FLIGHT committed (I2), or the Outcome to answer
    with when there is nothing to send."""
    failpoint("rail.before_wal")
    begun = rt.write(lambda conn: _begin(rt, conn, merchant_id, sik, request_id=request_id))
    if isinstance(begun, Started) and trace is not None:
        begun.trace.update(trace)
    return begun


def _begin(rt: RailRuntime, conn: sqlite3.Connection, merchant_id: str, sik: str, *,
           request_id: str | None) -> Started | Outcome | None:  # fmt: skip
    now = now_ms()  # read under the write lock: a wait for the lock must not age the leases we write
    # Fence and renew in one step: a superseded or already expired lease starts no attempt.
    lease = leases.heartbeat(conn, rt.current_lease(), now=now, ttl_ms=rt.settings.lease_ttl_ms)
    rt.lease = lease
    intent = intents.require_intent(conn, merchant_id, sik)
    if intent.state is not State.AUTHORIZED:
        # Someone already executed it (a redelivered job): report, never call again.
        return outcome_from_intent(intent, request_id=request_id, replayed=True) if request_id else None
    settled = intents.settle_from_evidence(conn, merchant_id, sik, now=now, actor=rt.owner)
    if settled is not None:
        # An earlier attempt's answer carried our stamp: it applied. Sending again would pay twice.
        logger.warning("intent %s: attempt evidence shows %s applied; not sending again", sik,
                       settled.rail_entity_id)  # fmt: skip
        return outcome_from_intent(settled, request_id=request_id, replayed=False) if request_id else None
    withdrawn = _mandate_withdrawn(rt, conn, intent, now)
    if withdrawn is not None:
        return outcome_from_intent(withdrawn, request_id=request_id, replayed=False) if request_id else None
    request = rail_request(intent)
    intent = intents.start_attempt(
        conn, merchant_id, sik, now=now, lease_owner=rt.owner, lease_epoch=lease.epoch,
        lease_expires_at=now + rt.settings.lease_ttl_ms, request=request,
    )  # fmt: skip
    return Started(intent, request, lease.epoch, request_id)


def complete(rt: RailRuntime, started: Started) -> Outcome | None:
    """The call and its record: sent only inside the send window of ADR 0005, recorded fenced."""
    intent, request, trace = started.intent, started.request, started.trace
    # Committed: the IN_FLIGHT row is on disk before any byte goes to the rail (I2).
    failpoint("rail.after_wal_before_call")
    send_by, wall_until = _send_by(rt, intent)
    late_ms = int((time.monotonic() - send_by) * 1000)
    sent_at: int | None = None
    if rt.lease_lost.is_set() or late_ms >= 0:
        # Paused or starved since the commit, or the lease is gone: the row may already be someone else's to
        # settle, and a request leaving now could race their retry. Nothing is sent; the reconciler settles it.
        result = Classified(Event.RAIL_AMBIGUOUS, "NOT_SENT", reason_code="RAIL_NOT_SENT_STALE",
                            detail={"late_ms": late_ms, "lease_lost": rt.lease_lost.is_set()})  # fmt: skip
    else:
        trace["request_sent"] = trace_now()
        sent_at = now_ms()  # on the ledger's clock: a settlement may land until this plus the deadline (ADR 0010)
        with send_window(send_by, wall_until_ms=wall_until, wall_clock=now_ms, lost=rt.lease_lost):
            result = call_rail(rt, intent, request)
        trace["answer_received"] = trace_now()
    failpoint("rail.after_call_before_commit")
    try:
        recorded = _record_until_written(rt, intent, result, started.lease_epoch, sent_at)
    except (StaleLease, IllegalTransition) as exc:
        logger.error("outcome of %s attempt %d refused (fenced): %s", intent.sik, intent.attempt_seq, exc)
        record_fenced(rt, intent, result, sent_at)
        return None
    if recorded is None:
        return None
    intent = recorded
    trace["recorded"] = trace_now()
    failpoint("rail.after_commit_before_ack")
    if intent.state is State.UNKNOWN:
        rt.hint_reconciler(intent.merchant_id, intent.sik)
    logger.info("intent %s attempt %d: %s %s", intent.sik, intent.attempt_seq, intent.state,
                intent.rail_entity_id or "")  # fmt: skip
    if started.request_id is None:
        return None
    return outcome_from_intent(intent, request_id=started.request_id, replayed=False).model_copy(
        update={"trace": trace})


def _send_by(rt: RailRuntime, intent: Intent) -> tuple[float, int]:
    """When this attempt's request must have left: both the worker's lease and the row's lease must outlive
    the send plus the call's total deadline (ADR 0005). Returned as a monotonic instant (a later wall-clock
    step cannot stretch it) and as the wall-clock instant the standby and the reconciler judge by (a step or
    a suspend that the monotonic clock does not see still closes it)."""
    wall, mono = now_ms(), time.monotonic()
    assert intent.lease_expires_at is not None
    until = min(rt.current_lease().expires_at, intent.lease_expires_at) - rt.settings.rail_timeout_ms
    return mono + (until - wall) / 1000, until


def _mandate_withdrawn(rt: RailRuntime, conn: Any, intent: Intent, now: int) -> Intent | None:
    """G1 again at the last moment: a mandate replaced, expired or no longer granting the tool stops an
    AUTHORIZED intent (a first attempt or a retry) before anything is sent. Returns the stopped intent."""
    mandate = rt.mandates.get(intent.agent_id)
    if mandate is not None and rt.mandates.hash_of(intent.agent_id) == intent.mandate_hash:
        grant = mandate.grant(intent.tool)
        if mandate.is_active(now) and grant is not None:
            return None
        reason = "G1_MANDATE_EXPIRED" if not mandate.is_active(now) else "G1_TOOL_NOT_GRANTED"
        # A first attempt is refused for good; a retry is withdrawn instead, because BLOCKED is absorbing and a
        # superseded attempt's late stamped answer must still be able to settle it (ADR 0005).
        event = Event.GATES_BLOCKED if intent.attempt_seq == 0 else Event.AUTHORIZATION_WITHDRAWN
    else:
        # Replaced (or removed): nothing was sent under this authorisation. The agent's repeat is judged afresh
        # under the mandate configured now and may reopen the intent.
        reason, event = "G1_MANDATE_CHANGED", Event.AUTHORIZATION_WITHDRAWN
    logger.warning("intent %s not executed: %s", intent.sik, reason)
    return intents.transition(conn, intent.merchant_id, intent.sik, event, now=now, actor=rt.owner,
                              detail={"reason_code": reason, "mandate_hash": intent.mandate_hash},
                              set_fields={"reason_code": reason})  # fmt: skip


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
        return classify_error(exc, attempt_seq=intent.attempt_seq)
    except Exception as exc:  # noqa: BLE001 - after the request may have left, anything unexpected is ambiguous
        logger.exception("unexpected error during the rail call of %s", intent.sik)
        return Classified(Event.RAIL_AMBIGUOUS, "AMBIGUOUS", reason_code="RAIL_AMBIGUOUS",
                          detail={"error": f"{type(exc).__name__}: {exc}"[:500]})  # fmt: skip
    finally:
        if timer is not None:
            timer.join()  # the during_call kill lands while the request is out, never after we record


def _record_until_written(rt: RailRuntime, intent: Intent, result: Classified, lease_epoch: int,
                          sent_at: int | None) -> Intent | None:  # fmt: skip
    """The rail's answer is the only first-hand evidence of what happened: a write that fails for any reason
    but the fence (a busy or failing disk, the writer between batches) is tried again, with backoff, for as
    long as this worker may still be the one to record it. None when it never could be written."""
    give_up = time.monotonic() + RECORD_RETRY_TTLS * rt.settings.lease_ttl_ms / 1000
    pause = 0.05
    while True:
        try:
            return rt.write(lambda conn: record(rt, conn, intent, result, lease_epoch=lease_epoch, sent_at=sent_at))
        except (StaleLease, IllegalTransition):
            raise
        except Exception as exc:  # noqa: BLE001 - anything else: the answer must not be dropped on the floor
            if rt.lease_lost.is_set() or time.monotonic() > give_up:
                logger.critical("could not record attempt %d of %s (%s %s): %s; the reconciler must find it by "
                                "its stamp", intent.attempt_seq, intent.sik, result.outcome,
                                result.rail_entity_id or "", exc)  # fmt: skip
                return None
            logger.warning("recording attempt %d of %s failed (%s); retrying in %.2fs", intent.attempt_seq,
                           intent.sik, exc, pause)  # fmt: skip
            time.sleep(pause)
            pause = min(pause * 2, 1.0)


def record(rt: RailRuntime, conn: sqlite3.Connection, intent: Intent, result: Classified, *,
           lease_epoch: int, sent_at: int | None = None) -> Intent:  # fmt: skip
    """The attempt's outcome, fenced on (lease_epoch, attempt_seq): a superseded worker's write is refused."""
    now = now_ms()
    intents.finish_attempt(
        conn, intent.merchant_id, intent.sik, intent.attempt_seq, now=now, outcome=result.outcome,
        rail_entity_id=result.rail_entity_id, http_status=result.http_status, fee_minor=result.fee_minor,
        tax_minor=result.tax_minor, error_code=result.error_code, response=result.response, sent_at=sent_at,
    )  # fmt: skip
    fields: dict[str, Any] = {"reason_code": result.reason_code}
    if result.rail_entity_id is not None:
        fields["rail_entity_id"] = result.rail_entity_id
    recorded = intents.transition(
        conn, intent.merchant_id, intent.sik, result.event, now=now, actor=rt.owner,
        detail={"attempt_seq": intent.attempt_seq, **result.detail}, expect_epoch=lease_epoch,
        expect_attempt_seq=intent.attempt_seq, set_fields=fields,
    )  # fmt: skip
    earlier = intents.applied_evidence(conn, intent.merchant_id, intent.sik)
    if result.event is Event.RAIL_APPLIED and earlier is not None and earlier[1] != result.rail_entity_id:
        # Must not happen under ADR 0005; if it does, say so loudly and on the chain, for a person to reverse.
        logger.critical("intent %s has two stamped entities: %s (attempt %d) and %s (attempt %d)", intent.sik,
                        earlier[1], earlier[0], result.rail_entity_id, intent.attempt_seq)  # fmt: skip
        audit.append(conn, "DUPLICATE_ENTITIES", {
            "merchant_id": intent.merchant_id, "sik": intent.sik, "entities": [earlier[1], result.rail_entity_id],
        }, now)  # fmt: skip
    return recorded


def record_fenced(rt: RailRuntime, intent: Intent, result: Classified, sent_at: int | None = None) -> None:
    """A superseded worker may not write its outcome, but what the rail told it is evidence: keep it on the
    attempt row and in the audit log. An answer that carries our stamp settles the intent as APPLIED if it
    is not in flight again (ADR 0005): a later "absent" from a list read must never outvote it."""

    def keep(conn: sqlite3.Connection) -> None:
        now = now_ms()
        intents.finish_attempt(
            conn, intent.merchant_id, intent.sik, intent.attempt_seq, now=now, outcome=f"FENCED_{result.outcome}",
            rail_entity_id=result.rail_entity_id, http_status=result.http_status, fee_minor=result.fee_minor,
            tax_minor=result.tax_minor, error_code=result.error_code, response=result.response, sent_at=sent_at,
        )  # fmt: skip
        audit.append(conn, "FENCED_OUTCOME", {
            "merchant_id": intent.merchant_id, "sik": intent.sik, "attempt_seq": intent.attempt_seq,
            "outcome": result.outcome, "rail_entity_id": result.rail_entity_id, "worker": rt.owner,
        }, now)  # fmt: skip
        if result.event is Event.RAIL_APPLIED:
            intents.settle_from_evidence(conn, intent.merchant_id, intent.sik, now=now, actor=rt.owner)

    try:
        rt.write(keep)
    except Exception:  # noqa: BLE001 - best effort: the reconciler finds the entity by its stamp regardless
        logger.exception("could not keep the fenced outcome of %s", intent.sik)
