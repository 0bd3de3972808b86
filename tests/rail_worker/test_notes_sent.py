"""The notes a money call sends to the rail (issue 46): every key Interlock writes — the SIK stamp, and the merchant
and agent a restore reads to record a lost entity under its owner (ADR 0029) — beside the agent's own, within
Razorpay's 15."""

from __future__ import annotations

import sqlite3

import pytest

from interlock.arguments import parse_money_call
from interlock.notes import AGENT_MAX_NOTES, MAX_NOTE_CHARS, RAIL_MAX_NOTES, RESERVED_NOTE_KEYS
from interlock.sik import stamp_notes
from ledger import intents
from ledger.queries import PAYOUT_TOOL
from rail_worker.execute import rail_request
from tests.ledger.helpers import put_intent
from tests.mandates import AGENT, MERCHANT

SIK = "N" * 32
PAYEE = "fa_N0000000000001"
ARGUMENTS = {
    "create_refund": {"payment_id": "pay_N0000000000001", "amount": 48_000},
    "create_instant_settlement": {"amount": 48_000},
    PAYOUT_TOOL: {"fund_account_id": PAYEE, "amount": 48_000, "currency": "INR", "mode": "IMPS",
                  "purpose": "vendor bill"},
}  # fmt: skip
PAYOUT_PARAMS = {"account_number": "7878780080316316", "mode": "IMPS", "purpose": "vendor bill",
                 "queue_if_low_balance": False}  # fmt: skip


@pytest.mark.parametrize("tool", sorted(ARGUMENTS))
def test_an_agent_using_its_whole_allowance_of_notes_still_sends_every_key_interlock_writes(
    ledger: sqlite3.Connection, tool: str
) -> None:
    # Each key and value at the rail's 256 characters too: nothing Interlock adds may push a note past a limit.
    notes = {f"{i:02d}".ljust(MAX_NOTE_CHARS, "k"): "v" * MAX_NOTE_CHARS for i in range(AGENT_MAX_NOTES)}
    call = parse_money_call(tool, {**ARGUMENTS[tool], "notes": notes})  # accepted: exactly the allowance
    params = {"amount": 48_000, "notes": call.notes, **(PAYOUT_PARAMS if tool == PAYOUT_TOOL else {})}
    put_intent(ledger, SIK, "AUTHORIZED", amount=48_000, tool=tool, subject=PAYEE, params=params,
               merchant_id=MERCHANT, agent_id=AGENT)  # fmt: skip

    sent = rail_request(intents.require_intent(ledger, MERCHANT, SIK))["notes"]

    assert len(sent) == RAIL_MAX_NOTES
    assert {key: sent[key] for key in RESERVED_NOTE_KEYS} == {"interlock_sik": SIK, "interlock_merchant": MERCHANT,
                                                              "interlock_agent": AGENT}  # fmt: skip
    assert {key: sent[key] for key in notes} == notes
    assert all(len(key) <= MAX_NOTE_CHARS and len(value) <= MAX_NOTE_CHARS for key, value in sent.items())


def test_an_intent_admitted_with_more_notes_than_today_goes_without_its_owner_not_past_the_rail_s_limit() -> None:
    """Before the allowance left room for the owner an agent could send 14 notes of its own: such an intent, sent or
    retried after the upgrade, keeps its stamp and goes without the owner, as it did then."""
    legacy = stamp_notes(SIK, {f"k{i}": "v" for i in range(RAIL_MAX_NOTES - 1)}, owner=(MERCHANT, AGENT))
    assert len(legacy) == RAIL_MAX_NOTES and legacy["interlock_sik"] == SIK and "interlock_merchant" not in legacy
