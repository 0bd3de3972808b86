"""Admit a Decision into the ledger in one BEGIN IMMEDIATE (SPEC §8 step 2).

Insert the intent on its primary key (a conflict means this operation exists: answer with it,
replayed), bind or check the operation_ref, re-assert G3 and a bound task's expiry and ceiling against
committed state (authoritative: racing gate workers cannot cross a limit together), record the decision,
apply GATES_PASSED / GATES_HELD (a refusal records the decision only: ADR 0008). A Decision delivered twice is
recorded once (request_id is its key).
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass, replace

from interlock.clock import now_ms
from interlock.errors import KeyConflict
from interlock.mandate import REFUND_TOOL, Mandate
from interlock.messages import CallerAction, Decision, IntentTerms, Outcome, Verdict
from interlock.rail_account import RAIL_ACCOUNT_MISMATCH
from interlock.task import TASK_EXPIRED, TASK_WRONG_AUDIENCE, audience_problem
from ledger import intents, leases
from ledger.intents import Intent
from ledger.limits import check_limits, check_task_ceiling, reassert
from ledger.queries import (
    PAYOUT_TOOL,
    applied_after,
    applied_mark,
    applied_since,
    money_committed_for_subject,
    money_committed_for_tool,
    window_subject,
)
from ledger.states import Event, State
from ledger.views import outcome_from_intent
from rail_worker import grace
from rail_worker.execute import Started, begin_in
from rail_worker.ownership import SHARD_MAP_STALE, SHARD_NOT_OWNER
from rail_worker.runtime import RailRuntime

logger = logging.getLogger(__name__)

OUTCOME_PENDING = "OUTCOME_PENDING"  # as the ingress answers a call with nothing definite yet (SPEC §10)

# A refusal records a decision, never an intent (ADR 0008), so only these two verdicts make one (ADR 0036).
_EVENT_FOR_VERDICT = {Verdict.ALLOW: Event.GATES_PASSED, Verdict.HOLD: Event.GATES_HELD}
# A repeat of these may be reopened by a fresh proposal that passed every gate (SPEC §6).
_REOPENABLE = frozenset({State.FAILED_TERMINAL, State.CONFIRMED_NOT_APPLIED})
# Refused before the rail was read: the agent may repeat the same call once the rail answers.
_TRANSIENT_REASONS = frozenset({"G2_RAIL_UNAVAILABLE"})
G2_STALE_READ = "G2_STALE_RAIL_READ"
# Refused at admission with nothing recorded but the decision: the repeat of the same call is judged afresh.
# G1_MANDATE_CHANGED: the gate judged under a mandate replaced since; the repeat is judged under the one now.
_RETRYABLE_REFUSALS = frozenset({
    G2_STALE_READ, grace.DECISION_EXPIRED, SHARD_NOT_OWNER, SHARD_MAP_STALE, "G1_MANDATE_CHANGED",
})  # fmt: skip


@dataclass(frozen=True, slots=True)
class Admission:
    outcome: Outcome | None  # what to tell the waiting ingress now (None: execute first, then tell)
    execute: Intent | None  # an AUTHORIZED intent to execute now
    # With rt.start_with_admission: the attempt execute.begin_in started in the same transaction (None: not started)
    started: Started | Outcome | None = None


def admit(rt: RailRuntime, decision: Decision) -> Admission:
    """Admit one Decision in its own transaction (grouped with whatever else commits alongside). With
    `rt.start_with_admission`, an admission that authorizes an intent to execute now starts its attempt in that same
    transaction, so the admission and the IN_FLIGHT row share one commit (ADR 0011)."""

    def write(conn: sqlite3.Connection) -> Admission:
        admission = _admit(rt, conn, decision)
        if not rt.start_with_admission or admission.execute is None:
            return admission
        return replace(admission, started=begin_in(rt, conn, admission.execute, request_id=decision.request_id))

    return rt.write(write)


def _admit(rt: RailRuntime, conn: sqlite3.Connection, decision: Decision) -> Admission:
    now = now_ms()  # under the write lock, like every time this worker writes
    # Fence: a superseded or expired rail worker admits nothing (it may not even be the one to execute).
    leases.assert_holder(conn, rt.current_lease(), now=now)
    if (not_owner := _not_this_shards(rt, conn, decision, now)) is not None:
        return not_owner  # first: a redelivered Decision of a merchant this shard does not own is refused again
    if intents.decision_exists(conn, decision.request_id):
        return _redelivered(rt, conn, decision)
    if decision.sik is None or decision.terms is None:
        _record(conn, decision, now, verdict=decision.verdict, reason=decision.reason_code)
        return Admission(_unkeyed(decision), None)
    mandate = rt.mandates.get(decision.agent_id)
    verdict, reason = decision.verdict, decision.reason_code
    if mandate is None:
        verdict, reason = Verdict.BLOCK, "G1_NO_MANDATE"  # none configured for this agent now: nothing to repeat for
    elif rt.mandates.hash_of(decision.agent_id) != decision.mandate_hash:
        # The mandate changed between the gate and here: judge nothing against a stale policy.
        verdict, reason = Verdict.BLOCK, "G1_MANDATE_CHANGED"
    elif not mandate.is_active(now) or mandate.grant(decision.tool) is None:
        # G1 again at admission: a mandate that expired (or stopped granting) since the gate allows nothing.
        verdict = Verdict.BLOCK
        reason = "G1_MANDATE_EXPIRED" if not mandate.is_active(now) else "G1_TOOL_NOT_GRANTED"
    elif rt.mandates.account_problem(mandate) is not None:
        verdict, reason = Verdict.BLOCK, RAIL_ACCOUNT_MISMATCH  # ADR 0021: G1 again, against these credentials
    if verdict is not Verdict.BLOCK and grace.expired(decision, mandate, rt.settings, now):
        # Waited in the queues past INTERLOCK_DECISION_MAX_AGE_MS (ADR 0009): it moves nothing now. A repeat
        # of it still lands on its intent, if it has one.
        verdict, reason = Verdict.BLOCK, grace.DECISION_EXPIRED
    existing = intents.get_intent(conn, decision.merchant_id, decision.sik)
    if existing is None:
        # ADR 0009: this same call keyed in an adjacent window (a queued, racing or stalled first call) is that intent.
        existing = grace.same_call_intent(conn, decision, mandate, rt.settings.settlement_window_grace_ms,
                                          rt.settings.clock_skew_ms)  # fmt: skip
    if decision.operation_ref is not None:
        landing = existing.sik if existing is not None else decision.sik
        bound = intents.sik_for_operation_ref(conn, decision.merchant_id, decision.operation_ref)
        if bound is not None and bound != landing:
            _record(conn, decision, now, verdict=Verdict.BLOCK, reason="KEY_CONFLICT")
            conflict = KeyConflict(decision.operation_ref, bound, landing)
            return Admission(_key_conflict(decision, conflict), None)
    if verdict is not Verdict.BLOCK and mandate is not None:
        limits = check_limits(
            conn, mandate, merchant_id=decision.merchant_id, agent_id=decision.agent_id,
            sik=existing.sik if existing is not None else decision.sik,
            tool=decision.tool, amount_minor=decision.terms.amount_minor, currency=decision.terms.currency,
            now_ms=now, rate=rt.fee_rate, clock_skew_ms=rt.settings.clock_skew_ms,
            subject=window_subject(decision.tool, decision.terms.subject, decision.params),
        )  # fmt: skip
        if limits.verdict is Verdict.BLOCK:
            verdict, reason = Verdict.BLOCK, limits.reason_code
    if verdict is not Verdict.BLOCK and decision.task_id is not None:
        refused = _outside_task(conn, decision, existing.sik if existing is not None else decision.sik, now)
        if refused is not None:
            verdict, reason = Verdict.BLOCK, refused
    if verdict is not Verdict.BLOCK:
        exceeded = _exceeds_rail_basis(conn, decision, existing.sik if existing is not None else decision.sik,
                                       rt.fee_rate.project_payout(), _account_merchants(rt, mandate, decision),
                                       rt.settings.clock_skew_ms)  # fmt: skip
        if exceeded is not None:
            verdict, reason = Verdict.BLOCK, exceeded
    _record(conn, decision, now, verdict=verdict, reason=reason)
    if existing is not None:
        if verdict is not Verdict.BLOCK:  # a refused call binds nothing, even when it lands on an intent
            _bind_ref(conn, decision, existing.sik, now)
        return _repeat(rt, conn, decision, existing, verdict, mandate, now, reason)
    if verdict is Verdict.BLOCK:
        # A refusal records the decision, not an intent: BLOCKED is absorbing, and a refund has no SIK
        # window, so an intent would refuse this refund forever — even after the limit that stopped it
        # slides out or a person re-pins a tool. Nothing moved; the repeat is judged afresh.
        return Admission(_refused(decision, reason), None)
    intent = intents.insert_intent(
        conn, merchant_id=decision.merchant_id, sik=decision.sik, tool=decision.tool,
        subject_id=decision.terms.subject, amount_minor=decision.terms.amount_minor,
        currency=decision.terms.currency, params=decision.params, params_hash=decision.params_hash,
        agent_id=decision.agent_id, mandate_id=decision.mandate_id or "", mandate_hash=decision.mandate_hash or "",
        operation_ref=decision.operation_ref, distinct_reason=decision.distinct_reason, now=now,
        task_id=decision.task_id, task_digest=decision.task_digest, task_ceiling_minor=decision.task_ceiling_minor,
        task_signer=decision.task_signer,
    )  # fmt: skip
    assert intent is not None  # we hold the write lock and saw no row
    _bind_ref(conn, decision, decision.sik, now)  # only now: a refused call must not burn the ref
    fields: dict[str, object] = {"reason_code": None if verdict is Verdict.ALLOW else reason}
    if verdict is Verdict.HOLD and mandate is not None:
        fields["hold_expires_at"] = now + mandate.approval.hold_expiry_ms
    intent = intents.transition(conn, decision.merchant_id, decision.sik, _EVENT_FOR_VERDICT[verdict], now=now,
                                detail={"request_id": decision.request_id, "reason_code": reason},
                                set_fields=fields)  # fmt: skip
    if intent.state is State.AUTHORIZED:
        return Admission(None, intent)
    return Admission(outcome_from_intent(intent, request_id=decision.request_id, replayed=False), None)


def _not_this_shards(rt: RailRuntime, conn: sqlite3.Connection, decision: Decision, now: int) -> Admission | None:
    """Ownership is fenced where money is admitted (SPEC §15): a merchant the map this ledger accepted gives another
    shard — moved while this Decision waited here, or routed by a stale map — is refused before anything is recorded
    as an intent. The decision is recorded (audit); the repeat, through an ingress holding the applied map, reaches
    the merchant's shard and is safe to make."""
    reason = rt.ownership_fence().refusal(conn, decision.merchant_id)
    if reason is None:
        return None
    logger.warning("request %s: merchant %s refused on shard %s (%s)", decision.request_id, decision.merchant_id,
                   rt.settings.shard, reason)  # fmt: skip
    if not intents.decision_exists(conn, decision.request_id):  # a redelivery is refused again, recorded once
        _record(conn, decision, now, verdict=Verdict.BLOCK, reason=reason)
    return Admission(Outcome(
        request_id=decision.request_id, state="BLOCKED", sik=decision.sik, intent=None, rail_entity_id=None,
        reason_code=reason, caller_action=CallerAction.RETRY_SAME_CALL, replayed=False,
    ), None)  # fmt: skip


def _outside_task(conn: sqlite3.Connection, decision: Decision, sik: str, now: int) -> str | None:
    """The task binding again, authoritatively (SPEC §10): the task has not expired since the gate, and the sum
    bound to its task_id — counted under the write lock — still fits its ceiling with this call, so calls split
    from one refund and racing through different gate workers can never pass it together."""
    assert decision.task_id is not None and decision.terms is not None
    wrong = _task_audience_problem(decision)
    if wrong is not None:
        return wrong
    if decision.task_expires_at is not None and now >= decision.task_expires_at:
        return TASK_EXPIRED
    if decision.task_ceiling_minor is None:
        return None
    audience = (decision.task_merchant_id or decision.merchant_id, tuple(decision.task_agent_ids or ()))
    ceiling = check_task_ceiling(conn, signer=decision.task_signer, task_id=decision.task_id, sik=sik,
                                 recovered_for=audience,
                                 amount_minor=decision.terms.amount_minor,
                                 ceiling_minor=decision.task_ceiling_minor)  # fmt: skip
    return None if ceiling.verdict is Verdict.ALLOW else ceiling.reason_code


def _task_audience_problem(decision: Decision) -> str | None:
    """The task's audience again (SPEC §10 v2): the merchant and agent this Decision is admitted for are the ones
    the signed task names. A Decision without an audience or signer (a v1 task a gate worker from before v2
    let through) is refused like a v1 task at the gate."""
    assert decision.task_id is not None
    if decision.task_signer is None:
        return TASK_WRONG_AUDIENCE
    wrong = audience_problem(decision.task_merchant_id, decision.task_agent_ids, decision.merchant_id,
                             decision.agent_id, task_id=decision.task_id, signer=decision.task_signer)  # fmt: skip
    return None if wrong is None else wrong.reason_code


def _account_merchants(rt: RailRuntime, mandate: Mandate | None, decision: Decision) -> tuple[str, ...]:
    """The merchants on this call's rail account (ADR 0021): one payment and one balance, one G2 count."""
    return rt.mandates.account_merchants(mandate) if mandate is not None else (decision.merchant_id,)


def _exceeds_rail_basis(conn: sqlite3.Connection, decision: Decision, sik: str, payout_fee: int,
                        merchants: tuple[str, ...], skew_ms: int) -> str | None:  # fmt: skip
    """G2 again, authoritatively: the gate's rail read less every other intent on the subject that may move
    money, is held, or applied since that read — of every merchant on the same rail account (ADR 0021) —
    counted under the write lock, so calls admitted together can never pass the refundable amount or the
    balance together (SPEC §8 step 6).

    "Since that read" is by commit order: every intent that became APPLIED after the mark the gate read from the
    ledger before its rail read (decision.applied_mark; finding F9, ADR 0032 amended). No clock enters it, so
    neither a recorder's clock behind the gate's (F6) nor every clock stepped back at once (F9) can hide money
    applied after the read. A Decision without a mark (an older gate) falls back to the clocks: every APPLIED
    intent stamped at or after the read, less INTERLOCK_CLOCK_SKEW_MS. Money counted that the read already showed
    only refuses (G2_STALE_RAIL_READ: the repeat is judged against a fresh read)."""
    terms = decision.terms
    if decision.rail_basis_minor is None or terms is None:
        return None
    mark = decision.applied_mark
    since = (decision.rail_read_at_ms or 0) - skew_ms
    if mark is not None and mark > (applied_mark(conn) or 0):
        # The gate read a ledger further along than this one: restored from a replica behind it (ADR 0029). What
        # this ledger applied after its own end is not ordered against that read; the repeat gets a fresh one.
        return G2_STALE_READ
    if decision.tool == PAYOUT_TOOL:
        # One balance for every payee (ADR 0028): counted by tool, not by subject, each payout with its fee.
        others = money_committed_for_tool(conn, merchants, PAYOUT_TOOL, exclude_sik=sik, currency=terms.currency,
                                          per_call_minor=payout_fee)  # fmt: skip
        if terms.amount_minor + payout_fee > decision.rail_basis_minor - others:
            return "G2_EXCEEDS_PAYOUT_BALANCE"
        if mark is not None:
            others += applied_after(conn, merchants, mark=mark, exclude_sik=sik, currency=terms.currency,
                                    tool=PAYOUT_TOOL, per_call_minor=payout_fee)  # fmt: skip
        else:
            others = money_committed_for_tool(conn, merchants, PAYOUT_TOOL, exclude_sik=sik, currency=terms.currency,
                                              applied_since_ms=since, per_call_minor=payout_fee)  # fmt: skip
        others += payout_fee
    else:
        others = money_committed_for_subject(conn, merchants, terms.subject, exclude_sik=sik,
                                             currency=terms.currency)  # fmt: skip
        if terms.amount_minor > decision.rail_basis_minor - others:
            return "G2_EXCEEDS_REFUNDABLE" if decision.tool == REFUND_TOOL else "G2_EXCEEDS_BALANCE"
        if mark is not None:
            others += applied_after(conn, merchants, mark=mark, exclude_sik=sik, currency=terms.currency,
                                    subject_id=terms.subject)  # fmt: skip
        else:
            others += applied_since(conn, merchants, terms.subject, since_ms=since, exclude_sik=sik,
                                    currency=terms.currency)  # fmt: skip
    if terms.amount_minor > decision.rail_basis_minor - others:
        # Refused only because money applied since the gate's read may or may not be in that read: the
        # repeat of the same call is judged against a fresh one (nothing was recorded, nothing moved).
        return G2_STALE_READ
    return None


def _record(conn: object, decision: Decision, now: int, *, verdict: Verdict, reason: str) -> None:
    intents.record_decision(
        conn,  # type: ignore[arg-type]
        request_id=decision.request_id, merchant_id=decision.merchant_id, sik=decision.sik or "",
        agent_id=decision.agent_id, mandate_hash=decision.mandate_hash or "", verdict=verdict.value,
        reason_code=reason, results=[r.model_dump(mode="json") for r in decision.results], now=now,
        task_id=decision.task_id, task_digest=decision.task_digest, task_signer=decision.task_signer,
    )  # fmt: skip


def _bind_ref(conn: sqlite3.Connection, decision: Decision, sik: str, now: int) -> None:
    """Bind the operation_ref to the intent this decision lands on (the conflict was checked earlier)."""
    if decision.operation_ref is not None:
        intents.bind_operation_ref(conn, decision.merchant_id, decision.operation_ref, sik, now=now)


def _repeat(
    rt: RailRuntime, conn: sqlite3.Connection, decision: Decision, existing: Intent, verdict: Verdict,
    mandate: Mandate | None, now: int, reason: str,
) -> Admission:  # fmt: skip
    """The SIK already has an intent: answer with its state (replayed), or judge it afresh (SPEC §6, §10).

    A repeat of a not-applied intent (FAILED_TERMINAL, CONFIRMED_NOT_APPLIED) is a new judgement of the same
    operation under the mandate configured now (ADR 0024): allowed, it reopens the intent; held, the intent waits
    for a person like a new held call; refused, the answer keeps the intent's state but says why this repeat was
    refused and whether repeating can change that. Without the last, a call withdrawn by a replaced mandate and
    refused by the new one would be told to repeat (CONFIRMED_NOT_APPLIED, RETRY_SAME_CALL) for ever."""
    if existing.state not in _REOPENABLE:
        return Admission(outcome_from_intent(existing, request_id=decision.request_id, replayed=True), None)
    if verdict is Verdict.ALLOW and mandate is not None:
        check = reassert(conn, existing, mandate, now_ms=now, rate=rt.fee_rate, clock_skew_ms=rt.settings.clock_skew_ms)
        if check.verdict is Verdict.ALLOW:
            # Reopened under the mandate it was judged under now, which is what execute re-checks against. A payout
            # is sent as judged now too — the mandate's account and queueing rule, the agent's corrected mode — not
            # as the refused or absent first call was (ADR 0028): a new key follows a refusal, and under the same
            # key a different body is refused by the rail as ambiguous, never applied twice.
            fields: dict[str, object] = {"mandate_id": mandate.mandate_id, "mandate_hash": mandate.mandate_hash,
                                         "reason_code": None}  # fmt: skip
            if existing.tool == PAYOUT_TOOL:
                fields.update(_payout_as_judged(existing, decision))
            intent = intents.transition(
                conn, existing.merchant_id, existing.sik, Event.REOPENED, now=now, reasserted=check,
                detail={"request_id": decision.request_id}, set_fields=fields,
            )  # fmt: skip
            return Admission(None, intent)
        verdict, reason = Verdict.BLOCK, check.reason_code
    if verdict is Verdict.HOLD and mandate is not None:
        held: dict[str, object] = {"mandate_id": mandate.mandate_id, "mandate_hash": mandate.mandate_hash,
                                   "reason_code": reason, "hold_expires_at": now + mandate.approval.hold_expiry_ms}
        if existing.tool == PAYOUT_TOOL:  # the approver releases what this repeat was judged as (ADR 0028)
            held.update(_payout_as_judged(existing, decision))
        intent = intents.transition(
            conn, existing.merchant_id, existing.sik, Event.GATES_HELD, now=now,
            detail={"request_id": decision.request_id, "reason_code": reason}, set_fields=held,
        )  # fmt: skip
        return Admission(outcome_from_intent(intent, request_id=decision.request_id, replayed=True), None)
    outcome = outcome_from_intent(existing, request_id=decision.request_id, replayed=True, reason_code=reason)
    return Admission(outcome.model_copy(update={"caller_action": _refusal_action(reason)}), None)


def _redelivered(rt: RailRuntime, conn: sqlite3.Connection, decision: Decision) -> Admission:
    """A Decision for a request admission already decided: answered from what was recorded for it, not from this
    copy. A proposal delivered twice is judged twice by the gates, and the two judgements can differ — the second's
    rail read failed, say, so it carries no SIK — while only the first reached the ledger (finding F-loss-5: the copy
    without a SIK was answered BLOCKED, DO_NOT_RETRY, for a settlement that had been APPLIED)."""
    recorded = intents.recorded_decision(conn, decision.request_id)
    assert recorded is not None  # the caller saw it, under the same write lock
    sik = recorded.sik
    intent = intents.get_intent(conn, recorded.merchant_id, sik) if sik is not None else None
    if intent is None and sik is not None and decision.sik == sik:
        # The first answer may have come from a grace intent (ADR 0009), which this copy's grace SIKs point to.
        intent = grace.same_call_intent(conn, decision, rt.mandates.get(decision.agent_id),
                                        rt.settings.settlement_window_grace_ms, rt.settings.clock_skew_ms)  # fmt: skip
    if intent is not None:
        return Admission(outcome_from_intent(intent, request_id=decision.request_id, replayed=True), None)
    if recorded.verdict == Verdict.BLOCK.value:
        # Refused the first time: answer with the refusal that was recorded (admission may have refused what the
        # gate allowed, e.g. DECISION_EXPIRED or a limit), and with the same caller action.
        return Admission(_unkeyed(decision, recorded.reason_code), None)
    # Admitted, and its intent is not found under the key recorded (a grace intent this copy cannot point to):
    # nothing definite to say, and a repeat of the call is judged afresh and lands on whatever was recorded.
    return Admission(Outcome(
        request_id=decision.request_id, state="IN_PROGRESS", sik=sik, intent=None, rail_entity_id=None,
        reason_code=OUTCOME_PENDING, caller_action=CallerAction.RETRY_SAME_CALL, replayed=False,
    ), None)  # fmt: skip


def _unkeyed(decision: Decision, reason: str | None = None) -> Outcome:
    """A refusal with no intent behind it: the referent never resolved (nothing to key), or a redelivery of a
    refused Decision (*reason*: the refusal recorded for it)."""
    reason = reason or decision.reason_code
    return Outcome(
        request_id=decision.request_id, state="BLOCKED", sik=None, intent=None, rail_entity_id=None,
        reason_code=reason, caller_action=_refusal_action(reason), replayed=False,
    )  # fmt: skip


def _refusal_action(reason: str) -> CallerAction:
    """A refused call may be repeated when the refusal is transient (the rail unreadable, a stale read or map, a
    Decision that waited too long, a mandate replaced under it): the repeat is judged afresh."""
    transient = reason in _TRANSIENT_REASONS or reason in _RETRYABLE_REFUSALS
    return CallerAction.RETRY_SAME_CALL if transient else CallerAction.DO_NOT_RETRY


def _refused(decision: Decision, reason: str) -> Outcome:
    terms = decision.terms
    return Outcome(
        request_id=decision.request_id, state="BLOCKED", sik=decision.sik,
        intent=IntentTerms(**terms.model_dump()) if terms else None, rail_entity_id=None, reason_code=reason,
        caller_action=_refusal_action(reason), replayed=False,
    )  # fmt: skip


def _key_conflict(decision: Decision, exc: KeyConflict) -> Outcome:
    terms = decision.terms
    return Outcome(
        request_id=decision.request_id, state="BLOCKED", sik=decision.sik,
        intent=IntentTerms(**terms.model_dump()) if terms else None, rail_entity_id=None,
        reason_code="KEY_CONFLICT", caller_action=CallerAction.DO_NOT_RETRY, replayed=False,
    )  # fmt: skip


def _payout_as_judged(existing: Intent, decision: Decision) -> dict[str, object]:
    """A not-applied payout reopened or held again is sent as its repeat was judged (ADR 0028): the repeat's mode,
    the mandate's account and queueing rule, and — the payee's other account, when the repeat named one — the
    account. Nothing was applied under the first, so moving it cannot pay twice; the SIK keys the contact, so the
    payee is the same."""
    fields: dict[str, object] = {}
    if decision.params != existing.params:
        fields.update(intents.reopened_params(decision.params, decision.params_hash))
    if decision.terms is not None and decision.terms.subject != existing.subject_id:
        fields["subject_id"] = decision.terms.subject
    return fields
