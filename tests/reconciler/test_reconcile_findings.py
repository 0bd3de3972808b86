"""One reconcile pass (reconciler/loop.py `reconcile`, `_commit_finding`, `_authorize_retry`): what it writes for
each finding of the rail's lists — APPLIED, confirmed absent (and then a retry only under a re-asserted
mandate), inconclusive — the audit rows with their payloads, the finding row, and the execute job it hands back
to the rail worker. A pass that is not ours, or whose per-intent lease was lost, writes nothing."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from interlock.fees import DEFAULT_FEE_RATE, FeeRate
from interlock.mandate import MandateStore
from ledger import intents
from ledger.db import open_ledger, transaction
from ledger.states import State
from rails import pager
from rails.razorpay import RailError, RailErrorKind
from reconciler import loop as reconciler_module
from reconciler.loop import Reconciler
from tests.engine.send_world import REFUND, SETTLEMENT, T0, World, make_world
from tests.mandates import AGENT, MERCHANT, make_mandate
from tests.reconciler.recon_world import (
    OWNER,
    SIK,
    Hub,
    audit_mark,
    audit_since,
    findings,
    job,
    reconcile_started,
    stamped_settlement,
    transition_row,
    unknown,
)

READY = 3000 + 1000 + 500  # an unanswered attempt: its lease, the call's deadline, the min delay


def _reconciler(world: World, hub: Hub | None = None, **changes: Any) -> Reconciler:
    return dataclasses.replace(world.reconciler(), redis=hub, **changes)  # type: ignore[arg-type]


_started = reconcile_started
RELEASED = {"lease_owner": None, "lease_expires_at": None}  # what a pass's closing transition sets


# -- the stamp is found: APPLIED ---------------------------------------------------------------------------------------


def test_a_stamped_entity_on_the_first_page_settles_the_intent_applied(world: World, conn: sqlite3.Connection,
                                                                        hub: Hub) -> None:  # fmt: skip
    unknown(world, conn, reason_code="RAIL_5XX")
    entity = stamped_settlement(world)
    world.clock.advance(READY)
    mark = audit_mark(world)
    assert _reconciler(world, hub).reconcile(MERCHANT, SIK) is True
    now = T0 + READY
    intent = world.intent()
    assert (intent.state, intent.rail_entity_id, intent.reason_code, intent.lease_owner, intent.lease_expires_at,
            intent.reconcile_attempts, intent.updated_at) == (State.APPLIED, entity, None, None, None, 1, now)
    assert audit_since(world, mark) == [
        _started(now),
        ("RECON_FINDING", now, {"merchant_id": MERCHANT, "sik": SIK, "attempt_seq": 1, "outcome": "APPLIED",
                                "pages_scanned": 1, "pagination_exhausted": False, "matched_entity_id": entity,
                                "detail": {"error": None}}),
        ("TRANSITION", now, transition_row("RECONCILE_FOUND_APPLIED", "RECONCILING", "APPLIED", actor=OWNER,
                                           detail={"pages_scanned": 1}, rail_entity_id=entity,
                                           sets={**RELEASED, "rail_entity_id": entity, "reason_code": None})),
    ]  # fmt: skip
    assert findings(world) == [(SIK, 1, "APPLIED", 1, 0, entity, now, {"error": None})]
    assert hub.jobs == [], "an applied intent is never sent again"
    assert world.rail.calls == []


def test_an_earlier_attempts_stamped_answer_settles_the_intent_without_reading_the_rail(
        world: World, conn: sqlite3.Connection, hub: Hub) -> None:  # fmt: skip
    unknown(world, conn)
    with transaction(conn):  # a fenced worker kept the rail's stamped answer on its attempt row
        conn.execute("UPDATE intent_attempts SET outcome = 'APPLIED', rail_entity_id = 'setlod_kept' WHERE sik = ?",
                     (SIK,))  # fmt: skip
    world.rail.listed = False
    world.clock.advance(READY)
    mark = audit_mark(world)
    assert _reconciler(world, hub).reconcile(MERCHANT, SIK) is True
    intent = world.intent()
    assert (intent.state, intent.rail_entity_id, intent.reconcile_attempts) == (State.APPLIED, "setlod_kept", 0)
    assert audit_since(world, mark) == [
        ("TRANSITION", T0 + READY, transition_row("EARLIER_ATTEMPT_APPLIED", "UNKNOWN", "APPLIED", actor=OWNER,
                                                  detail={"evidence_attempt_seq": 1}, rail_entity_id="setlod_kept",
                                                  sets={"rail_entity_id": "setlod_kept", "reason_code": None,
                                                        **RELEASED})),
    ]  # fmt: skip
    assert findings(world) == [] and hub.jobs == []


def test_a_list_without_our_stamp_is_not_absence_when_the_rail_refused_our_receipt_as_used(
        world: World, conn: sqlite3.Connection, hub: Hub) -> None:  # fmt: skip
    # Finding F2 (docs/simulation.md): the rail said our receipt is taken, so it holds our refund; a list that does
    # not show it lags. Read again rather than confirm absence and retry into the same refusal.
    unknown(world, conn, tool=REFUND, reason_code="RAIL_KEY_IN_USE")
    world.clock.advance(READY)
    assert _reconciler(world, hub).reconcile(MERCHANT, SIK) is True
    intent = world.intent()
    assert (intent.state, intent.reason_code, intent.attempt_seq) == (State.UNKNOWN, "RAIL_KEY_IN_USE", 1)
    assert [f[2:5] for f in findings(world)] == [("INCONCLUSIVE", 1, 1)], "the list was read to its end"
    assert hub.jobs == [] and world.rail.calls == [], "no retry"
    refund = world.rail.create_refund("pay_SEND0000001", 50000, notes={"interlock_sik": SIK})
    world.rail.calls.clear()
    world.clock.advance(60_000)
    assert _reconciler(world, hub).reconcile(MERCHANT, SIK) is True
    assert (world.intent().state, world.intent().rail_entity_id) == (State.APPLIED, refund.id)


# -- confirmed absent: a retry, re-asserted ----------------------------------------------------------------------------


def test_a_stamp_proven_absent_authorizes_a_retry_and_hands_it_to_the_rail_worker(
        world: World, conn: sqlite3.Connection, hub: Hub) -> None:  # fmt: skip
    unknown(world, conn)
    world.clock.advance(READY)
    mark = audit_mark(world)
    assert _reconciler(world, hub).reconcile(MERCHANT, SIK) is True
    now = T0 + READY
    intent = world.intent()
    assert (intent.state, intent.lease_owner, intent.lease_expires_at, intent.attempt_seq) == (
        State.AUTHORIZED, None, None, 1)
    events = audit_since(world, mark)
    assert events[:3] == [
        _started(now),
        ("RECON_FINDING", now, {"merchant_id": MERCHANT, "sik": SIK, "attempt_seq": 1,
                                "outcome": "CONFIRMED_NOT_APPLIED", "pages_scanned": 1, "pagination_exhausted": True,
                                "matched_entity_id": None, "detail": {"error": None}}),
        ("TRANSITION", now, transition_row("RECONCILE_CONFIRMED_ABSENT", "RECONCILING", "CONFIRMED_NOT_APPLIED",
                                           actor=OWNER, detail={"pages_scanned": 1}, sets=RELEASED)),
    ]  # fmt: skip
    kind, ts, retry = events[3]
    reasserted = retry["detail"].pop("reasserted")
    assert (kind, ts, retry) == ("TRANSITION", now, transition_row(
        "RETRY_AUTHORIZED", "CONFIRMED_NOT_APPLIED", "AUTHORIZED", actor=OWNER, detail={"after_attempt": 1}))
    assert isinstance(reasserted, str) and reasserted
    assert len(events) == 4
    assert hub.jobs == [job()]


@pytest.mark.parametrize("mandates", ["none configured", "another mandate"])
def test_no_retry_when_the_mandate_it_was_judged_under_is_no_longer_configured(
        world: World, conn: sqlite3.Connection, hub: Hub, mandates: str) -> None:  # fmt: skip
    unknown(world, conn)
    world.clock.advance(READY)
    store = None
    if mandates == "another mandate":
        other = make_mandate({"issued_at": T0 - 86_400_000, "expires_at": T0 + 60 * 86_400_000,
                              "limits.fee_budgets": {}, "approval.hold_above_minor": None})  # fmt: skip
        assert other.mandate_hash != world.mandate.mandate_hash
        store = MandateStore({AGENT: other})
    mark = audit_mark(world)
    assert _reconciler(world, hub, mandates=store).reconcile(MERCHANT, SIK) is True
    assert world.intent().state is State.CONFIRMED_NOT_APPLIED
    assert [payload["event"] for _, _, payload in audit_since(world, mark)[2:]] == ["RECONCILE_CONFIRMED_ABSENT"]
    assert hub.jobs == []


def test_no_retry_when_the_mandate_no_longer_allows_it_now(world: World, conn: sqlite3.Connection, hub: Hub) -> None:
    unknown(world, conn)
    world.clock.advance(31 * 86_400_000)  # past the mandate's expiry; the first pass never quarantines on age
    assert _reconciler(world, hub).reconcile(MERCHANT, SIK) is True
    assert (world.intent().state, world.intent().reconcile_attempts) == (State.CONFIRMED_NOT_APPLIED, 1)
    assert hub.jobs == []


# -- inconclusive ------------------------------------------------------------------------------------------------------


def test_a_list_read_that_fails_is_inconclusive_and_records_the_error(world: World, conn: sqlite3.Connection,
                                                                      hub: Hub) -> None:  # fmt: skip
    unknown(world, conn)
    world.clock.advance(READY)

    error = RailError(RailErrorKind.AMBIGUOUS, "list timed out", method="GET", path="/settlements")

    def down(**kwargs: Any) -> Any:
        raise error

    world.rail.list_instant_settlements = down  # type: ignore[method-assign]
    mark = audit_mark(world)
    assert _reconciler(world, hub).reconcile(MERCHANT, SIK) is True
    now = T0 + READY
    intent = world.intent()
    assert (intent.state, intent.lease_owner, intent.lease_expires_at, intent.reconcile_attempts) == (
        State.UNKNOWN, None, None, 1)
    (_, _, finding), (_, _, moved) = audit_since(world, mark)[1:]
    assert finding["outcome"] == "INCONCLUSIVE" and finding["pagination_exhausted"] is False
    assert finding["detail"] == {"error": str(error)[:500]}  # on the chain too, not only on the row
    assert moved == transition_row("RECONCILE_INCONCLUSIVE", "RECONCILING", "UNKNOWN", actor=OWNER,
                                   detail={"pages_scanned": 0}, sets=RELEASED)  # fmt: skip
    assert findings(world) == [(SIK, 1, "INCONCLUSIVE", 0, 0, None, now, {"error": str(error)[:500]})]
    assert hub.jobs == []


# -- what the pass reads, and under which lease ------------------------------------------------------------------------


def test_the_pass_reads_the_subjects_list_under_a_lease_and_a_deadline_inside_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    world = make_world(tmp_path, monkeypatch, lease_ttl_ms=3000, rail_timeout_ms=1000)
    conn = open_ledger(world.path)
    unknown(world, conn, tool=REFUND)
    world.clock.advance(READY)
    seen: list[Any] = []
    real = pager.find_stamped

    def recording(rail: Any, tool: str, subject: str, sik: str, **kwargs: Any) -> Any:
        intent = world.intent()
        seen.append((tool, subject, sik, kwargs, intent.state, intent.lease_owner, intent.lease_expires_at))
        return real(rail, tool, subject, sik, **kwargs)

    class Monotonic:
        @staticmethod
        def monotonic() -> float:
            return 100.0

    monkeypatch.setattr(reconciler_module, "find_stamped", recording)
    monkeypatch.setattr(reconciler_module, "clock", Monotonic)
    world.reconciler().reconcile(MERCHANT, SIK)
    assert seen == [(REFUND, "pay_SEND0000001", SIK, {"deadline": 102.0, "account_number": None}, State.RECONCILING,
                     OWNER, T0 + READY + 3000)]  # fmt: skip


@pytest.mark.parametrize(("ttl", "timeout", "budget"), [(3000, 3000, 0.0), (2000, 3000, 0.0), (5000, 1500, 3.5)])
def test_the_read_budget_is_the_lease_less_one_call_deadline_never_negative(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ttl: int, timeout: int, budget: float) -> None:  # fmt: skip
    world = make_world(tmp_path, monkeypatch, lease_ttl_ms=ttl, rail_timeout_ms=timeout)
    unknown(world, open_ledger(world.path))
    world.clock.advance(ttl + timeout + 500)
    deadlines: list[Any] = []

    def recording(rail: Any, tool: str, subject: str, sik: str, **kwargs: Any) -> Any:
        deadlines.append(kwargs)
        return pager.PageResult(None, 0, exhausted=False, error="not read")

    class Monotonic:
        @staticmethod
        def monotonic() -> float:
            return 100.0

    monkeypatch.setattr(reconciler_module, "find_stamped", recording)
    monkeypatch.setattr(reconciler_module, "clock", Monotonic)
    world.reconciler().reconcile(MERCHANT, SIK)
    assert deadlines == [{"deadline": 100.0 + budget, "account_number": None}]


# -- not ours ----------------------------------------------------------------------------------------------------------


def test_a_pass_over_an_intent_that_is_not_unknown_or_not_there_takes_nothing(
        world: World, conn: sqlite3.Connection, hub: Hub) -> None:  # fmt: skip
    world.authorized(SETTLEMENT)
    mark = audit_mark(world)
    reconciler = _reconciler(world, hub)
    assert reconciler.reconcile(MERCHANT, SIK) is False
    assert reconciler.reconcile(MERCHANT, "T" * 32) is False
    assert world.intent().state is State.AUTHORIZED
    assert audit_since(world, mark) == [] and findings(world) == [] and hub.jobs == []


def test_a_finding_whose_reconcile_lease_was_taken_back_is_discarded(world: World, conn: sqlite3.Connection,
                                                                     hub: Hub) -> None:  # fmt: skip
    unknown(world, conn)
    stamped_settlement(world)
    world.clock.advance(READY)
    lister = world.rail.list_instant_settlements
    other = _reconciler(world, None, owner="reconciler:2")

    def lease_runs_out_while_reading(**kwargs: Any) -> Any:
        # Another reconciler's sweep finds our per-intent lease over and takes the row back to UNKNOWN (the row
        # still names us as lease owner: only the state says the pass is no longer ours).
        world.clock.advance(world.settings.lease_ttl_ms + 1)
        assert other._expire_abandoned(world.clock()) == 1
        return lister(**kwargs)

    world.rail.list_instant_settlements = lease_runs_out_while_reading  # type: ignore[method-assign]
    mark = audit_mark(world)
    assert _reconciler(world, hub).reconcile(MERCHANT, SIK) is True
    intent = world.intent()
    assert (intent.state, intent.lease_owner, intent.rail_entity_id) == (State.UNKNOWN, OWNER, None)
    assert [payload["event"] for _, _, payload in audit_since(world, mark)] == [
        "RECONCILE_STARTED", "RECONCILE_INCONCLUSIVE"]
    assert findings(world) == [] and hub.jobs == []


def test_a_confirmed_absence_found_after_the_lease_was_lost_authorizes_no_retry(
        world: World, conn: sqlite3.Connection, hub: Hub) -> None:  # fmt: skip
    unknown(world, conn)
    world.clock.advance(READY)
    lister = world.rail.list_instant_settlements
    other = _reconciler(world, None, owner="reconciler:2")

    def overrun(**kwargs: Any) -> Any:
        world.clock.advance(world.settings.lease_ttl_ms + 1)
        other._expire_abandoned(world.clock())
        with transaction(conn):
            intents.begin_reconcile(conn, MERCHANT, SIK, now=world.clock(), owner=other.owner,
                                    lease_expires_at=world.clock() + 3000)  # fmt: skip
        return lister(**kwargs)

    world.rail.list_instant_settlements = overrun  # type: ignore[method-assign]
    assert _reconciler(world, hub).reconcile(MERCHANT, SIK) is True
    assert (world.intent().state, world.intent().lease_owner) == (State.RECONCILING, "reconciler:2")
    assert hub.jobs == []


@pytest.mark.parametrize(("rate", "state"), [(DEFAULT_FEE_RATE, State.AUTHORIZED),
                                             (FeeRate(fee_per_mille=10), State.CONFIRMED_NOT_APPLIED)])
def test_a_retry_is_reasserted_against_the_fee_budget_at_the_configured_rate(
        world: World, conn: sqlite3.Connection, hub: Hub, rate: FeeRate, state: State) -> None:  # fmt: skip
    # 50,000 at 0.3% (+18% tax) is a 177 fee, inside the budget of 300; at 1% it is 590, past it.
    world.mandate = make_mandate({"issued_at": T0 - 86_400_000, "expires_at": T0 + 30 * 86_400_000,
                                  "approval.hold_above_minor": None,
                                  "limits.fee_budgets": {"INR": {"window_ms": 86_400_000, "max_fee_minor": 300}}})
    unknown(world, conn)
    world.clock.advance(READY)
    assert _reconciler(world, hub, fee_rate=rate).reconcile(MERCHANT, SIK) is True
    assert world.intent().state is state
    assert hub.jobs == ([job()] if state is State.AUTHORIZED else [])


# -- issue 25 item 7: a stamped list entity on other terms (ADR 0016) ------------------------------------------------


def test_a_stamped_entity_on_other_terms_is_quarantined_not_applied_and_not_retried(
        world: World, conn: sqlite3.Connection, hub: Hub) -> None:  # fmt: skip
    unknown(world, conn, reason_code="RAIL_5XX")
    entity = world.rail.create_instant_settlement(1, notes={"interlock_sik": SIK})  # ours, for Rs 0.01
    world.rail.calls.clear()
    world.clock.advance(READY)
    assert _reconciler(world, hub).reconcile(MERCHANT, SIK) is True
    intent = world.intent()
    assert (intent.state, intent.rail_entity_id, intent.reason_code, intent.lease_owner) == (
        State.QUARANTINED, None, "RAIL_TERMS_MISMATCH", None)  # fmt: skip
    last = audit_since(world, 0)[-1][2]
    assert (last["event"], last["from"], last["to"]) == ("TERMS_MISMATCH", "RECONCILING", "QUARANTINED")
    assert last["detail"]["intent_terms"]["amount_minor"] == 50000
    assert last["detail"]["entity_terms"] == {"subject": "balance", "amount_minor": 1, "currency": "INR"}
    assert last["detail"]["rail_entity_id"] == entity.id
    assert [f[2] for f in findings(world)] == ["INCONCLUSIVE"]
    assert hub.jobs == [], "neither APPLIED nor absent: nothing is retried"
