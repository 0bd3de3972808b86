"""The agent's own notes (SPEC §10, issue 46): what interlock.arguments accepts beside the keys Interlock writes on
every money call, and how a refusal names the limit. The ingress and the gate workers both refuse with these."""

from __future__ import annotations

from typing import Any

import pytest

from interlock.arguments import parse_money_call, parse_notes
from interlock.errors import InvalidInput
from interlock.notes import AGENT_MAX_NOTES, MAX_NOTE_CHARS, RAIL_MAX_NOTES, RESERVED_NOTE_KEYS
from interlock.tools import MONEY_TOOLS, TOOLS

REFUND = {"payment_id": "pay_N0000000000001", "amount": 48_000}


def notes(count: int) -> dict[str, str]:
    return {f"k{i}": "v" for i in range(count)}


def refused(value: Any) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        parse_notes(value)
    return caught.value


def test_the_agent_may_send_the_rail_s_fifteen_less_the_three_keys_interlock_writes() -> None:
    assert RESERVED_NOTE_KEYS == ("interlock_sik", "interlock_merchant", "interlock_agent")
    assert (RAIL_MAX_NOTES, AGENT_MAX_NOTES) == (15, 12)
    assert parse_money_call("create_refund", {**REFUND, "notes": notes(12)}).notes == notes(12)


def test_one_note_more_than_leaves_room_for_interlock_s_keys_is_refused_naming_the_limit() -> None:
    exc = refused(notes(13))
    assert exc.field == "notes"
    assert str(exc) == ("notes: at most 12 of your own, this call has 13: Razorpay allows 15 and Interlock writes 3 "
                        "(interlock_sik, interlock_merchant, interlock_agent)")  # fmt: skip


@pytest.mark.parametrize("key", RESERVED_NOTE_KEYS)
def test_a_key_interlock_writes_is_refused_even_within_the_allowance(key: str) -> None:
    exc = refused({"ticket": "T-1", key: "acc_SOMEONEELSE"})
    assert exc.field == f"notes.{key}"
    assert f"notes.{key} is reserved" in str(exc)
    assert "interlock_sik, interlock_merchant, interlock_agent" in str(exc)


def test_keys_and_values_are_held_to_the_rail_s_256_characters() -> None:
    assert parse_notes({"k" * MAX_NOTE_CHARS: "v" * MAX_NOTE_CHARS}) == {"k" * MAX_NOTE_CHARS: "v" * MAX_NOTE_CHARS}
    long_key = refused({"k" * (MAX_NOTE_CHARS + 1): "v"})
    assert long_key.field == "notes" and "1 to 256 characters" in str(long_key)
    assert "1 to 256 characters" in str(refused({"": "v"}))
    long_value = refused({"reason": "v" * (MAX_NOTE_CHARS + 1)})
    assert long_value.field == "notes.reason" and "257 characters" in str(long_value) and "256" in str(long_value)
    assert refused({"reason": 7}).field == "notes.reason"
    assert refused(["reason"]).field == "notes"


def test_every_money_tool_s_schema_states_the_same_allowance() -> None:
    for name in MONEY_TOOLS:
        schema = TOOLS[name].input_schema["properties"]["notes"]
        assert schema["maxProperties"] == AGENT_MAX_NOTES
        assert schema["propertyNames"]["maxLength"] == schema["additionalProperties"]["maxLength"] == MAX_NOTE_CHARS
        assert all(key in schema["description"] for key in RESERVED_NOTE_KEYS)
