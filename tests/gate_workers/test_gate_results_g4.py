"""G4's whole result: it never blocks, and names the SIK of a new call, or the SIK and the existing intent's state
of a repeat, so the rail worker's primary-key admit can answer the repeat with that intent (SPEC §10)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace

import pytest

from gate_workers.gates import g4_exactly_once
from interlock.messages import Verdict
from interlock.verdicts import GateResult
from tests.gate_workers.factories import context, refund_action
from tests.ledger.helpers import put_intent

A = Verdict.ALLOW


def test_an_action_with_no_key_is_allowed_as_keyless(ledger: sqlite3.Connection) -> None:
    action = refund_action(resolution_error="G2_PAYMENT_NOT_FOUND")
    assert g4_exactly_once.check(action, context(ledger)) == GateResult(A, "G4_NO_KEY", {})


def test_a_first_call_is_new_and_names_its_sik(ledger: sqlite3.Connection) -> None:
    action = refund_action()
    assert g4_exactly_once.check(action, context(ledger)) == GateResult(A, "G4_NEW", {"sik": action.sik})


@pytest.mark.parametrize("state", ["AUTHORIZED", "UNKNOWN", "APPLIED", "FAILED_TERMINAL"])
def test_a_repeat_is_allowed_as_a_duplicate_naming_the_existing_state(ledger: sqlite3.Connection, state: str) -> None:
    action = refund_action()
    assert action.sik is not None
    put_intent(ledger, action.sik, state, amount=50_000)
    assert g4_exactly_once.check(action, context(ledger)) == GateResult(
        A, "G4_DUPLICATE", {"sik": action.sik, "existing_state": state}
    )


def test_the_same_sik_under_another_merchant_is_new(ledger: sqlite3.Connection) -> None:
    action = refund_action()
    assert action.sik is not None
    put_intent(ledger, action.sik, "APPLIED", amount=50_000, merchant_id="acc_OTHER00001")
    assert g4_exactly_once.check(action, context(ledger)) == GateResult(A, "G4_NEW", {"sik": action.sik})
    assert g4_exactly_once.check(replace(action, merchant_id="acc_OTHER00001"), context(ledger)).reason_code == (
        "G4_DUPLICATE"
    )
