"""ledger.states.next_state: the table lookup every transition goes through, for enum members and for the plain
strings a row or a message carries, and None for anything the table does not name."""

from __future__ import annotations

from ledger.states import Event, State, next_state


def test_the_next_state_is_the_tables_edge_for_members_and_for_their_strings() -> None:
    assert next_state(State.PROPOSED, Event.GATES_PASSED) is State.AUTHORIZED
    assert next_state("IN_FLIGHT", "RAIL_AMBIGUOUS") is State.UNKNOWN
    assert next_state("RECONCILING", Event.RECONCILE_CONFIRMED_ABSENT) is State.CONFIRMED_NOT_APPLIED


def test_an_edge_the_table_lacks_or_an_unknown_name_has_no_next_state() -> None:
    assert next_state(State.APPLIED, Event.REOPENED) is None
    assert next_state("PROPOSED", "NO_SUCH_EVENT") is None
    assert next_state("NO_SUCH_STATE", "GATES_PASSED") is None
