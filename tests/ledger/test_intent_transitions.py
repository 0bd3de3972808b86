"""ledger.intents: what a proposal, a transition, an attempt and a reconcile pass write — every field of the intent
row afterwards and the exact audit record committed with it — and which writes are refused, with which error and
with nothing written."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
from typing import Any

import pytest

from interlock.errors import IllegalTransition, IntentNotFound, LedgerError, StaleLease
from interlock.verdicts import allow, block, hold
from ledger import audit, intents
from ledger.db import transaction
from ledger.intents import Intent
from ledger.states import Event, State

M = "acc_TEST"
SIK = "K" * 32
T0 = 1_000


def records(conn: sqlite3.Connection, after: int = 0) -> list[tuple[int, int, str, dict[str, Any]]]:
    """The audit records after seq *after*: (seq, ts, kind, payload)."""
    rows = conn.execute("SELECT seq, ts, kind, payload_json FROM audit_log WHERE seq > ? ORDER BY seq", (after,))
    return [(r["seq"], r["ts"], r["kind"], json.loads(r["payload_json"])) for r in rows]


def proposed(conn: sqlite3.Connection, sik: str = SIK, **kw: Any) -> Intent:
    fields: dict[str, Any] = dict(
        merchant_id=M, sik=sik, tool="create_refund", subject_id="pay_SUBJ0001", amount_minor=2500, currency="INR",
        params={"payment_id": "pay_SUBJ0001", "amount": 2500}, params_hash="phash", agent_id="agent_k",
        mandate_id="mnd_k", mandate_hash="mhash", operation_ref="op-1", distinct_reason="second item", now=T0,
    )  # fmt: skip
    fields.update(kw)
    with transaction(conn):
        intent = intents.insert_intent(conn, **fields)
    assert intent is not None
    return intent


EXPECTED = Intent(
    merchant_id=M, sik=SIK, tool="create_refund", subject_id="pay_SUBJ0001", amount_minor=2500, currency="INR",
    params_hash="phash", params={"payment_id": "pay_SUBJ0001", "amount": 2500}, state=State.PROPOSED, attempt_seq=0,
    reconcile_attempts=0, lease_owner=None, lease_epoch=None, lease_expires_at=None, rail_entity_id=None,
    reason_code=None, agent_id="agent_k", mandate_id="mnd_k", mandate_hash="mhash", operation_ref="op-1",
    distinct_reason="second item", hold_expires_at=None, authorized_at=None, first_seen_at=T0, updated_at=T0,
    task_id=None, task_digest=None, task_ceiling_minor=None,
)  # fmt: skip


def step(conn: sqlite3.Connection, event: Event, now: int, sik: str = SIK, **kw: Any) -> Intent:
    with transaction(conn):
        return intents.transition(conn, M, sik, event, now=now, **kw)


def in_flight(conn: sqlite3.Connection, sik: str = SIK, *, epoch: int = 3) -> Intent:
    proposed(conn, sik)
    step(conn, Event.GATES_PASSED, T0 + 1, sik)
    with transaction(conn):
        return intents.start_attempt(conn, M, sik, now=T0 + 2, lease_owner="rw-1", lease_epoch=epoch,
                                     lease_expires_at=T0 + 5000, request={"amount": 2500, "notes": {"k": "v"}})


def transition_record(event: str, src: str, dst: str, attempt_seq: int = 0, sets: dict[str, Any] | None = None,
                      **extra: Any) -> dict[str, Any]:  # fmt: skip
    """A TRANSITION payload; *sets* is what the record says the transition set besides the state (ADR 0020)."""
    return {"merchant_id": M, "sik": SIK, "event": event, "from": src, "to": dst, "attempt_seq": attempt_seq,
            "set": sets or {}, **extra}  # fmt: skip


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


PARAMS_JSON = '{"amount":2500,"payment_id":"pay_SUBJ0001"}'


# --- proposing -------------------------------------------------------------------------------------------------


def test_a_proposal_writes_a_proposed_row_and_its_audit_record(ledger: sqlite3.Connection) -> None:
    assert proposed(ledger) == EXPECTED
    assert intents.require_intent(ledger, M, SIK) == EXPECTED
    params_json = ledger.execute("SELECT params_json FROM intents").fetchone()[0]
    assert params_json == PARAMS_JSON  # canonical: what params_hash is over
    assert records(ledger) == [(1, T0, "INTENT_PROPOSED", {
        "merchant_id": M, "sik": SIK, "tool": "create_refund", "subject": "pay_SUBJ0001", "amount_minor": 2500,
        "currency": "INR", "agent_id": "agent_k", "mandate_hash": "mhash", "operation_ref": "op-1",
        "distinct_reason": "second item", "mandate_id": "mnd_k", "params_hash": "phash",
        "params_sha256": sha256(PARAMS_JSON),  # every column of the row is bound to the chain (ADR 0020)
    })]  # fmt: skip


def test_a_proposal_bound_to_a_task_records_the_task(ledger: sqlite3.Connection) -> None:
    intent = proposed(ledger, task_id="task_9", task_digest="tdigest", task_ceiling_minor=7000, operation_ref=None,
                      distinct_reason=None)  # fmt: skip
    assert intent == dataclasses.replace(EXPECTED, task_id="task_9", task_digest="tdigest", task_ceiling_minor=7000,
                                         operation_ref=None, distinct_reason=None)  # fmt: skip
    assert records(ledger)[-1][3] == {
        "merchant_id": M, "sik": SIK, "tool": "create_refund", "subject": "pay_SUBJ0001", "amount_minor": 2500,
        "currency": "INR", "agent_id": "agent_k", "mandate_hash": "mhash", "operation_ref": None,
        "distinct_reason": None, "task_id": "task_9", "task_digest": "tdigest", "task_ceiling_minor": 7000,
        "mandate_id": "mnd_k", "params_hash": "phash", "params_sha256": sha256(PARAMS_JSON),
    }  # fmt: skip


def test_a_second_proposal_of_the_same_sik_is_refused_by_the_key_and_writes_nothing(ledger: sqlite3.Connection) -> None:
    proposed(ledger)
    with transaction(ledger):
        again = intents.insert_intent(
            ledger, merchant_id=M, sik=SIK, tool="create_refund", subject_id="pay_OTHER", amount_minor=9,
            currency="INR", params={}, params_hash="other", agent_id="agent_k", mandate_id="mnd_k",
            mandate_hash="mhash", operation_ref=None, distinct_reason=None, now=T0 + 1,
        )  # fmt: skip
    assert again is None
    assert intents.require_intent(ledger, M, SIK) == EXPECTED
    assert audit.count(ledger) == 1


def test_the_same_sik_under_another_merchant_is_another_intent(ledger: sqlite3.Connection) -> None:
    proposed(ledger)
    other = proposed(ledger, merchant_id="acc_OTHER", amount_minor=7)
    assert (other.merchant_id, other.amount_minor) == ("acc_OTHER", 7)
    assert intents.get_intent(ledger, M, SIK) == EXPECTED
    assert intents.get_intent(ledger, M, "Z" * 32) is None


def test_a_missing_intent_is_reported_by_merchant_and_sik(ledger: sqlite3.Connection) -> None:
    with pytest.raises(IntentNotFound) as info:
        intents.require_intent(ledger, M, SIK)
    assert (info.value.merchant_id, info.value.sik, str(info.value)) == (
        M, SIK, f"no intent for merchant {M} with sik {SIK}")
    with pytest.raises(IntentNotFound), transaction(ledger):
        intents.transition(ledger, M, SIK, Event.GATES_PASSED, now=T0)


def test_terms_are_what_the_operation_is_about(ledger: sqlite3.Connection) -> None:
    assert proposed(ledger).terms() == {"merchant_id": M, "tool": "create_refund", "subject": "pay_SUBJ0001",
                                        "amount_minor": 2500, "currency": "INR"}  # fmt: skip


# --- transitions -----------------------------------------------------------------------------------------------


def test_authorizing_stamps_authorized_at_and_writes_one_transition_record(ledger: sqlite3.Connection) -> None:
    proposed(ledger)
    after = step(ledger, Event.GATES_PASSED, T0 + 7)
    assert after == dataclasses.replace(EXPECTED, state=State.AUTHORIZED, authorized_at=T0 + 7, updated_at=T0 + 7)
    assert intents.require_intent(ledger, M, SIK) == after
    assert records(ledger, 1) == [
        (2, T0 + 7, "TRANSITION", transition_record("GATES_PASSED", "PROPOSED", "AUTHORIZED"))]


def test_a_transition_not_into_authorized_leaves_authorized_at(ledger: sqlite3.Connection) -> None:
    proposed(ledger)
    step(ledger, Event.GATES_PASSED, T0 + 1)
    after = step(ledger, Event.TERMS_MISMATCH, T0 + 2, actor="ops@example.com", detail={"why": "suspicious"},
                 set_fields={"reason_code": "Q_MANUAL", "hold_expires_at": 99, "mandate_id": "mnd_2",
                             "mandate_hash": "mh2"})  # fmt: skip
    assert after == dataclasses.replace(EXPECTED, state=State.QUARANTINED, authorized_at=T0 + 1, updated_at=T0 + 2,
                                        reason_code="Q_MANUAL", hold_expires_at=99, mandate_id="mnd_2",
                                        mandate_hash="mh2")  # fmt: skip
    assert records(ledger, 2) == [(3, T0 + 2, "TRANSITION", transition_record(
        "TERMS_MISMATCH", "AUTHORIZED", "QUARANTINED", actor="ops@example.com", detail={"why": "suspicious"},
        sets={"reason_code": "Q_MANUAL", "hold_expires_at": 99, "mandate_id": "mnd_2", "mandate_hash": "mh2"}))]


def test_a_rail_outcome_records_the_rail_entity_and_the_attempt(ledger: sqlite3.Connection) -> None:
    in_flight(ledger)
    after = step(ledger, Event.RAIL_APPLIED, T0 + 9, expect_epoch=3, expect_attempt_seq=1,
                 set_fields={"rail_entity_id": "rfnd_1", "reason_code": None})  # fmt: skip
    assert (after.state, after.rail_entity_id, after.attempt_seq, after.updated_at) == (State.APPLIED, "rfnd_1", 1,
                                                                                        T0 + 9)  # fmt: skip
    assert records(ledger)[-1] == (4, T0 + 9, "TRANSITION", transition_record(
        "RAIL_APPLIED", "IN_FLIGHT", "APPLIED", attempt_seq=1, rail_entity_id="rfnd_1",
        sets={"rail_entity_id": "rfnd_1", "reason_code": None}))


def test_an_edge_not_in_the_table_is_refused_and_nothing_is_written(ledger: sqlite3.Connection) -> None:
    proposed(ledger)
    with pytest.raises(IllegalTransition) as info, transaction(ledger):
        intents.transition(ledger, M, SIK, Event.RAIL_APPLIED, now=T0 + 1)
    assert (info.value.sik, info.value.state, info.value.event) == (SIK, State.PROPOSED, Event.RAIL_APPLIED)
    assert str(info.value) == f"illegal transition for intent {SIK}: RAIL_APPLIED is not allowed from PROPOSED"
    assert intents.require_intent(ledger, M, SIK) == EXPECTED
    assert audit.count(ledger) == 1


def test_attempt_started_is_refused_outside_start_attempt(ledger: sqlite3.Connection) -> None:
    proposed(ledger)
    step(ledger, Event.GATES_PASSED, T0 + 1)
    with pytest.raises(IllegalTransition) as info, transaction(ledger):
        intents.transition(ledger, M, SIK, Event.ATTEMPT_STARTED, now=T0 + 2)
    assert (info.value.sik, info.value.state, info.value.event) == (SIK, "?", "ATTEMPT_STARTED outside start_attempt()")
    assert intents.require_intent(ledger, M, SIK).state is State.AUTHORIZED


def _held(conn: sqlite3.Connection) -> None:
    proposed(conn)
    step(conn, Event.GATES_HELD, T0 + 1)


@pytest.mark.parametrize("reasserted", [None, block("G3_WINDOW_CALLS"), hold("G4_HOLD")])
def test_a_release_without_an_allowing_reassertion_is_refused(ledger: sqlite3.Connection, reasserted: Any) -> None:
    _held(ledger)
    with pytest.raises(IllegalTransition) as info, transaction(ledger):
        intents.transition(ledger, M, SIK, Event.HOLD_RELEASED, now=T0 + 2, reasserted=reasserted)
    assert (info.value.sik, info.value.state, info.value.event) == (
        SIK, "?", "HOLD_RELEASED without a re-assertion of the mandate and limits that allowed it")
    assert intents.require_intent(ledger, M, SIK).state is State.HELD
    assert audit.count(ledger) == 2


def test_a_release_records_the_reassertion_beside_the_callers_detail(ledger: sqlite3.Connection) -> None:
    _held(ledger)
    after = step(ledger, Event.HOLD_RELEASED, T0 + 2, actor="ops@example.com", detail={"note": "ok"},
                 reasserted=allow("REASSERTED", now_ms=T0 + 2))  # fmt: skip
    assert (after.state, after.authorized_at, after.updated_at) == (State.AUTHORIZED, T0 + 2, T0 + 2)
    assert records(ledger)[-1][3] == transition_record("HOLD_RELEASED", "HELD", "AUTHORIZED", actor="ops@example.com",
                                                       detail={"note": "ok", "reasserted": "REASSERTED"})


def test_a_release_without_detail_still_records_the_reassertion(ledger: sqlite3.Connection) -> None:
    _held(ledger)
    step(ledger, Event.HOLD_RELEASED, T0 + 2, reasserted=allow("REASSERTED"))
    assert records(ledger)[-1][3]["detail"] == {"reasserted": "REASSERTED"}


def test_a_non_reauthorizing_event_ignores_a_reassertion(ledger: sqlite3.Connection) -> None:
    proposed(ledger)
    step(ledger, Event.GATES_PASSED, T0 + 1, reasserted=block("IRRELEVANT"))
    assert "detail" not in records(ledger)[-1][3]


def _quarantined(conn: sqlite3.Connection) -> None:
    proposed(conn)
    step(conn, Event.GATES_HELD, T0 + 1)
    step(conn, Event.QUARANTINE, T0 + 2)


@pytest.mark.parametrize(("actor", "detail"), [(None, {"evidence": "stmt line 7"}), ("", {"evidence": "stmt"}),
                                               ("ops", None), ("ops", {"evidence": ""}), ("ops", {"note": "x"})])
def test_an_operator_resolution_needs_both_an_operator_and_evidence(ledger: sqlite3.Connection, actor: str | None,
                                                                   detail: dict[str, str] | None) -> None:
    _quarantined(ledger)
    with pytest.raises(IllegalTransition) as info, transaction(ledger):
        intents.transition(ledger, M, SIK, Event.OPERATOR_RESOLVED_APPLIED, now=T0 + 3, actor=actor, detail=detail)
    assert (info.value.sik, info.value.state, info.value.event) == (
        SIK, State.QUARANTINED, "OPERATOR_RESOLVED_APPLIED without an operator and evidence text")
    assert audit.count(ledger) == 3


def test_an_operator_resolution_with_evidence_is_recorded_with_both(ledger: sqlite3.Connection) -> None:
    _quarantined(ledger)
    after = step(ledger, Event.OPERATOR_RESOLVED_NOT_APPLIED, T0 + 3, actor="ops",
                 detail={"evidence": "stmt line 7"})  # fmt: skip
    assert after.state is State.CONFIRMED_NOT_APPLIED
    assert records(ledger)[-1][3] == transition_record("OPERATOR_RESOLVED_NOT_APPLIED", "QUARANTINED",
                                                       "CONFIRMED_NOT_APPLIED", actor="ops",
                                                       detail={"evidence": "stmt line 7"})  # fmt: skip


def test_a_writer_holding_a_superseded_epoch_is_fenced_out(ledger: sqlite3.Connection) -> None:
    before = in_flight(ledger, epoch=3)
    with pytest.raises(StaleLease) as info, transaction(ledger):
        intents.transition(ledger, M, SIK, Event.RAIL_APPLIED, now=T0 + 9, expect_epoch=2, expect_attempt_seq=1)
    assert (info.value.sik, str(info.value)) == (SIK, f"stale write refused for intent {SIK}: lease epoch is 3, "
                                                      "writer holds 2")  # fmt: skip
    with pytest.raises(StaleLease) as info, transaction(ledger):
        intents.transition(ledger, M, SIK, Event.RAIL_APPLIED, now=T0 + 9, expect_epoch=3, expect_attempt_seq=0)
    assert (info.value.sik, str(info.value)) == (SIK, f"stale write refused for intent {SIK}: attempt_seq is 1, "
                                                      "writer holds 0")  # fmt: skip
    assert intents.require_intent(ledger, M, SIK) == before
    assert audit.count(ledger) == 3


def test_fields_outside_the_settable_set_are_refused(ledger: sqlite3.Connection) -> None:
    proposed(ledger)
    with pytest.raises(ValueError, match=r"^transition\(\) cannot set \['attempt_seq', 'state'\]$"), \
            transaction(ledger):  # fmt: skip
        intents.transition(ledger, M, SIK, Event.GATES_PASSED, now=T0 + 1,
                           set_fields={"state": "APPLIED", "attempt_seq": 9, "reason_code": "x"})  # fmt: skip
    assert intents.require_intent(ledger, M, SIK) == EXPECTED


def test_a_row_changed_between_read_and_write_is_refused(ledger: sqlite3.Connection,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    proposed(ledger)
    stale = dataclasses.replace(EXPECTED, state=State.HELD)  # what a slower reader believes the row to be
    monkeypatch.setattr(intents, "require_intent", lambda *_: stale)
    with pytest.raises(StaleLease) as info, transaction(ledger):
        intents.transition(ledger, M, SIK, Event.HOLD_REJECTED, now=T0 + 1)
    assert (info.value.sik, str(info.value)) == (SIK, f"stale write refused for intent {SIK}: row changed underneath "
                                                      "the transition")  # fmt: skip
    monkeypatch.undo()
    assert intents.require_intent(ledger, M, SIK) == EXPECTED


@pytest.mark.parametrize("write", [
    lambda c: intents.transition(c, M, SIK, Event.GATES_PASSED, now=T0 + 1),
    lambda c: intents.insert_intent(c, merchant_id=M, sik="N" * 32, tool="create_refund", subject_id="s",
                                    amount_minor=1, currency="INR", params={}, params_hash="p", agent_id="a",
                                    mandate_id="m", mandate_hash="h", operation_ref=None, distinct_reason=None,
                                    now=T0),
    lambda c: intents.settle_from_evidence(c, M, SIK, now=T0, actor="r"),
    lambda c: intents.finish_attempt(c, M, SIK, 1, now=T0, outcome="APPLIED"),
    lambda c: intents.record_decision(c, request_id="r", merchant_id=M, sik=SIK, agent_id="a", mandate_hash="h",
                                      verdict="ALLOW", reason_code="ALLOWED", results=[], now=T0),
    lambda c: intents.record_finding(c, merchant_id=M, sik=SIK, attempt_seq=1, outcome="INCONCLUSIVE",
                                     pages_scanned=1, pagination_exhausted=False, matched_entity_id=None, now=T0),
    lambda c: intents.bind_operation_ref(c, M, "op-9", SIK, now=T0),
])  # fmt: skip
def test_ledger_writes_outside_a_transaction_are_refused(ledger: sqlite3.Connection, write: Any) -> None:
    proposed(ledger)
    with pytest.raises(LedgerError, match="must run inside transaction"):
        write(ledger)
    assert intents.require_intent(ledger, M, SIK) == EXPECTED
    assert audit.count(ledger) == 1


# --- attempts ---------------------------------------------------------------------------------------------------


def attempt_rows(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute("SELECT * FROM intent_attempts ORDER BY attempt_seq")]


def test_starting_an_attempt_writes_in_flight_its_lease_and_the_attempt_row(ledger: sqlite3.Connection) -> None:
    after = in_flight(ledger, epoch=3)
    assert after == dataclasses.replace(EXPECTED, state=State.IN_FLIGHT, attempt_seq=1, lease_owner="rw-1",
                                        lease_epoch=3, lease_expires_at=T0 + 5000, authorized_at=T0 + 1,
                                        updated_at=T0 + 2)  # fmt: skip
    assert attempt_rows(ledger) == [{
        "merchant_id": M, "sik": SIK, "attempt_seq": 1, "lease_epoch": 3, "lease_expires_at": T0 + 5000,
        "started_at": T0 + 2, "sent_at": None, "finished_at": None, "outcome": None, "rail_entity_id": None,
        "http_status": None, "fee_minor": None, "tax_minor": None, "error_code": None,
        "request_json": '{"amount":2500,"notes":{"k":"v"}}', "response_json": None,
    }]  # fmt: skip
    assert records(ledger)[-1] == (3, T0 + 2, "TRANSITION", transition_record(
        "ATTEMPT_STARTED", "AUTHORIZED", "IN_FLIGHT", attempt_seq=1, actor="rw-1",
        sets={"lease_owner": "rw-1", "lease_epoch": 3, "lease_expires_at": T0 + 5000},
        request_sha256=sha256('{"amount":2500,"notes":{"k":"v"}}')))


def test_an_attempt_can_start_only_from_authorized(ledger: sqlite3.Connection) -> None:
    proposed(ledger)
    with pytest.raises(IllegalTransition), transaction(ledger):
        intents.start_attempt(ledger, M, SIK, now=T0, lease_owner="rw", lease_epoch=1, lease_expires_at=T0 + 1,
                              request={})  # fmt: skip
    assert attempt_rows(ledger) == []


def _unknown(conn: sqlite3.Connection) -> None:
    in_flight(conn)
    step(conn, Event.RAIL_AMBIGUOUS, T0 + 3, set_fields={"reason_code": "TIMEOUT"})


def test_a_retry_is_the_next_attempt_with_its_own_row(ledger: sqlite3.Connection) -> None:
    _unknown(ledger)
    with transaction(ledger):
        intents.begin_reconcile(ledger, M, SIK, now=T0 + 4, owner="rec", lease_expires_at=T0 + 40)
    step(ledger, Event.RECONCILE_CONFIRMED_ABSENT, T0 + 5)
    step(ledger, Event.RETRY_AUTHORIZED, T0 + 6, reasserted=allow("REASSERTED"))
    with transaction(ledger):
        after = intents.start_attempt(ledger, M, SIK, now=T0 + 7, lease_owner="rw-2", lease_epoch=4,
                                      lease_expires_at=T0 + 900, request={})  # fmt: skip
    assert (after.attempt_seq, after.lease_owner, after.lease_epoch, after.lease_expires_at) == (2, "rw-2", 4, T0 + 900)
    assert [(a["attempt_seq"], a["lease_epoch"], a["started_at"]) for a in attempt_rows(ledger)] == [
        (1, 3, T0 + 2), (2, 4, T0 + 7)]
    assert records(ledger)[-1][3]["attempt_seq"] == 2


def test_finishing_an_attempt_records_the_rail_answer_once(ledger: sqlite3.Connection) -> None:
    in_flight(ledger)
    with transaction(ledger):
        intents.finish_attempt(ledger, M, SIK, 1, now=T0 + 9, outcome="APPLIED", rail_entity_id="rfnd_1",
                               http_status=200, fee_minor=12, tax_minor=2, error_code="E_NONE",
                               response={"id": "rfnd_1", "b": [2, 1], "at": sqlite3}, sent_at=T0 + 3)  # fmt: skip
        intents.finish_attempt(ledger, M, SIK, 1, now=T0 + 10, outcome="UNKNOWN")  # a late second answer: ignored
    row = attempt_rows(ledger)[0]
    response = json.dumps({"id": "rfnd_1", "b": [2, 1], "at": sqlite3}, sort_keys=True, default=str)
    assert {k: row[k] for k in ("finished_at", "outcome", "rail_entity_id", "http_status", "fee_minor", "tax_minor",
                                "error_code", "response_json", "sent_at")} == {
        "finished_at": T0 + 9, "outcome": "APPLIED", "rail_entity_id": "rfnd_1", "http_status": 200, "fee_minor": 12,
        "tax_minor": 2, "error_code": "E_NONE", "response_json": response, "sent_at": T0 + 3,
    }  # fmt: skip
    assert response.startswith('{"at": "<module')
    # One ATTEMPT_FINISHED record, for the answer that was written; the ignored late one writes none.
    assert records(ledger, 3) == [(4, T0 + 9, "ATTEMPT_FINISHED", {
        "merchant_id": M, "sik": SIK, "attempt_seq": 1, "outcome": "APPLIED", "rail_entity_id": "rfnd_1",
        "http_status": 200, "fee_minor": 12, "tax_minor": 2, "error_code": "E_NONE", "sent_at": T0 + 3,
        "response_sha256": sha256(response),
    })]  # fmt: skip


def test_finishing_without_a_response_stores_null(ledger: sqlite3.Connection) -> None:
    in_flight(ledger)
    with transaction(ledger):
        intents.finish_attempt(ledger, M, SIK, 1, now=T0 + 9, outcome="TIMEOUT")
    row = attempt_rows(ledger)[0]
    assert (row["outcome"], row["response_json"], row["rail_entity_id"], row["sent_at"]) == ("TIMEOUT", None, None,
                                                                                            None)  # fmt: skip


def test_finishing_touches_only_its_own_attempt(ledger: sqlite3.Connection) -> None:
    in_flight(ledger)
    in_flight(ledger, "J" * 32)
    with transaction(ledger):
        intents.finish_attempt(ledger, M, "J" * 32, 1, now=T0 + 9, outcome="APPLIED")
        intents.finish_attempt(ledger, M, SIK, 2, now=T0 + 9, outcome="APPLIED")  # no such attempt
    rows = ledger.execute("SELECT sik, attempt_seq, outcome FROM intent_attempts ORDER BY sik").fetchall()
    assert [tuple(r) for r in rows] == [("J" * 32, 1, "APPLIED"), (SIK, 1, None)]
    finished = [(p["sik"], p["attempt_seq"], p["response_sha256"]) for *_, kind, p in records(ledger)
                if kind == "ATTEMPT_FINISHED"]  # fmt: skip
    assert finished == [("J" * 32, 1, None)]


def test_a_reconcile_pass_takes_a_per_intent_lease_and_is_counted(ledger: sqlite3.Connection) -> None:
    _unknown(ledger)
    with transaction(ledger):
        first = intents.begin_reconcile(ledger, M, SIK, now=T0 + 4, owner="rec-1", lease_expires_at=T0 + 40)
    assert first == dataclasses.replace(EXPECTED, state=State.RECONCILING, attempt_seq=1, reconcile_attempts=1,
                                        lease_owner="rec-1", lease_epoch=3, lease_expires_at=T0 + 40,
                                        reason_code="TIMEOUT", authorized_at=T0 + 1, updated_at=T0 + 4)  # fmt: skip
    assert records(ledger)[-1] == (5, T0 + 4, "TRANSITION", transition_record(
        "RECONCILE_STARTED", "UNKNOWN", "RECONCILING", attempt_seq=1, actor="rec-1",
        sets={"lease_owner": "rec-1", "lease_expires_at": T0 + 40}))
    step(ledger, Event.RECONCILE_INCONCLUSIVE, T0 + 5)
    with transaction(ledger):
        second = intents.begin_reconcile(ledger, M, SIK, now=T0 + 6, owner="rec-2", lease_expires_at=T0 + 60)
    assert (second.reconcile_attempts, second.attempt_seq, second.lease_owner) == (2, 1, "rec-2")


# --- evidence of an earlier apply -------------------------------------------------------------------------------


def _finish(conn: sqlite3.Connection, attempt_seq: int, outcome: str, entity: str | None) -> None:
    with transaction(conn):
        intents.finish_attempt(conn, M, SIK, attempt_seq, now=T0 + 20, outcome=outcome, rail_entity_id=entity)


def _second_attempt(conn: sqlite3.Connection) -> None:
    """Attempt 1 went unknown and was confirmed absent; attempt 2 is in flight."""
    _unknown(conn)
    with transaction(conn):
        intents.begin_reconcile(conn, M, SIK, now=T0 + 4, owner="rec", lease_expires_at=T0 + 40)
    step(conn, Event.RECONCILE_CONFIRMED_ABSENT, T0 + 5)
    step(conn, Event.RETRY_AUTHORIZED, T0 + 6, reasserted=allow("REASSERTED"))
    with transaction(conn):
        intents.start_attempt(conn, M, SIK, now=T0 + 7, lease_owner="rw-2", lease_epoch=4, lease_expires_at=T0 + 900,
                              request={})  # fmt: skip


def test_evidence_is_the_first_attempt_answered_with_our_stamp(ledger: sqlite3.Connection) -> None:
    _second_attempt(ledger)
    assert intents.applied_evidence(ledger, M, SIK) is None
    _finish(ledger, 2, "APPLIED", "rfnd_2")
    assert intents.applied_evidence(ledger, M, SIK) == (2, "rfnd_2")
    _finish(ledger, 1, "FENCED_APPLIED", "rfnd_1")
    assert intents.applied_evidence(ledger, M, SIK) == (1, "rfnd_1")
    assert intents.applied_evidence(ledger, "acc_OTHER", SIK) is None


@pytest.mark.parametrize(("outcome", "entity"), [("APPLIED", None), ("REJECTED", "rfnd_1"), ("UNKNOWN", "rfnd_1")])
def test_an_answer_without_both_stamp_and_applied_outcome_is_no_evidence(ledger: sqlite3.Connection, outcome: str,
                                                                         entity: str | None) -> None:  # fmt: skip
    _unknown(ledger)
    _finish(ledger, 1, outcome, entity)
    assert intents.applied_evidence(ledger, M, SIK) is None
    with transaction(ledger):
        assert intents.settle_from_evidence(ledger, M, SIK, now=T0 + 30, actor="rec") is None
    assert intents.require_intent(ledger, M, SIK).state is State.UNKNOWN


def test_evidence_settles_an_unknown_intent_as_applied(ledger: sqlite3.Connection) -> None:
    _unknown(ledger)
    _finish(ledger, 1, "FENCED_APPLIED", "rfnd_1")
    with transaction(ledger):
        settled = intents.settle_from_evidence(ledger, M, SIK, now=T0 + 30, actor="rec")
    assert settled == dataclasses.replace(EXPECTED, state=State.APPLIED, attempt_seq=1, rail_entity_id="rfnd_1",
                                          reason_code=None, lease_owner=None, lease_epoch=3, lease_expires_at=None,
                                          authorized_at=T0 + 1, updated_at=T0 + 30)  # fmt: skip
    assert intents.require_intent(ledger, M, SIK) == settled
    assert records(ledger)[-2:] == [(5, T0 + 20, "ATTEMPT_FINISHED", {
        "merchant_id": M, "sik": SIK, "attempt_seq": 1, "outcome": "FENCED_APPLIED", "rail_entity_id": "rfnd_1",
        "http_status": None, "fee_minor": None, "tax_minor": None, "error_code": None, "sent_at": None,
        "response_sha256": None,
    }), (6, T0 + 30, "TRANSITION", transition_record(
        "EARLIER_ATTEMPT_APPLIED", "UNKNOWN", "APPLIED", attempt_seq=1, actor="rec",
        detail={"evidence_attempt_seq": 1}, rail_entity_id="rfnd_1",
        sets={"rail_entity_id": "rfnd_1", "reason_code": None, "lease_owner": None, "lease_expires_at": None}))]


def test_evidence_does_not_settle_an_attempt_in_flight_or_a_quarantined_intent(ledger: sqlite3.Connection) -> None:
    _second_attempt(ledger)
    _finish(ledger, 1, "FENCED_APPLIED", "rfnd_1")
    before = audit.count(ledger)
    with transaction(ledger):
        assert intents.settle_from_evidence(ledger, M, SIK, now=T0 + 30, actor="rec") is None
    step(ledger, Event.RAIL_AMBIGUOUS, T0 + 31)
    step(ledger, Event.QUARANTINE, T0 + 32)
    with transaction(ledger):
        assert intents.settle_from_evidence(ledger, M, SIK, now=T0 + 33, actor="rec") is None
    assert intents.require_intent(ledger, M, SIK).state is State.QUARANTINED
    assert audit.count(ledger) == before + 2


# --- when an attempt may be treated as abandoned ----------------------------------------------------------------


def test_an_attempt_is_abandoned_only_after_its_own_lease_plus_the_deadline(ledger: sqlite3.Connection) -> None:
    intent = in_flight(ledger)
    assert intents.attempt_lease_expires_at(ledger, M, SIK, 1) == T0 + 5000
    assert intents.attempt_lease_expires_at(ledger, M, SIK, 2) is None
    assert intents.attempt_lease_expires_at(ledger, "acc_OTHER", SIK, 1) is None
    assert intents.attempt_lease_expires_at(ledger, M, "J" * 32, 1) is None
    # The reconciler's per-intent lease later overwrites the row's lease: the attempt's own one still decides.
    later = dataclasses.replace(intent, lease_expires_at=T0 + 40, updated_at=T0 + 30)
    assert intents.abandon_after(ledger, later, 700, 0) == T0 + 5700


def test_an_attempt_row_without_its_lease_falls_back_to_the_intent_row(ledger: sqlite3.Connection) -> None:
    intent = in_flight(ledger)
    ledger.execute("UPDATE intent_attempts SET lease_expires_at = NULL")  # a row from before the column existed
    assert intents.attempt_lease_expires_at(ledger, M, SIK, 1) is None
    assert intents.abandon_after(ledger, intent, 700, 0) == T0 + 5700
    no_lease = dataclasses.replace(intent, lease_expires_at=None)
    assert intents.abandon_after(ledger, no_lease, 700, 0) == T0 + 2 + 700  # its updated_at


def test_finding_f7_an_attempt_is_abandoned_only_once_the_callers_clock_is_past_the_skew_too(
        ledger: sqlite3.Connection) -> None:  # fmt: skip
    """Finding F7 (docs/simulation.md, ADR 0032): the row lease is a reading of the rail worker's clock; a standby or
    a reconciler whose clock runs ahead of it reads "lease plus deadline" passed while the worker's request may still
    be out. The rule: the earliest instant on the caller's clock is the lease plus the deadline plus the most two
    clocks may differ (INTERLOCK_CLOCK_SKEW_MS)."""
    intent = in_flight(ledger)  # leased until T0 + 5,000 on the worker's clock
    assert intents.abandon_after(ledger, intent, 700, 0) == T0 + 5700
    assert intents.abandon_after(ledger, intent, 700, 1_000) == T0 + 6700


# --- decisions, findings, operation refs --------------------------------------------------------------------------


def decide(conn: sqlite3.Connection, request_id: str = "req-1", **kw: Any) -> bool:
    fields: dict[str, Any] = dict(request_id=request_id, merchant_id=M, sik=SIK, agent_id="agent_k",
                                  mandate_hash="mhash", verdict="HOLD", reason_code="G4_HOLD",
                                  results=[{"gate": "G4", "verdict": "HOLD"}], now=T0 + 3)  # fmt: skip
    fields.update(kw)
    with transaction(conn):
        return intents.record_decision(conn, **fields)


DECISION = {"request_id": "req-1", "merchant_id": M, "sik": SIK, "agent_id": "agent_k", "verdict": "HOLD",
            "reason_code": "G4_HOLD", "mandate_hash": "mhash", "results": [{"gate": "G4", "verdict": "HOLD"}]}


def test_a_decision_is_recorded_once_with_its_audit_seq(ledger: sqlite3.Connection) -> None:
    proposed(ledger)
    assert intents.decision_exists(ledger, "req-1") is False
    assert decide(ledger) is True
    assert intents.decision_exists(ledger, "req-1") is True
    assert [dict(r) for r in ledger.execute("SELECT * FROM decisions")] == [{
        "request_id": "req-1", "merchant_id": M, "sik": SIK, "agent_id": "agent_k", "mandate_hash": "mhash",
        "verdict": "HOLD", "reason_code": "G4_HOLD", "results_json": '[{"gate":"G4","verdict":"HOLD"}]',
        "decided_at": T0 + 3, "audit_seq": 2, "task_id": None, "task_digest": None, "task_signer": None,
    }]  # fmt: skip
    assert records(ledger, 1) == [(2, T0 + 3, "DECISION", DECISION)]
    assert decide(ledger, verdict="ALLOW") is False  # a redelivered decision
    assert audit.count(ledger) == 2
    assert [tuple(r) for r in ledger.execute("SELECT verdict FROM decisions")] == [("HOLD",)]


def test_a_decision_under_a_task_records_the_task(ledger: sqlite3.Connection) -> None:
    assert decide(ledger, "req-2", task_id="task_1", task_digest="td") is True
    assert records(ledger)[-1][3] == {**DECISION, "request_id": "req-2", "task_id": "task_1", "task_digest": "td"}
    assert tuple(ledger.execute("SELECT task_id, task_digest, audit_seq FROM decisions").fetchone()) == ("task_1", "td",
                                                                                                  1)


def test_a_finding_is_stored_and_audited(ledger: sqlite3.Connection) -> None:
    _unknown(ledger)
    with transaction(ledger):
        first = intents.record_finding(ledger, merchant_id=M, sik=SIK, attempt_seq=1, outcome="INCONCLUSIVE",
                                       pages_scanned=3, pagination_exhausted=False, matched_entity_id=None, now=T0 + 8)
        second = intents.record_finding(ledger, merchant_id=M, sik=SIK, attempt_seq=1, outcome="APPLIED",
                                        pages_scanned=1, pagination_exhausted=True, matched_entity_id="rfnd_1",
                                        now=T0 + 9, detail={"page": 1})  # fmt: skip
    rows = [dict(r) for r in ledger.execute("SELECT * FROM recon_findings ORDER BY id")]
    assert [r["id"] for r in rows] == [first, second] and first != second
    assert rows == [
        {"id": first, "merchant_id": M, "sik": SIK, "attempt_seq": 1, "outcome": "INCONCLUSIVE", "pages_scanned": 3,
         "pagination_exhausted": 0, "matched_entity_id": None, "queried_at": T0 + 8, "detail_json": "{}"},
        {"id": second, "merchant_id": M, "sik": SIK, "attempt_seq": 1, "outcome": "APPLIED", "pages_scanned": 1,
         "pagination_exhausted": 1, "matched_entity_id": "rfnd_1", "queried_at": T0 + 9, "detail_json": '{"page":1}'},
    ]  # fmt: skip
    assert records(ledger, 4) == [
        (5, T0 + 8, "RECON_FINDING", {"merchant_id": M, "sik": SIK, "attempt_seq": 1, "outcome": "INCONCLUSIVE",
                                      "pages_scanned": 3, "pagination_exhausted": False, "matched_entity_id": None,
                                      "detail": {}}),
        (6, T0 + 9, "RECON_FINDING", {"merchant_id": M, "sik": SIK, "attempt_seq": 1, "outcome": "APPLIED",
                                      "pages_scanned": 1, "pagination_exhausted": True, "matched_entity_id": "rfnd_1",
                                      "detail": {"page": 1}}),
    ]  # fmt: skip


def test_an_operation_ref_binds_to_its_first_sik_only(ledger: sqlite3.Connection) -> None:
    from interlock.errors import KeyConflict

    with transaction(ledger):
        intents.bind_operation_ref(ledger, M, "op-1", SIK, now=T0)
        intents.bind_operation_ref(ledger, M, "op-1", SIK, now=T0 + 1)  # the same binding again: nothing new
        intents.bind_operation_ref(ledger, "acc_OTHER", "op-1", "J" * 32, now=T0 + 2)  # another merchant's ref
    assert [dict(r) for r in ledger.execute("SELECT * FROM operation_refs ORDER BY merchant_id")] == [
        {"merchant_id": "acc_OTHER", "operation_ref": "op-1", "sik": "J" * 32, "bound_at": T0 + 2},
        {"merchant_id": M, "operation_ref": "op-1", "sik": SIK, "bound_at": T0},
    ]
    assert records(ledger) == [
        (1, T0, "OPERATION_REF_BOUND", {"merchant_id": M, "operation_ref": "op-1", "sik": SIK}),
        (2, T0 + 2, "OPERATION_REF_BOUND", {"merchant_id": "acc_OTHER", "operation_ref": "op-1", "sik": "J" * 32}),
    ]
    with pytest.raises(KeyConflict) as info, transaction(ledger):
        intents.bind_operation_ref(ledger, M, "op-1", "Z" * 32, now=T0 + 3)
    assert (info.value.operation_ref, info.value.bound_sik, info.value.new_sik) == ("op-1", SIK, "Z" * 32)
    assert intents.sik_for_operation_ref(ledger, M, "op-1") == SIK
    assert intents.sik_for_operation_ref(ledger, "acc_OTHER", "op-1") == "J" * 32
    assert intents.sik_for_operation_ref(ledger, M, "op-2") is None
    assert audit.count(ledger) == 2


# -- issue 25 item 7: a kept stamped answer is judged on the intent's terms (ADR 0016) ---------------------------


def _finish_with(conn: sqlite3.Connection, outcome: str, response: dict[str, Any]) -> None:
    with transaction(conn):
        intents.finish_attempt(conn, M, SIK, 1, now=T0 + 20, outcome=outcome, rail_entity_id=response["id"],
                               response=response)  # fmt: skip


def _refund_answer(**changes: Any) -> dict[str, Any]:
    return {"id": "rfnd_1", "payment_id": "pay_SUBJ0001", "amount": 2500, "currency": "INR",
            "notes": {"interlock_sik": SIK}, **changes}  # fmt: skip


def test_a_kept_applied_answer_on_other_terms_quarantines_instead_of_settling(ledger: sqlite3.Connection) -> None:
    # A row recorded APPLIED (before the check existed, or by a worker that did not judge terms) whose kept answer is
    # 1 USD on another payment: boot and the reconciler settle from it, so they must judge it again.
    _unknown(ledger)
    _finish_with(ledger, "FENCED_APPLIED", _refund_answer(amount=1, currency="USD", payment_id="pay_OTHER"))
    with transaction(ledger):
        settled = intents.settle_from_evidence(ledger, M, SIK, now=T0 + 30, actor="rec")
    assert settled is not None
    assert (settled.state, settled.rail_entity_id, settled.reason_code) == (State.QUARANTINED, None,
                                                                            "RAIL_TERMS_MISMATCH")  # fmt: skip
    payload = records(ledger)[-1][3]
    assert (payload["event"], payload["from"], payload["to"]) == ("TERMS_MISMATCH", "UNKNOWN", "QUARANTINED")
    assert payload["detail"] == {
        "evidence_attempt_seq": 1, "rail_entity_id": "rfnd_1", "differ": ["subject", "amount_minor", "currency"],
        "intent_terms": {"subject": "pay_SUBJ0001", "amount_minor": 2500, "currency": "INR", "full_balance": False},
        "entity_terms": {"subject": "pay_OTHER", "amount_minor": 1, "currency": "USD"},
    }  # fmt: skip


def test_a_kept_applied_answer_on_the_intents_terms_settles_it(ledger: sqlite3.Connection) -> None:
    _unknown(ledger)
    _finish_with(ledger, "FENCED_APPLIED", _refund_answer())
    with transaction(ledger):
        settled = intents.settle_from_evidence(ledger, M, SIK, now=T0 + 30, actor="rec")
    assert settled is not None and (settled.state, settled.rail_entity_id) == (State.APPLIED, "rfnd_1")


def _abandoned(conn: sqlite3.Connection) -> None:
    """Attempt 1 in flight, its lease past: UNKNOWN with its row still unanswered (a stalled worker may answer it)."""
    in_flight(conn)
    step(conn, Event.LEASE_EXPIRED, T0 + 3, set_fields={"reason_code": "LEASE_EXPIRED"})


def _kept_late_settles_applied(conn: sqlite3.Connection, settled_from: str) -> None:
    """Attempt 1's answer, our stamp on our terms, kept late by the fenced worker that sent it (execute.py's fenced
    path), settles the intent, whatever its state by then (*settled_from*), APPLIED on that evidence."""
    with transaction(conn):
        intents.finish_attempt(conn, M, SIK, 1, now=T0 + 20, outcome="FENCED_APPLIED", rail_entity_id="rfnd_1",
                               response=_refund_answer())  # fmt: skip
    with transaction(conn):
        settled = intents.settle_from_evidence(conn, M, SIK, now=T0 + 30, actor="rw-1")
    assert settled is not None
    assert (settled.state, settled.rail_entity_id, settled.reason_code) == (State.APPLIED, "rfnd_1", None)
    payload = records(conn)[-1][3]
    assert (payload["event"], payload["from"], payload["to"]) == ("EARLIER_ATTEMPT_APPLIED", settled_from, "APPLIED")
    assert payload["detail"] == {"evidence_attempt_seq": 1}


def test_an_attempt_s_applied_answer_kept_after_a_confirmed_absence_settles_it_applied(
    ledger: sqlite3.Connection,
) -> None:
    # Attempt 1's worker stalled past its lease (its answer not written: finish_attempt writes once), the reconciler
    # read "absent" (a list that lagged), and, before any retry, the stalled worker keeps its stamped answer: the
    # absence is outvoted (ADR 0005), CONFIRMED_NOT_APPLIED -EARLIER_ATTEMPT_APPLIED-> APPLIED.
    _abandoned(ledger)
    with transaction(ledger):
        intents.begin_reconcile(ledger, M, SIK, now=T0 + 4, owner="rec", lease_expires_at=T0 + 40)
    step(ledger, Event.RECONCILE_CONFIRMED_ABSENT, T0 + 5)
    _kept_late_settles_applied(ledger, "CONFIRMED_NOT_APPLIED")


def test_an_attempt_s_applied_answer_kept_after_a_refused_retry_settles_it_applied(
    ledger: sqlite3.Connection,
) -> None:
    # Attempt 1's worker stalled past its lease; a retry (attempt 2) was refused by the rail (classify_error: a retry's
    # refusal is RAIL_AMBIGUOUS, RAIL_REJECTED_AFTER_RETRY) and its stamp read absent, so the intent is
    # FAILED_TERMINAL. Then the stalled worker keeps attempt 1's stamped answer: the money did move, and the intent
    # says so.
    _abandoned(ledger)
    with transaction(ledger):
        intents.begin_reconcile(ledger, M, SIK, now=T0 + 4, owner="rec", lease_expires_at=T0 + 40)
    step(ledger, Event.RECONCILE_CONFIRMED_ABSENT, T0 + 5)
    step(ledger, Event.RETRY_AUTHORIZED, T0 + 6, reasserted=allow("REASSERTED"))
    with transaction(ledger):
        intents.start_attempt(ledger, M, SIK, now=T0 + 7, lease_owner="rw-2", lease_epoch=4,
                              lease_expires_at=T0 + 900, request={})  # fmt: skip
    with transaction(ledger):
        intents.finish_attempt(ledger, M, SIK, 2, now=T0 + 8, outcome="REJECTED_AFTER_RETRY", http_status=400)
    step(ledger, Event.RAIL_AMBIGUOUS, T0 + 8, set_fields={"reason_code": "RAIL_REJECTED_AFTER_RETRY"})
    with transaction(ledger):
        intents.begin_reconcile(ledger, M, SIK, now=T0 + 9, owner="rec", lease_expires_at=T0 + 40)
    step(ledger, Event.RECONCILE_CONFIRMED_REJECTED, T0 + 10)
    assert intents.require_intent(ledger, M, SIK).state is State.FAILED_TERMINAL
    _kept_late_settles_applied(ledger, "FAILED_TERMINAL")
    assert records(ledger)[-1][3]["attempt_seq"] == 2  # settled on attempt 1's answer, the intent at attempt 2


def test_a_kept_mismatch_quarantines_a_confirmed_not_applied_intent(ledger: sqlite3.Connection) -> None:
    _unknown(ledger)
    with transaction(ledger):
        intents.begin_reconcile(ledger, M, SIK, now=T0 + 4, owner="rec", lease_expires_at=T0 + 40)
    step(ledger, Event.RECONCILE_CONFIRMED_ABSENT, T0 + 5)
    _finish_with(ledger, "FENCED_TERMS_MISMATCH", _refund_answer(amount=1))
    with transaction(ledger):
        settled = intents.settle_from_evidence(ledger, M, SIK, now=T0 + 30, actor="rec")
    assert settled is not None and settled.state is State.QUARANTINED
