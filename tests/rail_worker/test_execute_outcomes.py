"""What one execution of an AUTHORIZED intent (rail_worker/execute.py) sends and records: the exact request handed to
the rail for a refund and for a settlement, the attempt row written before and after the call, the intent's state,
reason code and audit records for an applied, refused, ambiguous or failing call, the Outcome published to the
waiting ingress, the reconciler hint for an UNKNOWN, G1 re-checked before the send (mandate replaced, expired or no
longer granting the tool), a redelivered job, and a superseded worker's answer kept as evidence. In-process, over a
real SQLite ledger, with the scripted rail and the injectable clock of tests/engine/send_world.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock.canonical import sha256_hex
from interlock.errors import StaleLease
from interlock.messages import CallerAction, IntentTerms, Outcome
from interlock.queues import reconcile_hint_key
from interlock.sik import idempotency_key_for, receipt_for
from ledger import intents
from ledger.db import open_ledger, transaction
from ledger.states import Event, State
from rail_worker import execute as execute_module
from rail_worker import lease as lease_module
from rail_worker.classify import Classified
from rail_worker.execute import execute
from rail_worker.runtime import RailRuntime
from rails.models import Refund, Settlement
from rails.razorpay import RailError, RailErrorKind
from tests.engine.send_world import REFUND, SETTLEMENT, T0, ScriptedRail, World, make_world
from tests.mandates import AGENT, MERCHANT, make_mandate

SIK = "S" * 32
STAMP = {"interlock_sik": SIK, "interlock_merchant": MERCHANT, "interlock_agent": AGENT}  # the stamp and whose call


class RecordingRail(ScriptedRail):
    """The scripted rail, also keeping every money call's full arguments as the rail client received them."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def create_instant_settlement(self, amount: int | None = None, *, settle_full_balance: bool = False,
                                  description: str | None = None, notes: dict[str, Any] | None = None) -> Settlement:
        self.requests.append(("settlement", {"amount": amount, "description": description, "notes": notes}))
        return super().create_instant_settlement(amount, description=description, notes=notes)

    def create_refund(self, payment_id: str, amount: int | None, *, speed: str | None = None,
                      notes: dict[str, Any] | None = None, receipt: str | None = None,
                      idempotency_key: str | None = None) -> Refund:  # fmt: skip
        self.requests.append(("refund", {"payment_id": payment_id, "amount": amount, "speed": speed, "notes": notes,
                                         "receipt": receipt, "idempotency_key": idempotency_key}))  # fmt: skip
        return super().create_refund(payment_id, amount, speed=speed, notes=notes, receipt=receipt,
                                     idempotency_key=idempotency_key)  # fmt: skip


class Hints:
    """Stands in for Redis: keeps the reconcile hints pushed."""

    def __init__(self) -> None:
        self.pushed: list[tuple[str, str]] = []

    def rpush(self, key: str, value: str) -> None:
        self.pushed.append((key, value))


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    made = make_world(tmp_path, monkeypatch)
    made.rail = RecordingRail()
    yield made
    made.close()


def _rail(world: World) -> RecordingRail:
    assert isinstance(world.rail, RecordingRail)
    return world.rail


def _authorized(world: World, tool: str, params: dict[str, Any], amount: int = 50000) -> None:
    conn = open_ledger(world.path)
    subject = "balance" if tool == SETTLEMENT else "pay_SEND0000001"
    with transaction(conn):
        intents.insert_intent(
            conn, merchant_id=MERCHANT, sik=SIK, tool=tool, subject_id=subject, amount_minor=amount, currency="INR",
            params=params, params_hash="ph", agent_id=AGENT, mandate_id=world.mandate.mandate_id,
            mandate_hash=world.mandate.mandate_hash, operation_ref=None, distinct_reason=None, now=world.clock(),
        )  # fmt: skip
        intents.transition(conn, MERCHANT, SIK, Event.GATES_PASSED, now=world.clock())


def _attempt(world: World, seq: int = 1) -> dict[str, Any]:
    row = open_ledger(world.path).execute(
        "SELECT * FROM intent_attempts WHERE sik = ? AND attempt_seq = ?", (SIK, seq)).fetchone()
    assert row is not None
    data = dict(row)
    for key in ("request_json", "response_json"):
        data[key] = None if data[key] is None else json.loads(data[key])
    return data


def _audit(world: World, kind: str) -> list[dict[str, Any]]:
    rows = open_ledger(world.path).execute("SELECT payload_json FROM audit_log WHERE kind = ? ORDER BY seq", (kind,))
    return [json.loads(r[0]) for r in rows]


def _terms(tool: str, amount: int = 50000) -> IntentTerms:
    subject = "balance" if tool == SETTLEMENT else "pay_SEND0000001"
    return IntentTerms(merchant_id=MERCHANT, tool=tool, subject=subject, amount_minor=amount, currency="INR")


def _published(outcome: Outcome | None) -> Outcome:
    """The Outcome without its trace (timestamps for people reading a trace)."""
    assert outcome is not None
    return outcome.model_copy(update={"trace": {}})


def _runtime(world: World) -> RailRuntime:
    rt = world.runtime()
    rt.redis = Hints()  # type: ignore[assignment]
    return rt


# -- the request, exactly ----------------------------------------------------------------------------------------------


def test_a_refund_is_sent_with_its_payment_amount_stamp_receipt_idempotency_key_and_speed(world: World) -> None:
    _authorized(world, REFUND, {"amount": 50000, "speed": "optimum", "notes": {"ticket": "T-1"}})
    outcome = execute(_runtime(world), MERCHANT, SIK, request_id="req-1")
    request = {"payment_id": "pay_SEND0000001", "amount": 50000, "notes": {"ticket": "T-1", **STAMP},
               "receipt": receipt_for(SIK), "idempotency_key": idempotency_key_for(SIK), "speed": "optimum"}
    assert _rail(world).requests == [("refund", request)]
    refund_id = world.rail.stamped(SIK)[0]
    assert _published(outcome) == Outcome(request_id="req-1", state="APPLIED", sik=SIK, intent=_terms(REFUND),
                                          rail_entity_id=refund_id, reason_code=None,
                                          caller_action=CallerAction.DONE, replayed=False)  # fmt: skip
    assert outcome is not None and set(outcome.trace) >= {"request_sent", "answer_received", "recorded"}
    attempt = _attempt(world)
    assert attempt["request_json"] == request
    assert {k: attempt[k] for k in ("lease_epoch", "lease_expires_at", "started_at", "sent_at", "finished_at",
                                    "outcome", "rail_entity_id", "http_status", "fee_minor", "tax_minor",
                                    "error_code")} == {
        "lease_epoch": 1, "lease_expires_at": T0 + world.settings.lease_ttl_ms, "started_at": T0, "sent_at": T0,
        "finished_at": T0, "outcome": "APPLIED", "rail_entity_id": refund_id, "http_status": 200, "fee_minor": None,
        "tax_minor": None, "error_code": None}  # fmt: skip
    assert attempt["response_json"]["id"] == refund_id


def test_a_refund_without_speed_or_notes_is_sent_with_the_stamp_alone(world: World) -> None:
    _authorized(world, REFUND, {"amount": 50000})
    execute(_runtime(world), MERCHANT, SIK, request_id=None)
    assert _rail(world).requests == [("refund", {
        "payment_id": "pay_SEND0000001", "amount": 50000, "notes": STAMP, "receipt": receipt_for(SIK),
        "idempotency_key": idempotency_key_for(SIK), "speed": None})]  # fmt: skip
    assert "speed" not in _attempt(world)["request_json"]


def test_a_settlement_is_sent_with_its_amount_description_and_stamp_and_records_its_fee(world: World) -> None:
    _authorized(world, SETTLEMENT, {"amount": 50000, "description": "payout", "notes": {"k": "v"}})
    execute(_runtime(world), MERCHANT, SIK, request_id=None)
    request = {"amount": 50000, "description": "payout", "notes": {"k": "v", **STAMP}}
    assert _rail(world).requests == [("settlement", request)]
    attempt = _attempt(world)
    assert (attempt["request_json"], attempt["fee_minor"], attempt["tax_minor"]) == (request, 3, 1)
    intent = world.intent()
    assert (intent.state, intent.rail_entity_id, intent.reason_code) == (
        State.APPLIED, world.rail.stamped(SIK)[0], None)


def test_a_settlement_without_a_description_is_sent_without_one(world: World) -> None:
    _authorized(world, SETTLEMENT, {"amount": 50000, "description": ""})
    execute(_runtime(world), MERCHANT, SIK, request_id=None)
    assert _rail(world).requests == [("settlement", {"amount": 50000, "description": None, "notes": STAMP})]
    assert _attempt(world)["request_json"] == {"amount": 50000, "notes": STAMP}


# -- the record of the answer ------------------------------------------------------------------------------------------


def test_an_applied_answer_is_recorded_on_the_audit_chain_by_the_worker_with_its_attempt_and_entity(
    world: World,
) -> None:
    _authorized(world, SETTLEMENT, {"amount": 50000})
    execute(_runtime(world), MERCHANT, SIK, request_id=None)
    entity, attempt = world.rail.stamped(SIK)[0], _attempt(world)
    request_json, response_json = open_ledger(world.path).execute(
        "SELECT request_json, response_json FROM intent_attempts WHERE sik = ?", (SIK,)).fetchone()
    assert _audit(world, "TRANSITION")[-2:] == [
        {"merchant_id": MERCHANT, "sik": SIK, "event": "ATTEMPT_STARTED", "from": "AUTHORIZED", "to": "IN_FLIGHT",
         "attempt_seq": 1, "actor": "rail:A", "request_sha256": sha256_hex(request_json),
         "set": {"lease_owner": "rail:A", "lease_epoch": 1, "lease_expires_at": attempt["lease_expires_at"]}},
        {"merchant_id": MERCHANT, "sik": SIK, "event": "RAIL_APPLIED", "from": "IN_FLIGHT", "to": "APPLIED",
         "attempt_seq": 1, "actor": "rail:A", "detail": {"attempt_seq": 1}, "rail_entity_id": entity,
         "set": {"reason_code": None, "rail_entity_id": entity}},
    ]  # fmt: skip
    assert _audit(world, "ATTEMPT_FINISHED") == [{  # the answer on the attempt row, as the chain has it
        "merchant_id": MERCHANT, "sik": SIK, "attempt_seq": 1, "outcome": "APPLIED", "rail_entity_id": entity,
        "http_status": attempt["http_status"], "fee_minor": attempt["fee_minor"], "tax_minor": attempt["tax_minor"],
        "error_code": None, "sent_at": attempt["sent_at"], "response_sha256": sha256_hex(response_json),
    }]  # fmt: skip


def test_a_definitive_refusal_is_failed_terminal_with_the_rails_status_code_and_body_on_the_attempt(
    world: World,
) -> None:
    _authorized(world, REFUND, {"amount": 50000})
    world.rail.reject = RailError(RailErrorKind.REJECTED, "400", method="POST", path="/x", http_status=400,
                                  code="BAD_REQUEST_ERROR", description="The amount is invalid", field="amount",
                                  body='{"e": 1}')  # fmt: skip
    rt = _runtime(world)
    outcome = execute(rt, MERCHANT, SIK, request_id="req-1")
    assert _published(outcome) == Outcome(request_id="req-1", state="FAILED_TERMINAL", sik=SIK, intent=_terms(REFUND),
                                          reason_code="RAIL_REJECTED", caller_action=CallerAction.DO_NOT_RETRY)
    attempt = _attempt(world)
    assert (attempt["outcome"], attempt["http_status"], attempt["error_code"], attempt["response_json"],
            attempt["rail_entity_id"]) == ("REJECTED", 400, "BAD_REQUEST_ERROR", '{"e": 1}', None)  # fmt: skip
    assert _audit(world, "TRANSITION")[-1]["detail"] == {"attempt_seq": 1, "description": "The amount is invalid",
                                                         "field": "amount"}  # fmt: skip
    assert rt.redis.pushed == []  # type: ignore[attr-defined]


def test_an_ambiguous_answer_leaves_the_intent_unknown_and_hints_the_reconciler(world: World) -> None:
    _authorized(world, SETTLEMENT, {"amount": 50000})
    world.rail.reject = RailError(RailErrorKind.AMBIGUOUS, "504", method="POST", path="/x", http_status=504)
    world.rail.apply_then_fail = True
    rt = _runtime(world)
    outcome = execute(rt, MERCHANT, SIK, request_id="req-1")
    assert _published(outcome) == Outcome(request_id="req-1", state="UNKNOWN", sik=SIK, intent=_terms(SETTLEMENT),
                                          reason_code="RAIL_AMBIGUOUS", caller_action=CallerAction.RETRY_SAME_CALL)
    assert rt.redis.pushed == [(reconcile_hint_key(), f"{MERCHANT}|{SIK}")]  # type: ignore[attr-defined]
    assert (world.intent().state, world.intent().rail_entity_id, _attempt(world)["outcome"]) == (
        State.UNKNOWN, None, "AMBIGUOUS")


def test_an_unexpected_error_from_the_rail_client_is_ambiguous_with_the_error_named(world: World) -> None:
    _authorized(world, SETTLEMENT, {"amount": 50000})

    def the_client_breaks() -> None:
        raise ValueError("bad JSON from the gateway: " + "x" * 600)

    world.rail.during_call = the_client_breaks
    execute(_runtime(world), MERCHANT, SIK, request_id=None)
    intent = world.intent()
    assert (intent.state, intent.reason_code) == (State.UNKNOWN, "RAIL_AMBIGUOUS")
    assert _attempt(world)["outcome"] == "AMBIGUOUS"
    error = ("ValueError: bad JSON from the gateway: " + "x" * 600)[:500]
    assert _audit(world, "TRANSITION")[-1]["detail"] == {"attempt_seq": 1, "error": error}


def test_an_executed_job_published_without_a_request_id_returns_nothing(world: World) -> None:
    _authorized(world, SETTLEMENT, {"amount": 50000})
    assert execute(_runtime(world), MERCHANT, SIK, request_id=None) is None
    assert world.intent().state is State.APPLIED


# -- a redelivered job and G1 before the send -------------------------------------------------------------------------


def test_a_redelivered_job_is_answered_with_the_recorded_outcome_and_sends_nothing(world: World) -> None:
    _authorized(world, SETTLEMENT, {"amount": 50000})
    rt = _runtime(world)
    execute(rt, MERCHANT, SIK, request_id="req-1")
    again = execute(rt, MERCHANT, SIK, request_id="req-2")
    assert again == Outcome(request_id="req-2", state="APPLIED", sik=SIK, intent=_terms(SETTLEMENT),
                            rail_entity_id=world.rail.stamped(SIK)[0], caller_action=CallerAction.DONE, replayed=True)
    assert execute(rt, MERCHANT, SIK, request_id=None) is None
    assert len(world.rail.calls) == 1


def _withdrawn(world: World, request_id: str | None) -> Outcome | None:
    return execute(_runtime(world), MERCHANT, SIK, request_id=request_id)


def test_a_replaced_mandate_withdraws_the_authorization_and_names_the_hash_it_was_judged_under(world: World) -> None:
    _authorized(world, SETTLEMENT, {"amount": 50000})
    judged_under = world.mandate.mandate_hash
    world.mandate = make_mandate({"issued_at": world.mandate.issued_at, "expires_at": world.mandate.expires_at,
                                  "purpose": "replaced"})  # fmt: skip
    outcome = _withdrawn(world, "req-1")
    assert outcome == Outcome(request_id="req-1", state="CONFIRMED_NOT_APPLIED", sik=SIK, intent=_terms(SETTLEMENT),
                              reason_code="G1_MANDATE_CHANGED", caller_action=CallerAction.RETRY_SAME_CALL)
    assert _audit(world, "TRANSITION")[-1] == {
        "merchant_id": MERCHANT, "sik": SIK, "event": "AUTHORIZATION_WITHDRAWN", "from": "AUTHORIZED",
        "to": "CONFIRMED_NOT_APPLIED", "attempt_seq": 0, "actor": "rail:A",
        "detail": {"reason_code": "G1_MANDATE_CHANGED", "mandate_hash": judged_under},
        "set": {"reason_code": "G1_MANDATE_CHANGED"}}  # fmt: skip
    assert world.rail.calls == []


def test_a_first_attempt_under_a_mandate_that_no_longer_grants_the_tool_is_blocked(world: World) -> None:
    grants = {k: v for k, v in world.mandate.model_dump(mode="json")["scope"]["grants"].items() if k != SETTLEMENT}
    world.mandate = make_mandate({"issued_at": world.mandate.issued_at, "expires_at": world.mandate.expires_at,
                                  "scope.grants": grants})  # fmt: skip
    _authorized(world, SETTLEMENT, {"amount": 50000})
    assert _withdrawn(world, None) is None
    intent = world.intent()
    assert (intent.state, intent.reason_code) == (State.BLOCKED, "G1_TOOL_NOT_GRANTED")
    assert _audit(world, "TRANSITION")[-1]["event"] == "GATES_BLOCKED"
    assert world.rail.calls == []


def test_a_first_attempt_under_an_expired_mandate_is_blocked_as_expired(world: World) -> None:
    world.mandate = make_mandate({"issued_at": world.mandate.issued_at, "expires_at": T0 + 10})
    _authorized(world, SETTLEMENT, {"amount": 50000})
    world.clock.advance(10)
    outcome = _withdrawn(world, "req-1")
    assert outcome is not None and (outcome.state, outcome.reason_code, outcome.replayed) == (
        "BLOCKED", "G1_MANDATE_EXPIRED", False)
    assert world.rail.calls == []


def test_a_mandate_that_expires_a_millisecond_later_still_lets_the_call_leave(world: World) -> None:
    world.mandate = make_mandate({"issued_at": world.mandate.issued_at, "expires_at": T0 + 10})
    _authorized(world, SETTLEMENT, {"amount": 50000})
    world.clock.advance(9)
    execute(_runtime(world), MERCHANT, SIK, request_id=None)
    assert world.intent().state is State.APPLIED


# -- a superseded worker's answer --------------------------------------------------------------------------------------


def test_a_superseded_workers_answer_is_kept_on_its_attempt_row_and_the_audit_chain(world: World) -> None:
    _authorized(world, SETTLEMENT, {"amount": 50000})
    a = _runtime(world)

    def a_stalls_and_b_takes_over() -> None:
        world.clock.advance(3 * world.settings.lease_ttl_ms)
        lease_module.boot(world.runtime("rail:B", take_lease=False))

    world.rail.during_call = a_stalls_and_b_takes_over
    assert execute(a, MERCHANT, SIK, request_id="req-1") is None
    entity = world.rail.stamped(SIK)[0]
    attempt = _attempt(world)
    assert {k: attempt[k] for k in ("sent_at", "finished_at", "outcome", "rail_entity_id", "http_status",
                                    "fee_minor", "tax_minor", "error_code")} == {
        "sent_at": T0, "finished_at": T0 + 3 * world.settings.lease_ttl_ms, "outcome": "FENCED_APPLIED",
        "rail_entity_id": entity, "http_status": 200, "fee_minor": 3, "tax_minor": 1, "error_code": None,
    }  # fmt: skip
    assert attempt["response_json"]["id"] == entity
    assert _audit(world, "FENCED_OUTCOME") == [{"merchant_id": MERCHANT, "sik": SIK, "attempt_seq": 1,
                                                "outcome": "APPLIED", "rail_entity_id": entity, "worker": "rail:A"}]
    intent = world.intent()
    assert (intent.state, intent.rail_entity_id) == (State.APPLIED, entity), "a stamped answer settles the intent"
    assert _audit(world, "TRANSITION")[-1]["actor"] == "rail:A"


def test_a_superseded_workers_refusal_is_kept_as_evidence_and_settles_nothing(world: World) -> None:
    _authorized(world, SETTLEMENT, {"amount": 50000})
    a = _runtime(world)
    world.rail.reject = RailError(RailErrorKind.REJECTED, "400", method="POST", path="/x", http_status=400,
                                  code="BAD_REQUEST_ERROR", description="Insufficient balance", body="no")

    def a_stalls_and_b_takes_over() -> None:
        world.clock.advance(3 * world.settings.lease_ttl_ms)
        lease_module.boot(world.runtime("rail:B", take_lease=False))

    world.rail.during_call = a_stalls_and_b_takes_over
    execute(a, MERCHANT, SIK, request_id=None)
    attempt = _attempt(world)
    assert (attempt["outcome"], attempt["http_status"], attempt["error_code"], attempt["response_json"]) == (
        "FENCED_REJECTED", 400, "BAD_REQUEST_ERROR", "no")
    assert world.intent().state is State.UNKNOWN  # B's boot recovered the row; the reconciler settles it


def test_record_on_a_fenced_row_raises_and_the_classified_answer_is_not_applied(world: World) -> None:
    # The control for the two tests above: record() itself refuses a superseded epoch.
    _authorized(world, SETTLEMENT, {"amount": 50000})
    rt = _runtime(world)
    started = execute_module.begin_attempt(rt, MERCHANT, SIK, request_id=None)
    assert isinstance(started, execute_module.Started)
    applied = Classified(Event.RAIL_APPLIED, "APPLIED", rail_entity_id="setlod_X", http_status=200)
    with pytest.raises(StaleLease, match="epoch"):
        rt.write(lambda c: execute_module.record(rt, c, started.intent, applied, lease_epoch=started.lease_epoch + 1))
    assert world.intent().state is State.IN_FLIGHT
