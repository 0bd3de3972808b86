"""What the admit transaction (rail_worker/admit.py) answers and writes for each kind of Decision: the Outcome the
waiting ingress reads, the decision row and the audit records, and the intent row it creates, reopens or leaves
alone. Covers redelivered and unkeyed decisions, G1 re-checked at admission (mandate expired, tool no longer
granted), the grace SIKs of ADR 0009, operation_ref binding and KEY_CONFLICT, G3 windows and fee budgets, the
task binding (expiry and ceiling) and G2 re-checked against the gate's rail read. In-process, over a real SQLite
ledger, with the injectable clock and the scripted rail of tests/engine/send_world.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock.mandate import Mandate
from interlock.messages import CallerAction, Decision, GateResultModel, IntentTerms, Outcome, Verdict
from ledger import intents
from ledger.db import open_ledger, transaction
from ledger.states import State
from rail_worker.admit import Admission, admit
from rail_worker.execute import execute
from rails.razorpay import RailError, RailErrorKind
from tests.engine.send_world import REFUND, SETTLEMENT, T0, World, make_world
from tests.mandates import AGENT, MERCHANT, make_mandate

DAY = 86_400_000
PAYMENT = "pay_ADMIT000001"
A, B, C = "A" * 32, "B" * 32, "C" * 32
REASON_FOR = {"ALLOW": "ALLOWED", "HOLD": "G2_ABOVE_HOLD", "BLOCK": "G6_TOOL_DRIFT"}


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    made = make_world(tmp_path, monkeypatch)
    monkeypatch.setattr("rail_worker.admit.now_ms", made.clock)
    yield made
    made.close()


def _mandate(world: World, **changes: object) -> Mandate:
    return make_mandate({"issued_at": world.mandate.issued_at, "expires_at": world.mandate.expires_at,
                         "limits.fee_budgets": {}, "approval.hold_above_minor": None, **changes})  # fmt: skip


def _terms(tool: str = SETTLEMENT, amount: int = 50000, currency: str = "INR") -> IntentTerms:
    subject = "balance" if tool == SETTLEMENT else PAYMENT
    return IntentTerms(merchant_id=MERCHANT, tool=tool, subject=subject, amount_minor=amount, currency=currency)


def _decision(world: World, sik: str | None, *, verdict: str = "ALLOW", tool: str = SETTLEMENT, amount: int = 50000,
              request_id: str | None = None, mandate: Mandate | None = None, **fields: Any) -> Decision:
    """What a gate worker sends to the rail queue for a call it judged under *mandate* (default: the world's)."""
    mandate = mandate or world.mandate
    values: dict[str, Any] = dict(
        request_id=request_id or f"req-{(sik or 'none')[:4]}-{verdict}", agent_id=AGENT, merchant_id=MERCHANT,
        tool=tool, sik=sik, terms=_terms(tool, amount) if sik is not None else None,
        params={"amount": amount, "notes": {}}, params_hash="ph", verdict=Verdict(verdict),
        reason_code=REASON_FOR[verdict], results=[], mandate_id=mandate.mandate_id,
        mandate_hash=mandate.mandate_hash, operation_ref=None, window=1, decided_at_ms=world.clock(),
    )  # fmt: skip
    if "task_id" in fields:  # a v2 task: its signer and audience travel with it (SPEC §10)
        values.update(task_signer="ticketing", task_merchant_id=MERCHANT, task_agent_ids=[AGENT])
    values.update(fields)
    return Decision(**values)


def _outcome(request_id: str, state: str, sik: str | None, terms: IntentTerms | None, *, reason: str | None,
             action: CallerAction, replayed: bool = False) -> Outcome:
    return Outcome(request_id=request_id, state=state, sik=sik, intent=terms, rail_entity_id=None,
                   reason_code=reason, caller_action=action, replayed=replayed)  # fmt: skip


def _decision_row(world: World, request_id: str) -> dict[str, Any]:
    row = open_ledger(world.path).execute(
        "SELECT merchant_id, sik, agent_id, mandate_hash, verdict, reason_code, results_json, decided_at, task_id,"
        " task_digest FROM decisions WHERE request_id = ?", (request_id,)).fetchone()
    assert row is not None, f"no decision recorded for {request_id}"
    return dict(row) | {"results_json": json.loads(row["results_json"])}


def _audit(world: World, kind: str) -> list[dict[str, Any]]:
    rows = open_ledger(world.path).execute("SELECT payload_json FROM audit_log WHERE kind = ? ORDER BY seq", (kind,))
    return [json.loads(r[0]) for r in rows]


def _count(world: World, table: str) -> int:
    return int(open_ledger(world.path).execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])  # noqa: S608


def _refs(world: World) -> list[tuple[str, str, int]]:
    rows = open_ledger(world.path).execute("SELECT operation_ref, sik, bound_at FROM operation_refs ORDER BY 1")
    return [(r[0], r[1], r[2]) for r in rows]


def _seed(world: World, sik: str, *, state: State, tool: str = REFUND, amount: int = 20000, currency: str = "INR",
          updated_at: int = T0, task_id: str | None = None, operation_ref: str | None = None) -> None:
    """Place an intent of this agent in *state* directly in the ledger (what earlier calls left behind)."""
    conn = open_ledger(world.path)
    with transaction(conn):
        intents.insert_intent(
            conn, merchant_id=MERCHANT, sik=sik, tool=tool, subject_id="balance" if tool == SETTLEMENT else PAYMENT,
            amount_minor=amount, currency=currency, params={"amount": amount}, params_hash="ph", agent_id=AGENT,
            mandate_id=world.mandate.mandate_id, mandate_hash=world.mandate.mandate_hash,
            operation_ref=operation_ref, distinct_reason=None, now=world.clock(), task_id=task_id,
            task_digest="td" if task_id else None, task_ceiling_minor=None,
            task_signer="ticketing" if task_id else None,
        )  # fmt: skip
        conn.execute("UPDATE intents SET state = ?, updated_at = ?, authorized_at = ? WHERE sik = ?",
                     (state.value, updated_at, world.clock(), sik))  # fmt: skip
        if operation_ref is not None:
            intents.bind_operation_ref(conn, MERCHANT, operation_ref, sik, now=world.clock())


def _refused_at_admit(world: World, decision: Decision, reason: str,
                      action: CallerAction = CallerAction.DO_NOT_RETRY) -> None:  # fmt: skip
    """The decision is answered BLOCKED with *reason*, recorded as a BLOCK, and no intent is made for it."""
    before = _count(world, "intents")
    admission = admit(world.runtime(), decision)
    assert admission == Admission(_outcome(decision.request_id, "BLOCKED", decision.sik, decision.terms,
                                           reason=reason, action=action), None)  # fmt: skip
    row = _decision_row(world, decision.request_id)
    assert (row["verdict"], row["reason_code"]) == ("BLOCK", reason)
    assert _count(world, "intents") == before


def _failed_terminal(world: World, sik: str, request_id: str = "req-first") -> None:
    rt = world.runtime()
    assert admit(rt, _decision(world, sik, request_id=request_id)).execute is not None
    world.rail.reject = RailError(RailErrorKind.REJECTED, "400", method="POST", path="/x", http_status=400,
                                  code="BAD_REQUEST_ERROR", description="Insufficient balance")  # fmt: skip
    execute(rt, MERCHANT, sik, request_id=None)
    world.rail.reject = None
    assert world.intent(sik).state is State.FAILED_TERMINAL


# -- a new intent: ALLOW, HOLD, and what is written for it ------------------------------------------------------------


def test_an_allowed_decision_creates_an_authorized_intent_with_every_field_of_the_decision(world: World) -> None:
    decision = _decision(world, A, operation_ref="op-1", distinct_reason="second refund of the day",
                         mandate_id=None, task_id="task-1", task_digest="digest-1", task_ceiling_minor=90000)
    admission = admit(world.runtime(), decision)
    assert admission.outcome is None and admission.execute == world.intent(A)
    intent = world.intent(A)
    assert (intent.state, intent.reason_code, intent.hold_expires_at, intent.authorized_at) == (
        State.AUTHORIZED, None, None, T0)
    assert (intent.operation_ref, intent.distinct_reason, intent.mandate_id, intent.mandate_hash) == (
        "op-1", "second refund of the day", "", world.mandate.mandate_hash)
    assert (intent.task_id, intent.task_digest, intent.task_ceiling_minor) == ("task-1", "digest-1", 90000)
    assert _refs(world) == [("op-1", A, T0)]
    assert _audit(world, "TRANSITION") == [{
        "merchant_id": MERCHANT, "sik": A, "event": "GATES_PASSED", "from": "PROPOSED", "to": "AUTHORIZED",
        "attempt_seq": 0, "detail": {"request_id": decision.request_id, "reason_code": "ALLOWED"},
        "set": {"reason_code": None}}]  # fmt: skip


def test_a_held_decision_creates_a_held_intent_that_expires_after_the_mandates_hold_expiry(world: World) -> None:
    decision = _decision(world, A, verdict="HOLD")
    admission = admit(world.runtime(), decision)
    assert admission == Admission(_outcome(decision.request_id, "HELD", A, decision.terms, reason="G2_ABOVE_HOLD",
                                           action=CallerAction.WAIT_FOR_APPROVAL), None)  # fmt: skip
    intent = world.intent(A)
    assert (intent.state, intent.reason_code, intent.hold_expires_at) == (
        State.HELD, "G2_ABOVE_HOLD", T0 + world.mandate.approval.hold_expiry_ms)
    assert _audit(world, "TRANSITION")[-1]["detail"] == {"request_id": decision.request_id,
                                                          "reason_code": "G2_ABOVE_HOLD"}  # fmt: skip


def test_the_decision_row_keeps_the_gate_results_and_the_task_the_call_was_bound_to(world: World) -> None:
    result = GateResultModel(gate="G2", verdict=Verdict.ALLOW, reason_code="G2_WITHIN_RANGE",
                             detail={"amount_minor": 50000})  # fmt: skip
    decision = _decision(world, A, results=[result], task_id="task-9", task_digest="digest-9")
    admit(world.runtime(), decision)
    assert _decision_row(world, decision.request_id) == {
        "merchant_id": MERCHANT, "sik": A, "agent_id": AGENT, "mandate_hash": world.mandate.mandate_hash,
        "verdict": "ALLOW", "reason_code": "ALLOWED", "decided_at": T0, "task_id": "task-9", "task_digest": "digest-9",
        "results_json": [{"gate": "G2", "verdict": "ALLOW", "reason_code": "G2_WITHIN_RANGE",
                          "detail": {"amount_minor": 50000}}],
    }  # fmt: skip


# -- redelivered decisions ---------------------------------------------------------------------------------------------


def test_a_redelivered_decision_answers_with_its_intent_replayed_and_writes_nothing(world: World) -> None:
    decision = _decision(world, A, verdict="HOLD")
    rt = world.runtime()
    admit(rt, decision)
    audit_rows = _count(world, "audit_log")
    again = admit(rt, decision)
    assert again == Admission(_outcome(decision.request_id, "HELD", A, decision.terms, reason="G2_ABOVE_HOLD",
                                       action=CallerAction.WAIT_FOR_APPROVAL, replayed=True), None)  # fmt: skip
    assert _count(world, "audit_log") == audit_rows


def test_a_redelivered_allow_does_not_reopen_the_intent_it_created_after_it_failed(world: World) -> None:
    _failed_terminal(world, A, request_id="req-first")
    again = admit(world.runtime(), _decision(world, A, request_id="req-first"))
    assert again == Admission(_outcome("req-first", "FAILED_TERMINAL", A, _terms(), reason="RAIL_REJECTED",
                                       action=CallerAction.DO_NOT_RETRY, replayed=True), None)  # fmt: skip
    assert world.intent(A).state is State.FAILED_TERMINAL
    assert len(world.rail.calls) == 1, "the redelivery sent nothing more"


def test_a_redelivered_decision_that_landed_on_a_grace_intent_answers_with_that_intent(world: World) -> None:
    rt = world.runtime()
    admit(rt, _decision(world, B, verdict="HOLD", request_id="req-b"))
    decision = _decision(world, A, grace_siks=[C, B], request_id="req-a")
    first = admit(rt, decision)
    again = admit(rt, decision)
    expected = _outcome("req-a", "HELD", B, _terms(), reason="G2_ABOVE_HOLD", action=CallerAction.WAIT_FOR_APPROVAL,
                        replayed=True)  # fmt: skip
    assert first == again == Admission(expected, None)
    assert world.intent(B).state is State.HELD and _count(world, "intents") == 1


def test_a_second_judgement_of_a_decided_request_is_answered_from_what_was_recorded(world: World) -> None:
    """Finding F-loss-5 (docs/simulation.md; seed 1492 of `make simulate`): a proposal delivered twice is judged twice
    by the gates. The first judgement landed on the intent; the second's rail read failed, so it carried no SIK and
    a refusal. Answered from the copy, the agent was told BLOCKED, DO_NOT_RETRY, for a settlement that had been
    APPLIED. The request's answer is what admission recorded for it."""
    rt = world.runtime()
    first = admit(rt, _decision(world, A, verdict="HOLD", request_id="req-twice"))
    second = admit(rt, _decision(world, None, verdict="BLOCK", reason_code="G2_RAIL_UNAVAILABLE", mandate_hash=None,
                                 request_id="req-twice"))  # fmt: skip
    held = _outcome("req-twice", "HELD", A, _terms(), reason="G2_ABOVE_HOLD", action=CallerAction.WAIT_FOR_APPROVAL,
                    replayed=True)  # fmt: skip
    assert first.outcome is not None and first.outcome.state == "HELD"
    assert second == Admission(held, None)
    assert _count(world, "decisions") == 1 and world.intent(A).state is State.HELD


def test_a_redelivered_refusal_is_answered_as_refused_again_without_an_intent(world: World) -> None:
    decision = _decision(world, A, verdict="BLOCK")
    rt = world.runtime()
    admit(rt, decision)
    again = admit(rt, decision)
    assert again == Admission(_outcome(decision.request_id, "BLOCKED", None, None, reason="G6_TOOL_DRIFT",
                                       action=CallerAction.DO_NOT_RETRY), None)  # fmt: skip
    assert _count(world, "intents") == 0 and _count(world, "decisions") == 1


# -- a decision with nothing to key -----------------------------------------------------------------------------------


def test_an_unresolved_referent_is_recorded_and_refused_with_no_intent(world: World) -> None:
    decision = _decision(world, None, verdict="BLOCK", reason_code="G2_PAYMENT_NOT_FOUND", mandate_hash=None,
                         task_id="task-3", task_digest="digest-3")  # fmt: skip
    admission = admit(world.runtime(), decision)
    assert admission == Admission(_outcome(decision.request_id, "BLOCKED", None, None, reason="G2_PAYMENT_NOT_FOUND",
                                           action=CallerAction.DO_NOT_RETRY), None)  # fmt: skip
    assert _decision_row(world, decision.request_id) == {
        "merchant_id": MERCHANT, "sik": "", "agent_id": AGENT, "mandate_hash": "", "verdict": "BLOCK",
        "reason_code": "G2_PAYMENT_NOT_FOUND", "results_json": [], "decided_at": T0, "task_id": "task-3",
        "task_digest": "digest-3",
    }  # fmt: skip
    assert _count(world, "intents") == 0


def test_a_refusal_because_the_rail_could_not_be_read_tells_the_agent_to_repeat_the_call(world: World) -> None:
    decision = _decision(world, None, verdict="BLOCK", reason_code="G2_RAIL_UNAVAILABLE")
    admission = admit(world.runtime(), decision)
    assert admission == Admission(_outcome(decision.request_id, "BLOCKED", None, None, reason="G2_RAIL_UNAVAILABLE",
                                           action=CallerAction.RETRY_SAME_CALL), None)  # fmt: skip


def test_a_decision_with_terms_but_no_sik_is_refused_unkeyed(world: World) -> None:
    decision = _decision(world, None, verdict="BLOCK", reason_code="G2_PAYMENT_NOT_FOUND", terms=_terms())
    admission = admit(world.runtime(), decision)
    assert admission == Admission(_outcome(decision.request_id, "BLOCKED", None, None, reason="G2_PAYMENT_NOT_FOUND",
                                           action=CallerAction.DO_NOT_RETRY), None)  # fmt: skip
    assert _count(world, "intents") == 0


# -- G1 at admission ---------------------------------------------------------------------------------------------------


def test_a_mandate_that_expired_since_the_gate_refuses_the_call_as_expired(world: World) -> None:
    world.mandate = _mandate(world, expires_at=T0 + 1000)
    world.clock.advance(1000)
    _refused_at_admit(world, _decision(world, A), "G1_MANDATE_EXPIRED")


def test_a_mandate_that_no_longer_grants_the_tool_refuses_the_call_as_not_granted(world: World) -> None:
    grants = {k: v for k, v in world.mandate.model_dump(mode="json")["scope"]["grants"].items() if k != SETTLEMENT}
    world.mandate = _mandate(world, **{"scope.grants": grants})
    _refused_at_admit(world, _decision(world, A), "G1_TOOL_NOT_GRANTED")


# -- how long a Decision may wait (ADR 0009) --------------------------------------------------------------------------


def test_a_refund_received_longer_ago_than_the_maximum_age_is_refused_and_moves_nothing(world: World) -> None:
    max_age = world.settings.decision_max_age_ms
    stale = _decision(world, A, tool=REFUND, request_id="req-stale", received_at_ms=T0 - max_age - 1)
    _refused_at_admit(world, stale, "DECISION_EXPIRED", CallerAction.RETRY_SAME_CALL)
    assert world.rail.calls == [] and _count(world, "intents") == 0
    # At the bound it is still admitted; the repeat of the refused call is judged afresh and goes ahead.
    at_the_bound = _decision(world, A, tool=REFUND, request_id="req-fresh", received_at_ms=T0 - max_age)
    fresh = admit(world.runtime(), at_the_bound)
    assert fresh.execute is not None and fresh.execute.sik == A


def test_a_redelivered_decision_refused_at_admission_is_answered_with_the_recorded_refusal(world: World) -> None:
    # The gate allowed it; admission refused it (it waited too long). A second delivery of the same Decision is
    # answered with what was recorded — DECISION_EXPIRED, repeat the call — not with the gate's verdict.
    stale = _decision(world, A, tool=REFUND, request_id="req-stale",
                      received_at_ms=T0 - world.settings.decision_max_age_ms - 1)  # fmt: skip
    _refused_at_admit(world, stale, "DECISION_EXPIRED", CallerAction.RETRY_SAME_CALL)
    again = admit(world.runtime(), stale)
    assert again == Admission(_outcome("req-stale", "BLOCKED", None, None, reason="DECISION_EXPIRED",
                                       action=CallerAction.RETRY_SAME_CALL), None)  # fmt: skip
    assert _count(world, "decisions") == 1 and _count(world, "intents") == 0 and world.rail.calls == []


def test_a_settlement_waits_only_until_the_end_of_the_window_after_its_own(world: World) -> None:
    # One-day windows: a settlement received in the window before yesterday's is expired, however few hours ago
    # that was; one received yesterday still goes ahead today (its repeats, and a stalled first call, are in
    # adjacent windows). A refund of the same age is admitted: it has no window, only the maximum age.
    midnight = T0 - T0 % DAY
    two_back = midnight - DAY - 1  # the last ms of the window before yesterday's
    assert T0 - two_back < world.settings.decision_max_age_ms
    _refused_at_admit(world, _decision(world, A, request_id="req-old", received_at_ms=two_back),
                      "DECISION_EXPIRED", CallerAction.RETRY_SAME_CALL)  # fmt: skip
    assert admit(world.runtime(), _decision(world, B, request_id="req-ok", received_at_ms=two_back + 1)).execute
    refund = admit(world.runtime(), _decision(world, C, tool=REFUND, request_id="req-r", received_at_ms=two_back))
    assert refund.execute is not None


def test_a_settlement_waits_until_the_clock_skew_before_the_end_of_the_window_after_its_own(world: World) -> None:
    """ADR 0032: a first call admitted at the very end of the window after its own could have a repeat received
    before the admission but stamped in the window after that by an ingress whose clock runs ahead of this worker's,
    two windows on, where no SIK links them. So the admission ends INTERLOCK_CLOCK_SKEW_MS before that window does."""
    world.settings = world.settings.model_copy(update={"clock_skew_ms": 1_000})
    midnight = T0 - T0 % DAY
    yesterday = midnight - DAY + 5  # received early yesterday; its window ends at midnight tonight
    world.clock.ms = midnight + DAY - 1_000  # the worker's clock: the bound is reached
    _refused_at_admit(world, _decision(world, A, request_id="req-late", received_at_ms=yesterday),
                      "DECISION_EXPIRED", CallerAction.RETRY_SAME_CALL)  # fmt: skip
    world.clock.ms = midnight + DAY - 1_001
    assert admit(world.runtime(), _decision(world, B, request_id="req-in-time", received_at_ms=yesterday)).execute


def test_an_expired_repeat_of_an_existing_intent_is_answered_with_that_intent_and_reopens_nothing(
    world: World,
) -> None:
    _failed_terminal(world, A)
    stale = _decision(world, A, request_id="req-stale", received_at_ms=T0 - 2 * DAY)
    admission = admit(world.runtime(), stale)
    assert admission.execute is None and admission.outcome is not None
    assert (admission.outcome.state, admission.outcome.replayed) == ("FAILED_TERMINAL", True)
    assert _decision_row(world, "req-stale")["reason_code"] == "DECISION_EXPIRED"
    assert world.intent(A).state is State.FAILED_TERMINAL and len(world.rail.calls) == 1


def test_a_decision_without_a_received_time_counts_its_age_from_when_it_was_decided(world: World) -> None:
    # A Decision enqueued by a gate worker from before received_at_ms existed (a rolling upgrade).
    decided = T0 - world.settings.decision_max_age_ms - 1
    old = _decision(world, A, tool=REFUND, request_id="req-old", decided_at_ms=decided)
    assert old.received_at_ms is None
    _refused_at_admit(world, old, "DECISION_EXPIRED", CallerAction.RETRY_SAME_CALL)


# -- grace SIKs and operation_ref --------------------------------------------------------------------------------------


def test_a_call_keyed_in_the_adjacent_window_lands_on_the_intent_already_there(world: World) -> None:
    rt = world.runtime()
    admit(rt, _decision(world, B, verdict="HOLD", request_id="req-b"))
    admission = admit(rt, _decision(world, A, grace_siks=[C, B], request_id="req-a", operation_ref="op-g"))
    assert admission == Admission(_outcome("req-a", "HELD", B, _terms(), reason="G2_ABOVE_HOLD",
                                           action=CallerAction.WAIT_FOR_APPROVAL, replayed=True), None)  # fmt: skip
    assert _count(world, "intents") == 1
    assert _refs(world) == [("op-g", B, T0)]
    assert _decision_row(world, "req-a")["sik"] == A


def test_an_operation_ref_bound_to_another_intent_is_a_key_conflict(world: World) -> None:
    _seed(world, B, state=State.AUTHORIZED, tool=SETTLEMENT, amount=1000, operation_ref="op-1")
    decision = _decision(world, A, operation_ref="op-1")
    _refused_at_admit(world, decision, "KEY_CONFLICT")
    assert _refs(world) == [("op-1", B, T0)]


def test_the_repeat_of_a_call_with_its_own_operation_ref_is_answered_not_a_conflict(world: World) -> None:
    rt = world.runtime()
    admit(rt, _decision(world, A, verdict="HOLD", operation_ref="op-1", request_id="req-1"))
    again = admit(rt, _decision(world, A, operation_ref="op-1", request_id="req-2"))
    assert again == Admission(_outcome("req-2", "HELD", A, _terms(), reason="G2_ABOVE_HOLD",
                                       action=CallerAction.WAIT_FOR_APPROVAL, replayed=True), None)  # fmt: skip


def test_a_grace_repeat_with_the_operation_ref_of_the_intent_it_lands_on_is_not_a_conflict(world: World) -> None:
    rt = world.runtime()
    admit(rt, _decision(world, B, verdict="HOLD", operation_ref="op-1", request_id="req-b"))
    again = admit(rt, _decision(world, A, grace_siks=[B], operation_ref="op-1", request_id="req-a"))
    assert again.outcome is not None and (again.outcome.sik, again.outcome.reason_code) == (B, "G2_ABOVE_HOLD")


def test_a_repeat_that_brings_an_operation_ref_binds_it_to_the_existing_intent(world: World) -> None:
    rt = world.runtime()
    admit(rt, _decision(world, A, verdict="HOLD", request_id="req-1"))
    world.clock.advance(5)
    admit(rt, _decision(world, A, operation_ref="op-late", request_id="req-2"))
    assert _refs(world) == [("op-late", A, T0 + 5)]


def test_a_refused_repeat_binds_no_operation_ref(world: World) -> None:
    rt = world.runtime()
    admit(rt, _decision(world, A, verdict="HOLD", request_id="req-1"))
    admit(rt, _decision(world, A, verdict="BLOCK", operation_ref="op-x", request_id="req-2"))
    assert _refs(world) == []


# -- G3 at admission ---------------------------------------------------------------------------------------------------


def test_a_settlement_whose_fee_would_pass_the_fee_budget_is_refused_at_admit(world: World) -> None:
    world.mandate = _mandate(world, **{"limits.fee_budgets": {"INR": {"window_ms": DAY, "max_fee_minor": 10}}})
    _refused_at_admit(world, _decision(world, A), "G3_FEE_BUDGET")


def test_a_gate_block_keeps_the_gates_reason_even_when_a_window_is_also_full(world: World) -> None:
    world.mandate = _mandate(world, **{"limits.windows": [{"window_ms": DAY, "max_calls": 1}]})
    _seed(world, B, state=State.AUTHORIZED, tool=SETTLEMENT, amount=1000)
    _refused_at_admit(world, _decision(world, A, verdict="BLOCK"), "G6_TOOL_DRIFT")


def test_the_repeat_of_an_admitted_call_does_not_count_itself_against_a_full_window(world: World) -> None:
    world.mandate = _mandate(world, **{"limits.windows": [{"window_ms": DAY, "max_calls": 1}]})
    rt = world.runtime()
    admit(rt, _decision(world, B, verdict="HOLD", request_id="req-1"))
    admit(rt, _decision(world, A, grace_siks=[B], request_id="req-2"))
    assert (_decision_row(world, "req-2")["verdict"], _decision_row(world, "req-2")["reason_code"]) == (
        "ALLOW", "ALLOWED")


# -- reopening a failed intent -----------------------------------------------------------------------------------------


def test_an_allowed_repeat_reopens_a_failed_intent_under_the_mandate_configured_now(world: World) -> None:
    _failed_terminal(world, A)
    world.mandate = _mandate(world, purpose="re-pinned by a person",
                             **{"limits.fee_budgets": {"INR": {"window_ms": DAY, "max_fee_minor": 100000}}})
    world.clock.advance(7)
    admission = admit(world.runtime(), _decision(world, A, request_id="req-repeat"))
    intent = world.intent(A)
    assert admission == Admission(None, intent)
    assert (intent.state, intent.reason_code, intent.mandate_id, intent.mandate_hash, intent.authorized_at) == (
        State.AUTHORIZED, None, world.mandate.mandate_id, world.mandate.mandate_hash, T0 + 7)
    assert _audit(world, "TRANSITION")[-1] == {
        "merchant_id": MERCHANT, "sik": A, "event": "REOPENED", "from": "FAILED_TERMINAL", "to": "AUTHORIZED",
        "attempt_seq": 1, "detail": {"request_id": "req-repeat", "reasserted": "REASSERTED"},
        # the mandate it is re-pinned to is on the chain, not only on the row (ADR 0020)
        "set": {"reason_code": None, "mandate_id": world.mandate.mandate_id,
                "mandate_hash": world.mandate.mandate_hash},
    }  # fmt: skip


# -- the task binding --------------------------------------------------------------------------------------------------


def test_a_call_whose_task_expires_at_the_moment_of_admission_is_refused_as_expired(world: World) -> None:
    _refused_at_admit(world, _decision(world, A, task_id="task-1", task_expires_at=T0), "G1_TASK_EXPIRED")


def test_a_call_whose_task_has_not_expired_and_has_no_ceiling_is_admitted(world: World) -> None:
    admission = admit(world.runtime(), _decision(world, A, task_id="task-1", task_expires_at=T0 + 1))
    assert admission.execute is not None and admission.execute.state is State.AUTHORIZED


def test_a_call_bound_to_a_task_without_an_expiry_is_admitted(world: World) -> None:
    admission = admit(world.runtime(), _decision(world, A, task_id="task-1"))
    assert admission.execute is not None and admission.execute.task_id == "task-1"


def test_a_call_that_would_pass_its_tasks_ceiling_with_what_the_task_moved_is_refused(world: World) -> None:
    _seed(world, B, state=State.APPLIED, tool=SETTLEMENT, amount=30000, task_id="task-1")
    _seed(world, C, state=State.APPLIED, tool=REFUND, amount=10000, task_id="task-1")  # another tool: counted (v2)
    decision = _decision(world, A, task_id="task-1", task_ceiling_minor=89999)
    _refused_at_admit(world, decision, "G2_EXCEEDS_TASK_CEILING")


def test_a_call_that_fits_its_tasks_ceiling_exactly_is_admitted(world: World) -> None:
    _seed(world, B, state=State.APPLIED, tool=SETTLEMENT, amount=30000, task_id="task-1")
    _seed(world, C, state=State.APPLIED, tool=REFUND, amount=10000, task_id="task-1")
    admission = admit(world.runtime(), _decision(world, A, task_id="task-1", task_ceiling_minor=90000))
    assert admission.execute is not None and admission.execute.task_ceiling_minor == 90000
    assert admission.execute.task_signer == "ticketing"


@pytest.mark.parametrize("audience", [
    {"task_merchant_id": "acc_OTHER00001"}, {"task_agent_ids": ["agent_other"]},
    {"task_merchant_id": None, "task_agent_ids": None}, {"task_signer": None},
])  # fmt: skip
def test_a_call_outside_its_tasks_audience_is_refused_at_admit(world: World, audience: dict[str, Any]) -> None:
    # Issue 25 item 5: the admitting transaction re-checks the signed audience against the Decision's merchant and
    # agent; a Decision with no audience or signer (a v1 task from a gate worker before v2) is refused too.
    decision = _decision(world, A, task_id="task-1", task_ceiling_minor=90000, **audience)
    _refused_at_admit(world, decision, "G1_TASK_WRONG_AUDIENCE")


def test_a_task_ceiling_at_admit_counts_what_another_merchant_moved_under_the_same_signed_task(
    world: World,
) -> None:
    conn = open_ledger(world.path)
    with transaction(conn):  # merchant B's agent already moved Rs 700 under the helpdesk's ticket (same ledger)
        intents.insert_intent(
            conn, merchant_id="acc_OTHER00001", sik=B, tool=REFUND, subject_id=PAYMENT, amount_minor=70000,
            currency="INR", params={}, params_hash="ph", agent_id="agent_other", mandate_id="m", mandate_hash="h",
            operation_ref=None, distinct_reason=None, now=world.clock(), task_id="task-1", task_digest="td",
            task_ceiling_minor=100000, task_signer="ticketing",
        )  # fmt: skip
        conn.execute("UPDATE intents SET state = 'APPLIED' WHERE sik = ?", (B,))
    _refused_at_admit(world, _decision(world, A, task_id="task-1", task_ceiling_minor=100000),
                      "G2_EXCEEDS_TASK_CEILING")  # fmt: skip


def test_the_repeat_of_a_task_bound_call_does_not_count_itself_against_the_ceiling(world: World) -> None:
    rt = world.runtime()
    admit(rt, _decision(world, B, verdict="HOLD", task_id="task-1", task_ceiling_minor=60000, request_id="req-1"))
    admit(rt, _decision(world, A, grace_siks=[B], task_id="task-1", task_ceiling_minor=60000, request_id="req-2"))
    assert (_decision_row(world, "req-2")["verdict"], _decision_row(world, "req-2")["reason_code"]) == (
        "ALLOW", "ALLOWED")


# -- G2 against the gate's rail read -----------------------------------------------------------------------------------


def _refund(world: World, sik: str, amount: int, basis: int, **fields: Any) -> Decision:
    return _decision(world, sik, tool=REFUND, amount=amount, rail_basis_minor=basis, **fields)


def test_a_refund_above_what_is_left_after_other_refunds_in_motion_is_refused_as_exceeding_refundable(
    world: World,
) -> None:
    _seed(world, B, state=State.AUTHORIZED, amount=20000)
    _seed(world, C, state=State.AUTHORIZED, amount=99000, currency="USD")  # another currency: not counted
    _refused_at_admit(world, _refund(world, A, 30001, 50000), "G2_EXCEEDS_REFUNDABLE")


def test_a_settlement_above_the_balance_left_is_refused_as_exceeding_the_balance(world: World) -> None:
    _seed(world, B, state=State.HELD, tool=SETTLEMENT, amount=20000)
    _refused_at_admit(world, _decision(world, A, amount=30001, rail_basis_minor=50000), "G2_EXCEEDS_BALANCE")


def test_a_refund_of_exactly_what_is_left_is_admitted(world: World) -> None:
    _seed(world, B, state=State.AUTHORIZED, amount=20000)
    _seed(world, C, state=State.APPLIED, amount=99000, currency="USD", updated_at=T0 + 5)  # not counted
    _seed(world, "D" * 32, state=State.AUTHORIZED, amount=99000, currency="USD")  # another currency: not counted
    admission = admit(world.runtime(), _refund(world, A, 30000, 50000, rail_read_at_ms=T0))
    assert admission.execute is not None and admission.execute.state is State.AUTHORIZED


def test_a_refund_that_fits_only_if_money_applied_since_the_gates_read_were_in_it_is_refused_as_stale(
    world: World,
) -> None:
    _seed(world, B, state=State.AUTHORIZED, amount=20000)
    _seed(world, C, state=State.APPLIED, amount=20000, updated_at=T0 - 10)  # applied after the read at T0 - 100
    _refused_at_admit(world, _refund(world, A, 30000, 60000, rail_read_at_ms=T0 - 100), "G2_STALE_RAIL_READ",
                      CallerAction.RETRY_SAME_CALL)


def test_money_applied_before_the_gates_read_is_already_in_it(world: World) -> None:
    # Stamped before the read by more than INTERLOCK_CLOCK_SKEW_MS: before it, whichever clocks stamped the two.
    _seed(world, C, state=State.APPLIED, amount=20000, updated_at=T0 - 100 - world.settings.clock_skew_ms - 1)
    admission = admit(world.runtime(), _refund(world, A, 60000, 60000, rail_read_at_ms=T0 - 100))
    assert admission.execute is not None


def test_finding_f6_money_applied_after_the_gates_read_by_a_clock_behind_the_gates_is_counted(world: World) -> None:
    """Finding F6 (docs/simulation.md, ADR 0032): the gate read the balance at 10:00:00.000 by its clock; a payout
    applied after that read was recorded APPLIED by a rail worker whose clock ran 30 ms behind the gate's, stamped
    09:59:59.990. "Applied since the read" compared the two stamps and left it out, so the admission judged the
    next call against a read that did not show that money and admitted it (the simulator's seed 228 with skew: a
    payout the rail then refused for the balance). The rule: every APPLIED intent stamped up to
    INTERLOCK_CLOCK_SKEW_MS before the gate's read is counted as applied since it, so a recorder's clock behind the
    gate's by no more than that cannot hide money the read may not show; money counted that the read already showed
    only refuses (G2_STALE_RAIL_READ, and the repeat is judged against a fresh read)."""
    read_at = T0 - 100
    _seed(world, C, state=State.APPLIED, amount=20000, updated_at=read_at - 10)  # applied after it, stamped before
    # Clocks up to 30 ms apart: it may have been applied after the read, and 60,000 does not fit if it was.
    world.settings = world.settings.model_copy(update={"clock_skew_ms": 30})
    _refused_at_admit(world, _refund(world, B, 60000, 60000, rail_read_at_ms=read_at, request_id="two-clocks"),
                      "G2_STALE_RAIL_READ", CallerAction.RETRY_SAME_CALL)  # fmt: skip
    # One clock (a bound of 0): the stamp says before the read, so the read showed it; 60,000 fits what the read left.
    world.settings = world.settings.model_copy(update={"clock_skew_ms": 0})
    assert admit(world.runtime(), _refund(world, A, 60000, 60000, rail_read_at_ms=read_at,
                                         request_id="one-clock")).execute is not None  # fmt: skip


def test_finding_f6_a_payout_counts_payouts_applied_since_the_read_by_a_clock_behind_the_gates(world: World) -> None:
    """F6 on the payout path (ADR 0028: one balance for every payee): the same allowance, with each payout's fee."""
    from rail_worker.admit import _exceeds_rail_basis

    read_at = T0 - 100
    _seed(world, C, state=State.APPLIED, tool="create_payout", amount=20000, updated_at=read_at - 10)
    decision = _decision(world, A, tool="create_payout", amount=39001, rail_basis_minor=60000,
                         rail_read_at_ms=read_at)  # fmt: skip
    conn = open_ledger(world.path)
    # 39,001 + 500 of fee fits 60,000; with the payout stamped 10 ms before the read counted (20,000 + 500 of fee),
    # it does not.
    assert _exceeds_rail_basis(conn, decision, A, 500, (MERCHANT,), 0) is None
    assert _exceeds_rail_basis(conn, decision, A, 500, (MERCHANT,), 10) == "G2_STALE_RAIL_READ"


def _mark(world: World) -> int:
    from ledger.queries import applied_mark

    mark = applied_mark(open_ledger(world.path))
    assert mark is not None
    return mark


def test_finding_f9_money_applied_after_the_gates_mark_is_counted_whatever_its_stamp(world: World) -> None:
    """Finding F9 (docs/simulation.md, ADR 0032 amended): "applied since the gate's read" compared wall-clock
    stamps, so a step back of every clock further than INTERLOCK_CLOCK_SKEW_MS could stamp money applied after the
    read an hour before it. The gate now notes the ledger's applied order before it reads the rail, and the
    admission counts every intent applied after that mark, whatever its stamp says."""
    read_at = T0 - 100
    before = _mark(world)
    _seed(world, C, state=State.APPLIED, amount=20000, updated_at=read_at - 3_600_000)  # a clock an hour back
    _refused_at_admit(world, _refund(world, B, 60000, 60000, rail_read_at_ms=read_at, applied_mark=before,
                                     request_id="after-the-mark"), "G2_STALE_RAIL_READ", CallerAction.RETRY_SAME_CALL)
    # Applied before the mark: committed before the gate read the rail, so that read showed it, whatever its stamp
    # (here a clock a minute ahead of the read), and it is not counted twice.
    _seed(world, "D" * 32, state=State.APPLIED, amount=5000, updated_at=read_at + 60_000)
    after = _mark(world)
    assert after > before
    assert admit(world.runtime(), _refund(world, A, 60000, 60000, rail_read_at_ms=read_at, applied_mark=after,
                                         request_id="before-the-mark")).execute is not None  # fmt: skip


def test_finding_f9_a_payout_counts_payouts_applied_after_the_mark_with_their_fees(world: World) -> None:
    from rail_worker.admit import _exceeds_rail_basis

    before = _mark(world)
    _seed(world, C, state=State.APPLIED, tool="create_payout", amount=20000, updated_at=T0 - 3_600_000)
    _seed(world, "D" * 32, state=State.APPLIED, amount=30000, updated_at=T0)  # a refund: another basis
    conn = open_ledger(world.path)
    # 39,001 + 500 of fee fits 60,000 alone; with the payout applied after the mark (20,000 + 500) it does not.
    fits = _decision(world, A, tool="create_payout", amount=39000, rail_basis_minor=60000, applied_mark=before)
    over = _decision(world, A, tool="create_payout", amount=39001, rail_basis_minor=60000, applied_mark=before)
    assert _exceeds_rail_basis(conn, fits, A, 500, (MERCHANT,), 0) is None
    assert _exceeds_rail_basis(conn, over, A, 500, (MERCHANT,), 0) == "G2_STALE_RAIL_READ"
    assert _exceeds_rail_basis(conn, over.model_copy(update={"applied_mark": _mark(world)}), A, 500, (MERCHANT,),
                               0) is None  # fmt: skip
    # A mark beyond this ledger's end: the gate read a ledger this one was restored behind (ADR 0029).
    assert _exceeds_rail_basis(conn, fits.model_copy(update={"applied_mark": _mark(world) + 1}), A, 500, (MERCHANT,),
                               0) == "G2_STALE_RAIL_READ"  # fmt: skip


def test_a_refund_of_exactly_what_is_left_after_money_applied_since_the_read_is_admitted(world: World) -> None:
    _seed(world, C, state=State.APPLIED, amount=20000, updated_at=T0 - 10)
    admission = admit(world.runtime(), _refund(world, A, 40000, 60000, rail_read_at_ms=T0 - 100))
    assert admission.execute is not None


def test_the_repeat_of_an_admitted_refund_does_not_count_itself_against_the_refundable_amount(world: World) -> None:
    rt = world.runtime()
    admit(rt, _refund(world, B, 40000, 50000, verdict="HOLD", request_id="req-1"))
    admit(rt, _refund(world, A, 40000, 50000, grace_siks=[B], request_id="req-2"))
    assert (_decision_row(world, "req-2")["verdict"], _decision_row(world, "req-2")["reason_code"]) == (
        "ALLOW", "ALLOWED")
