"""The state machine accepts exactly the edges of SPEC §6, and no sequence of events breaks I3-I5."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.errors import IllegalTransition, StaleLease
from interlock.verdicts import allow
from ledger import audit, intents
from ledger.db import open_ledger, transaction
from ledger.states import TRANSITIONS, Event, State
from tests.ledger.helpers import propose

# SPEC §6, transcribed independently of ledger/states.py so a typo in either one fails this test, less the two edges
# nothing fires (ADR 0036: REMOVED_EDGES below).
SPEC_TABLE = """
PROPOSED GATES_PASSED AUTHORIZED
PROPOSED GATES_HELD HELD
HELD HOLD_RELEASED AUTHORIZED
HELD HOLD_REJECTED BLOCKED
HELD QUARANTINE QUARANTINED
AUTHORIZED ATTEMPT_STARTED IN_FLIGHT
AUTHORIZED GATES_BLOCKED BLOCKED
IN_FLIGHT RAIL_APPLIED APPLIED
IN_FLIGHT RAIL_REJECTED FAILED_TERMINAL
IN_FLIGHT RAIL_AMBIGUOUS UNKNOWN
IN_FLIGHT LEASE_EXPIRED UNKNOWN
UNKNOWN RECONCILE_STARTED RECONCILING
UNKNOWN QUARANTINE QUARANTINED
RECONCILING RECONCILE_FOUND_APPLIED APPLIED
RECONCILING RECONCILE_CONFIRMED_ABSENT CONFIRMED_NOT_APPLIED
RECONCILING RECONCILE_INCONCLUSIVE UNKNOWN
RECONCILING QUARANTINE QUARANTINED
CONFIRMED_NOT_APPLIED RETRY_AUTHORIZED AUTHORIZED
CONFIRMED_NOT_APPLIED REOPENED AUTHORIZED
FAILED_TERMINAL REOPENED AUTHORIZED
QUARANTINED OPERATOR_RESOLVED_APPLIED APPLIED
QUARANTINED OPERATOR_RESOLVED_NOT_APPLIED CONFIRMED_NOT_APPLIED
"""

# Edges issue 13 adds to SPEC §6 (ADR 0005): evidence of an earlier attempt's apply settles the intent; a retry
# the rail refused is terminal only after the stamp is confirmed absent; a replaced mandate withdraws an
# authorisation nothing was sent under.
SEND_SIDE_EDGES = """
AUTHORIZED AUTHORIZATION_WITHDRAWN CONFIRMED_NOT_APPLIED
RECONCILING RECONCILE_CONFIRMED_REJECTED FAILED_TERMINAL
AUTHORIZED EARLIER_ATTEMPT_APPLIED APPLIED
UNKNOWN EARLIER_ATTEMPT_APPLIED APPLIED
RECONCILING EARLIER_ATTEMPT_APPLIED APPLIED
CONFIRMED_NOT_APPLIED EARLIER_ATTEMPT_APPLIED APPLIED
FAILED_TERMINAL EARLIER_ATTEMPT_APPLIED APPLIED
"""


# Edges issue 25 adds (ADR 0016): a stamped entity whose terms are not the intent's is a finding for a person, from
# the attempt's own answer, a list match, or a kept answer in any state EARLIER_ATTEMPT_APPLIED leaves.
TERMS_EDGES = """
IN_FLIGHT TERMS_MISMATCH QUARANTINED
AUTHORIZED TERMS_MISMATCH QUARANTINED
UNKNOWN TERMS_MISMATCH QUARANTINED
RECONCILING TERMS_MISMATCH QUARANTINED
CONFIRMED_NOT_APPLIED TERMS_MISMATCH QUARANTINED
FAILED_TERMINAL TERMS_MISMATCH QUARANTINED
"""

# Edges ADR 0027 adds: a signed webhook's stamped entity on the intent's terms settles it from the same states.
WEBHOOK_EDGES = """
AUTHORIZED WEBHOOK_APPLIED APPLIED
UNKNOWN WEBHOOK_APPLIED APPLIED
RECONCILING WEBHOOK_APPLIED APPLIED
CONFIRMED_NOT_APPLIED WEBHOOK_APPLIED APPLIED
FAILED_TERMINAL WEBHOOK_APPLIED APPLIED
"""

# Edges ADR 0024 adds: the repeat of a not-applied call, judged afresh and held, waits for a person.
REJUDGED_EDGES = """
CONFIRMED_NOT_APPLIED GATES_HELD HELD
FAILED_TERMINAL GATES_HELD HELD
"""

# The edge ADR 0026 adds: a retry withdrawn before it was sent puts the earlier attempt back to be reconciled.
WITHDRAWN_RETRY_EDGES = """
AUTHORIZED RETRY_WITHDRAWN UNKNOWN
"""


# Edges ADR 0029 adds: a ledger restored from a lagging replica sends nothing it shows in motion (the reconciler
# reads its stamp), and the restore's read of the rail settles, by our stamp on our terms, an intent the ledger
# never knew (recorded PROPOSED in the same transaction) or one the lost tail released or reopened and sent.
RESTORE_EDGES = """
AUTHORIZED RESTORED_UNSETTLED UNKNOWN
IN_FLIGHT RESTORED_UNSETTLED UNKNOWN
RECONCILING RESTORED_UNSETTLED UNKNOWN
PROPOSED RECOVERED_FROM_RAIL APPLIED
HELD RECOVERED_FROM_RAIL APPLIED
CONFIRMED_NOT_APPLIED RECOVERED_FROM_RAIL APPLIED
FAILED_TERMINAL RECOVERED_FROM_RAIL APPLIED
"""


# SPEC §6 edges no code fires, taken out of the table (ADR 0036): a refusal makes no intent (ADR 0008), and an
# authorized intent is quarantined only on evidence (TERMS_MISMATCH), never on its own.
REMOVED_EDGES = """
PROPOSED GATES_BLOCKED BLOCKED
AUTHORIZED QUARANTINE QUARANTINED
"""


def spec_edges() -> dict[tuple[State, Event], State]:
    edges = {}
    for line in (SPEC_TABLE + SEND_SIDE_EDGES + TERMS_EDGES + WEBHOOK_EDGES + REJUDGED_EDGES
                 + WITHDRAWN_RETRY_EDGES + RESTORE_EDGES).split("\n"):
        if not line.strip():
            continue
        src, event, dst = line.split()
        edges[(State(src), Event(event))] = State(dst)
    return edges


def test_transition_table_is_exactly_the_spec() -> None:
    assert TRANSITIONS == spec_edges()


@pytest.mark.parametrize("line", REMOVED_EDGES.split("\n")[1:-1])
def test_an_edge_nothing_fires_is_refused(ledger: sqlite3.Connection, line: str) -> None:
    src, event, _ = line.split()
    propose(ledger, "R" * 32)
    if src == "AUTHORIZED":
        apply(ledger, "R" * 32, Event.GATES_PASSED, 2)
    with pytest.raises(IllegalTransition), transaction(ledger):
        intents.transition(ledger, "acc_TEST", "R" * 32, Event(event), now=3, actor="t")
    assert intents.require_intent(ledger, "acc_TEST", "R" * 32).state is State(src)


def apply(conn: sqlite3.Connection, sik: str, event: Event, now: int) -> intents.Intent:
    with transaction(conn):
        if event is Event.ATTEMPT_STARTED:
            return intents.start_attempt(
                conn, "acc_TEST", sik, now=now, lease_owner="w1", lease_epoch=1, lease_expires_at=now + 1000,
                request={"n": now},
            )  # fmt: skip
        if event is Event.RECONCILE_STARTED:
            return intents.begin_reconcile(conn, "acc_TEST", sik, now=now, owner="r1", lease_expires_at=now + 1000)
        detail = {"evidence": "rail statement line 7"} if event.name.startswith("OPERATOR_") else None
        return intents.transition(conn, "acc_TEST", sik, event, now=now, detail=detail, actor="ops@example.com",
                                  reasserted=allow("TEST_REASSERTED"))  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(list(Event)), min_size=1, max_size=40))
def test_random_event_sequences_keep_the_invariants(events: list[Event]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        conn = open_ledger(Path(tmp) / "l.sqlite3")
        sik = "P" * 32
        propose(conn, sik)
        state, attempt_seq, attempted, rejudged_hold = State.PROPOSED, 0, False, False
        expected_audit = 1
        for now, event in enumerate(events, start=2):
            legal = (state, event) in spec_edges()
            if not legal:
                with pytest.raises(IllegalTransition):
                    apply(conn, sik, event, now)
                after = intents.require_intent(conn, "acc_TEST", sik)
                assert (after.state, after.attempt_seq) == (state, attempt_seq), "a refused event changed the row"
                continue
            new = apply(conn, sik, event, now).state
            expected_audit += 1
            assert new == spec_edges()[(state, event)]
            assert state not in (State.APPLIED, State.BLOCKED), "I4: an absorbing state changed"
            if new is State.IN_FLIGHT:
                assert state is State.AUTHORIZED, "the only edge into a rail call is AUTHORIZED -> IN_FLIGHT"
            if new is State.AUTHORIZED and attempted:
                assert (state, event) in {
                    (State.CONFIRMED_NOT_APPLIED, Event.RETRY_AUTHORIZED),
                    (State.CONFIRMED_NOT_APPLIED, Event.REOPENED),
                    (State.FAILED_TERMINAL, Event.REOPENED),
                } or (state, event, rejudged_hold) == (State.HELD, Event.HOLD_RELEASED, True), (
                    f"re-entered AUTHORIZED after an attempt via {state} {event}")
            if new is State.HELD:  # ADR 0024: after an attempt, a hold comes only from a not-applied state
                rejudged_hold = state in (State.CONFIRMED_NOT_APPLIED, State.FAILED_TERMINAL)
                assert rejudged_hold or not attempted, f"held after an attempt from {state}"
            row = intents.require_intent(conn, "acc_TEST", sik)
            if event is Event.ATTEMPT_STARTED:
                assert row.attempt_seq == attempt_seq + 1, "I5: attempt_seq must increase by one per attempt"
                attempted = True
            else:
                assert row.attempt_seq == attempt_seq
            state, attempt_seq = new, row.attempt_seq
        assert audit.count(conn) == expected_audit, "every transition appends exactly one audit row"
        assert audit.verify_chain(conn) is None
        conn.close()


def test_operator_resolution_needs_an_operator_and_evidence(ledger: sqlite3.Connection) -> None:
    sik = "Q" * 32
    propose(ledger, sik)
    apply(ledger, sik, Event.GATES_HELD, 2)
    with transaction(ledger):
        intents.transition(ledger, "acc_TEST", sik, Event.QUARANTINE, now=3)
    with pytest.raises(IllegalTransition), transaction(ledger):
        intents.transition(ledger, "acc_TEST", sik, Event.OPERATOR_RESOLVED_APPLIED, now=4, actor="ops")
    assert intents.require_intent(ledger, "acc_TEST", sik).state is State.QUARANTINED


def test_attempt_started_only_through_start_attempt(ledger: sqlite3.Connection) -> None:
    sik = "R" * 32
    propose(ledger, sik)
    apply(ledger, sik, Event.GATES_PASSED, 2)
    with pytest.raises(IllegalTransition), transaction(ledger):
        intents.transition(ledger, "acc_TEST", sik, Event.ATTEMPT_STARTED, now=3)


def test_stale_epoch_cannot_write_an_outcome(ledger: sqlite3.Connection) -> None:
    sik = "F" * 32
    propose(ledger, sik)
    apply(ledger, sik, Event.GATES_PASSED, 2)
    apply(ledger, sik, Event.ATTEMPT_STARTED, 3)  # written under epoch 1
    with pytest.raises(StaleLease), transaction(ledger):
        intents.transition(ledger, "acc_TEST", sik, Event.RAIL_APPLIED, now=4, expect_epoch=2, expect_attempt_seq=1)
    with pytest.raises(StaleLease), transaction(ledger):
        intents.transition(ledger, "acc_TEST", sik, Event.RAIL_APPLIED, now=4, expect_epoch=1, expect_attempt_seq=0)
    assert intents.require_intent(ledger, "acc_TEST", sik).state is State.IN_FLIGHT
    with transaction(ledger):
        intents.transition(ledger, "acc_TEST", sik, Event.RAIL_APPLIED, now=5, expect_epoch=1, expect_attempt_seq=1,
                           set_fields={"rail_entity_id": "rfnd_X"})  # fmt: skip
    assert intents.require_intent(ledger, "acc_TEST", sik).rail_entity_id == "rfnd_X"


def test_a_failed_transaction_leaves_no_audit_row(ledger: sqlite3.Connection) -> None:
    sik = "G" * 32
    propose(ledger, sik)
    before = audit.count(ledger)
    with pytest.raises(RuntimeError), transaction(ledger):
        intents.transition(ledger, "acc_TEST", sik, Event.GATES_PASSED, now=2)
        raise RuntimeError("crash between the state change and commit")
    assert audit.count(ledger) == before
    assert intents.require_intent(ledger, "acc_TEST", sik).state is State.PROPOSED
