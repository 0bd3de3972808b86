"""Execute an AUTHORIZED intent (SPEC §8 steps 3-5) under the send-side rule of ADR 0005.

Inside one BEGIN IMMEDIATE, with `now` read only once the write lock is held: renew this worker's lease
(refused when it was superseded or has already expired), consult every earlier attempt's evidence (a
stamped entity settles the intent as APPLIED instead of sending again), re-check the mandate (G1), and
move ATTEMPT_STARTED → IN_FLIGHT with a row lease. COMMIT (fsync: I2). Then a request may leave only
while both the worker's lease and the row's lease outlive the moment it leaves plus the call's total
deadline; the check is repeated by the rail client immediately before the first byte is written
(rails.deadline.send_window). The outcome write is fenced on (lease_epoch, attempt_seq); a superseded
worker's answer is kept as evidence and, when it carries our stamp, settles the intent. Either write is retried
until it is durable; while it is not, this worker sends nothing new (rail_worker.evidence).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from interlock import clock
from interlock.clock import now_ms
from interlock.errors import IllegalTransition, StaleLease
from interlock.failpoints import arm, failpoint
from interlock.messages import Outcome, Trace, trace_now
from interlock.sik import idempotency_key_for, receipt_for, stamp_notes
from ledger import audit, intents, leases
from ledger.intents import Intent
from ledger.queries import PAYOUT_TOOL
from ledger.states import Event, State
from ledger.views import outcome_from_intent
from rail_worker.classify import Classified, classify_entity, classify_error
from rail_worker.evidence import evidence_bound_ms
from rail_worker.runtime import RailRuntime
from rails.deadline import send_window
from rails.razorpay import RailError

logger = logging.getLogger(__name__)

T = TypeVar("T")

DURING_CALL_DELAY_MS = 5
# A failing write of the rail's answer is retried with pauses doubling from the first to the last, without end.
FIRST_PAUSE_S = 0.05
MAX_PAUSE_S = 1.0


@dataclass(frozen=True, slots=True)
class Started:
    """An attempt whose IN_FLIGHT row is committed: what the call needs once it leaves the transaction."""

    intent: Intent
    request: dict[str, Any]
    lease_epoch: int
    request_id: str | None
    leased_at: float  # the monotonic instant its row lease was counted from (no later than the commit)
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
    if rt.unrecorded.is_set():
        # An answer this worker holds is not on disk yet: nothing new starts until it is (the intent stays
        # AUTHORIZED; the reconciler hands it over again).
        logger.critical("intent %s not started: this rail worker holds unrecorded rail answers %s", sik,
                        rt.unrecorded.held())  # fmt: skip
        return None
    failpoint("rail.before_wal")
    begun = rt.write(lambda conn: _begin(rt, conn, merchant_id, sik, request_id=request_id))
    if isinstance(begun, Started) and trace is not None:
        begun.trace.update(trace)
    return begun


def begin_in(rt: RailRuntime, conn: sqlite3.Connection, intent: Intent, *,
             request_id: str | None) -> Started | Outcome | None:  # fmt: skip
    """`begin_attempt`'s transaction, inside one already open — the admission that has just authorized *intent* —
    so the two share a commit (ADR 0011). It runs in a savepoint of its own: when it cannot start there (an
    answer this worker holds is not on disk, or the start raised, e.g. StaleLease) it rolls back to that savepoint,
    the admission commits alone (AUTHORIZED), and it returns None: the caller then starts the attempt with
    begin_attempt, in a transaction of its own. If SQLite itself rolled the whole transaction back (an I/O
    error, a full disk), the error goes up and nothing of the admission commits either."""
    if rt.unrecorded.is_set():
        return None  # begin_attempt says why, and starts nothing either
    failpoint("rail.before_wal")
    conn.execute("SAVEPOINT attempt_start")
    try:
        begun = _begin(rt, conn, intent.merchant_id, intent.sik, request_id=request_id)
    except Exception as exc:
        if not conn.in_transaction:
            raise  # the whole transaction is gone, the admission with it: the writer reports this error
        conn.execute("ROLLBACK TO attempt_start")
        conn.execute("RELEASE attempt_start")
        logger.warning("intent %s: the attempt did not start with its admission (%s: %s); it starts on its own",
                       intent.sik, type(exc).__name__, exc)  # fmt: skip
        return None
    conn.execute("RELEASE attempt_start")
    return begun


def _begin(rt: RailRuntime, conn: sqlite3.Connection, merchant_id: str, sik: str, *,
           request_id: str | None) -> Started | Outcome | None:  # fmt: skip
    now = now_ms()  # read under the write lock: a wait for the lock must not age the leases we write
    leased_at = clock.monotonic()
    # Fence and renew in one step: a superseded or already expired lease starts no attempt.
    lease = leases.heartbeat(conn, rt.current_lease(), now=now, ttl_ms=rt.settings.lease_ttl_ms)
    rt.lease = lease
    intent = intents.require_intent(conn, merchant_id, sik)
    if intent.state is not State.AUTHORIZED:
        # Someone already executed it (a redelivered job): report, never call again.
        return outcome_from_intent(intent, request_id=request_id, replayed=True) if request_id else None
    settled = intents.settle_from_evidence(conn, merchant_id, sik, now=now, actor=rt.owner)
    if settled is not None:
        # An earlier attempt's answer carried our stamp: it applied (or, on other terms, QUARANTINED for a person).
        # Sending again would pay twice.
        logger.warning("intent %s: attempt evidence settles it %s; not sending again", sik, settled.state)
        return outcome_from_intent(settled, request_id=request_id, replayed=False) if request_id else None
    withdrawn = _mandate_withdrawn(rt, conn, intent, now)
    if withdrawn is not None:
        return outcome_from_intent(withdrawn, request_id=request_id, replayed=False) if request_id else None
    request = rail_request(intent, refusals=intents.refused_attempts(conn, merchant_id, sik),
                           owner=intent.attempt_seq == 0 or not intents.sent_without_owner(conn, merchant_id, sik))
    intent = intents.start_attempt(
        conn, merchant_id, sik, now=now, lease_owner=rt.owner, lease_epoch=lease.epoch,
        lease_expires_at=now + rt.settings.lease_ttl_ms, request=request,
    )  # fmt: skip
    return Started(intent, request, lease.epoch, request_id, leased_at)


def complete(rt: RailRuntime, started: Started) -> Outcome | None:
    """The call and its record: sent only inside the send window of ADR 0005, recorded fenced."""
    intent, request, trace = started.intent, started.request, started.trace
    # Committed: the IN_FLIGHT row is on disk before any byte goes to the rail (I2).
    failpoint("rail.after_wal_before_call")
    send_by, wall_until = _send_by(rt, started)
    late_ms = int((clock.monotonic() - send_by) * 1000)
    sent_at: int | None = None
    if rt.send_stop.is_set() or late_ms >= 0:
        # Paused or starved since the commit, or the lease is gone: the row may already be someone else's to
        # settle, and a request leaving now could race their retry. Or an answer this worker holds is not on disk:
        # nothing new leaves until it is. Nothing is sent; the reconciler settles it.
        detail: dict[str, Any] = {"late_ms": late_ms, "lease_lost": rt.lease_lost.is_set()}
        if rt.unrecorded.is_set():
            detail["unrecorded_answers"] = True
        result = Classified(Event.RAIL_AMBIGUOUS, "NOT_SENT", reason_code="RAIL_NOT_SENT_STALE", detail=detail)
    else:
        trace["request_sent"] = trace_now()
        sent_at = now_ms()  # on the ledger's clock: a settlement may land until this plus the deadline (ADR 0010)
        with send_window(send_by, wall_until_ms=wall_until, wall_clock=now_ms, lost=rt.send_stop):
            result = call_rail(rt, intent, request)
        trace["answer_received"] = trace_now()
    failpoint("rail.after_call_before_commit")
    try:
        recorded = _record_until_written(rt, intent, result, started.lease_epoch, sent_at)
    except (StaleLease, IllegalTransition) as exc:
        logger.error("outcome of %s attempt %d refused (fenced): %s", intent.sik, intent.attempt_seq, exc)
        record_fenced(rt, intent, result, sent_at)
        return None
    finally:
        # Held from the first failed write of this answer (fenced or not) until it committed: sending resumes.
        rt.release_unrecorded((intent.merchant_id, intent.sik, intent.attempt_seq))
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


def _send_by(rt: RailRuntime, started: Started) -> tuple[float, int]:
    """When this attempt's request must have left: both the worker's lease and the row's lease must outlive
    the send plus the call's total deadline (ADR 0005). Returned as a monotonic instant (a later wall-clock
    step cannot stretch it) and as the wall-clock instant the standby and the reconciler judge by (a step or
    a suspend that the monotonic clock does not see still closes it). The monotonic instant is never later
    than one TTL less the deadline after the row's lease began: a backward step of the wall clock since the
    commit cannot stretch it either (the reconciler counts its wait from no earlier than that, ADR 0023)."""
    intent = started.intent
    wall, mono = now_ms(), clock.monotonic()
    assert intent.lease_expires_at is not None
    deadline = rt.settings.rail_timeout_ms
    until = min(rt.current_lease().expires_at, intent.lease_expires_at) - deadline
    row_by = started.leased_at + (rt.settings.lease_ttl_ms - deadline) / 1000
    return min(mono + (until - wall) / 1000, row_by), until


def _mandate_withdrawn(rt: RailRuntime, conn: Any, intent: Intent, now: int) -> Intent | None:
    """G1 again at the last moment: a mandate replaced, expired or no longer granting the tool stops an
    AUTHORIZED intent (a first attempt or a retry) before anything is sent. Returns the stopped intent."""
    mandate = rt.mandates.get(intent.agent_id)
    if mandate is not None and rt.mandates.hash_of(intent.agent_id) == intent.mandate_hash:
        grant = mandate.grant(intent.tool)
        if mandate.is_active(now) and grant is not None:
            return None
        reason = "G1_MANDATE_EXPIRED" if not mandate.is_active(now) else "G1_TOOL_NOT_GRANTED"
        # A first attempt is refused for good. A retry is withdrawn instead (below): BLOCKED is absorbing, and a
        # superseded attempt's late stamped answer must still be able to settle it (ADR 0005).
        event = Event.GATES_BLOCKED
    else:
        # Replaced (or removed): nothing was sent under this authorisation. The agent's repeat is judged afresh
        # under the mandate configured now and may reopen the intent.
        reason, event = "G1_MANDATE_CHANGED", Event.AUTHORIZATION_WITHDRAWN
    if intent.attempt_seq > 0:
        # A retry: the reconciler authorized it on a list that did not show the earlier attempt, and that absence
        # is proved only once the retry's own answer comes (a keyed refund's list may lag). With no retry, the
        # earlier attempt is reconciled again, as UNKNOWN (ADR 0026).
        event = Event.RETRY_WITHDRAWN
    logger.warning("intent %s not executed: %s", intent.sik, reason)
    return intents.transition(conn, intent.merchant_id, intent.sik, event, now=now, actor=rt.owner,
                              detail={"reason_code": reason, "mandate_hash": intent.mandate_hash},
                              set_fields={"reason_code": reason})  # fmt: skip


def rail_request(intent: Intent, *, refusals: int = 0, owner: bool = True) -> dict[str, Any]:
    """Exactly what goes to the rail. Nothing attempt-specific: a retry must send the same body (SPEC §14). A payout
    carries its key too: the SIK, and after *refusals* definite refusals of earlier attempts the SIK and their
    count (ADR 0028: the rail would answer a reopened payout's first key with the refusal it saved). The notes name
    whose call it is (*owner*), so a restored shard can record the entity under them (ADR 0029); not for the retry
    of an attempt sent before owners were stamped, which must send what it sent."""
    params = intent.params
    notes = stamp_notes(intent.sik, params.get("notes") or {},
                        owner=(intent.merchant_id, intent.agent_id) if owner else None)  # fmt: skip
    if intent.tool == PAYOUT_TOOL:
        payout: dict[str, Any] = {
            "account_number": params["account_number"], "fund_account_id": intent.subject_id,
            "amount": intent.amount_minor, "currency": intent.currency, "mode": params["mode"],
            "purpose": params["purpose"], "queue_if_low_balance": params.get("queue_if_low_balance") is True,
            "reference_id": receipt_for(intent.sik), "narration": params.get("narration"), "notes": notes,
            "idempotency_key": intent.sik if refusals == 0 else f"{intent.sik}-{refusals}",
        }  # fmt: skip
        return payout
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
            return classify_entity(refund, intent.sik, intent)
        if intent.tool == PAYOUT_TOOL:
            return classify_entity(rt.rail.create_payout(**request), intent.sik, intent)
        settlement = rt.rail.create_instant_settlement(
            request["amount"], description=request.get("description"), notes=request["notes"]
        )
        return classify_entity(settlement, intent.sik, intent)
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
                          sent_at: int | None) -> Intent:  # fmt: skip
    """The attempt's outcome, fenced (StaleLease / IllegalTransition go to the caller, who keeps the answer as
    evidence). Any other failure is retried until the write commits (rail_worker.evidence)."""
    return _until_durable(rt, intent, result, "outcome", lambda conn: record(
        rt, conn, intent, result, lease_epoch=lease_epoch, sent_at=sent_at))


def _until_durable(rt: RailRuntime, intent: Intent, result: Classified, what: str,
                   fn: Callable[[sqlite3.Connection], T]) -> T:  # fmt: skip
    """Write the rail's answer, again and again with backoff, until it commits. From the first failure the answer
    is held on the runtime, so that no request leaves this worker until the caller releases it; past the instant
    anyone may act on its absence (evidence_bound_ms) that is said again at CRITICAL. Never given up, not even
    after the lease is lost: the answer is the evidence a standby's retry would be judged by (ADR 0005)."""
    key = (intent.merchant_id, intent.sik, intent.attempt_seq)
    assert intent.lease_expires_at is not None
    bound = evidence_bound_ms(intent.lease_expires_at, rt.settings.rail_timeout_ms,
                              rt.settings.reconcile_min_delay_ms)  # fmt: skip
    pause, overdue = FIRST_PAUSE_S, False
    while True:
        try:
            return rt.write(fn)
        except (StaleLease, IllegalTransition):
            raise
        except Exception as exc:  # noqa: BLE001 - anything else: the answer must not be dropped on the floor
            summary: dict[str, Any] = {"outcome": result.outcome, "rail_entity_id": result.rail_entity_id,
                                       "what": what, "overdue_at_ms": bound, "worker": rt.owner}  # fmt: skip
            now_overdue = not overdue and now_ms() >= bound
            overdue = summary["overdue"] = overdue or now_overdue
            if rt.hold_unrecorded(key, summary):
                logger.critical("rail worker %s STOPS SENDING: the %s of attempt %d of %s (%s %s) could not be "
                                "written (%s); retrying until it is durable", rt.owner, what, intent.attempt_seq,
                                intent.sik, result.outcome, result.rail_entity_id or "", exc)  # fmt: skip
            if now_overdue:
                logger.critical("the %s of attempt %d of %s (%s %s) is still not durable at %d, when the reconciler "
                                "may act on its absence; the rail's answer: %s", what, intent.attempt_seq, intent.sik,
                                result.outcome, result.rail_entity_id or "", bound, result.response)  # fmt: skip
            else:
                logger.warning("writing the %s of attempt %d of %s failed (%s); retrying in %.2fs", what,
                               intent.attempt_seq, intent.sik, exc, pause)  # fmt: skip
            clock.sleep(pause)
            pause = min(pause * 2, MAX_PAUSE_S)


def record(rt: RailRuntime, conn: sqlite3.Connection, intent: Intent, result: Classified, *,
           lease_epoch: int, sent_at: int | None = None) -> Intent:  # fmt: skip
    """The attempt's outcome, fenced on (lease_epoch, attempt_seq): a superseded worker's write is refused."""
    now = now_ms()
    current = intents.require_intent(conn, intent.merchant_id, intent.sik)
    if current.state is not State.IN_FLIGHT:
        # The attempt's own outcome is written only while it is in flight: TERMS_MISMATCH has edges from other
        # states too (a kept answer), and must not let a superseded worker past the fence.
        raise IllegalTransition(intent.sik, current.state, result.event)
    intents.finish_attempt(
        conn, intent.merchant_id, intent.sik, intent.attempt_seq, now=now, outcome=result.outcome,
        rail_entity_id=result.rail_entity_id, http_status=result.http_status, fee_minor=result.fee_minor,
        tax_minor=result.tax_minor, error_code=result.error_code, response=result.response, sent_at=sent_at,
    )  # fmt: skip
    fields: dict[str, Any] = {"reason_code": result.reason_code}
    if result.rail_entity_id is not None and result.event is Event.RAIL_APPLIED:
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
        if result.event in (Event.RAIL_APPLIED, Event.TERMS_MISMATCH):
            # Ours on other terms: QUARANTINED where the state allows it, never retried (ADR 0016).
            intents.settle_from_evidence(conn, intent.merchant_id, intent.sik, now=now, actor=rt.owner)

    # Retried until durable, like an unfenced answer: a retry the reconciler authorized is judged by it.
    _until_durable(rt, intent, result, "fenced outcome", keep)
