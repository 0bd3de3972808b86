"""Each gate, table-driven: every reason code it can give and its ALLOW path."""

from __future__ import annotations

import sqlite3
from dataclasses import replace

import pytest

from gate_workers.gates import g1_scope, g2_value, g3_limits, g4_exactly_once, g5_purpose, g6_provenance
from gate_workers.gates.g5_purpose import AdvisoryVerdict, Objection
from interlock.messages import Verdict
from interlock.tools import current_pins
from tests.gate_workers.factories import NOW, context, payment, refund_action, settlement_action
from tests.ledger.helpers import put_intent
from tests.mandates import make_mandate

A, H, B = Verdict.ALLOW, Verdict.HOLD, Verdict.BLOCK


@pytest.mark.parametrize(
    ("action_kw", "mandate_changes", "now", "expected"),
    [
        ({}, {}, NOW, (A, "G1_IN_SCOPE")),
        ({"tool": "create_instant_settlement"}, {}, NOW, (A, "G1_IN_SCOPE")),
        ({"agent_id": "agent_other"}, {}, NOW, (B, "G1_AGENT_MISMATCH")),
        ({"merchant_id": "acc_OTHER"}, {}, NOW, (B, "G1_MERCHANT_MISMATCH")),
        ({}, {"expires_at": NOW}, NOW, (B, "G1_MANDATE_EXPIRED")),
        ({}, {"issued_at": NOW + 1}, NOW, (B, "G1_MANDATE_NOT_YET_VALID")),
    ],
)
def test_g1_scope(
    ledger: sqlite3.Connection, action_kw: dict, mandate_changes: dict, now: int, expected: tuple
) -> None:
    mandate = make_mandate({"expires_at": NOW * 2, **mandate_changes})
    result = g1_scope.check(refund_action(**action_kw), context(ledger, mandate, now=now))
    assert (result.verdict, result.reason_code) == expected


def test_g1_tool_not_granted(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate(drop=("scope.grants.create_instant_settlement", "idempotency.create_instant_settlement"))
    result = g1_scope.check(settlement_action(), context(ledger, mandate))
    assert (result.verdict, result.reason_code) == (B, "G1_TOOL_NOT_GRANTED")


def test_g1_without_a_mandate(ledger: sqlite3.Connection) -> None:
    ctx = replace(context(ledger), mandate=None)
    assert g1_scope.check(refund_action(), ctx).reason_code == "G1_NO_MANDATE"


@pytest.mark.parametrize(
    ("amount", "pay", "changes", "expected"),
    [
        (50000, payment(), {}, (A, "G2_WITHIN_VALUE")),
        (189900, payment(), {"approval.hold_above_minor": 500000}, (A, "G2_WITHIN_VALUE")),
        (189901, payment(), {}, (B, "G2_EXCEEDS_REFUNDABLE")),
        (100000, payment(refunded=100000), {}, (B, "G2_EXCEEDS_REFUNDABLE")),
        (4800000, payment(), {}, (B, "G2_EXCEEDS_REFUNDABLE")),
        (600000, payment(amount=900000), {}, (B, "G2_ABOVE_MAX")),
        (99, payment(), {}, (B, "G2_BELOW_MIN")),
        (50000, payment(currency="USD"), {}, (B, "G2_CURRENCY_MISMATCH")),
        (50000, payment(status="authorized", captured=False), {}, (B, "G2_NOT_CAPTURED")),
        (300001, payment(amount=400000), {}, (H, "G2_ABOVE_HOLD_THRESHOLD")),
        (300000, payment(amount=400000), {}, (A, "G2_WITHIN_VALUE")),
    ],
)
def test_g2_value(ledger: sqlite3.Connection, amount: int, pay: object, changes: dict, expected: tuple) -> None:
    result = g2_value.check(refund_action(amount, pay=pay), context(ledger, make_mandate(changes)))  # type: ignore[arg-type]
    assert (result.verdict, result.reason_code) == expected


def test_g2_resolution_errors_block_with_their_reason(ledger: sqlite3.Connection) -> None:
    action = refund_action(resolution_error="G2_PAYMENT_NOT_FOUND")
    result = g2_value.check(action, context(ledger))
    assert (result.verdict, result.reason_code) == (B, "G2_PAYMENT_NOT_FOUND")


@pytest.mark.parametrize("state", ["AUTHORIZED", "IN_FLIGHT", "UNKNOWN", "RECONCILING", "HELD"])
def test_g2_other_intents_in_motion_or_held_reduce_the_ceiling(ledger: sqlite3.Connection, state: str) -> None:
    put_intent(ledger, "O" * 32, state, amount=100000)
    assert g2_value.check(refund_action(89900), context(ledger)).verdict == A
    result = g2_value.check(refund_action(89901), context(ledger))
    assert (result.verdict, result.reason_code) == (B, "G2_EXCEEDS_REFUNDABLE")
    assert result.detail["in_motion_minor"] == 100000


@pytest.mark.parametrize("state", ["APPLIED", "BLOCKED", "FAILED_TERMINAL"])
def test_g2_settled_intents_do_not_reduce_the_ceiling(ledger: sqlite3.Connection, state: str) -> None:
    # APPLIED money is already in the payment's amount_refunded, read from the rail itself.
    put_intent(ledger, "O" * 32, state, amount=100000)
    assert g2_value.check(refund_action(189900), context(ledger)).verdict == A


def test_g2_own_intent_is_not_counted_against_itself(ledger: sqlite3.Connection) -> None:
    action = refund_action(189900)
    assert action.sik is not None
    put_intent(ledger, action.sik, "UNKNOWN", amount=189900)
    assert g2_value.check(action, context(ledger)).verdict == A


def test_g2_settlement_against_balance(ledger: sqlite3.Connection) -> None:
    assert g2_value.check(settlement_action(100000, balance=100000), context(ledger)).verdict == A
    result = g2_value.check(settlement_action(100001, balance=100000), context(ledger))
    assert (result.verdict, result.reason_code) == (B, "G2_EXCEEDS_BALANCE")


def test_g4_new_and_duplicate(ledger: sqlite3.Connection) -> None:
    action = refund_action()
    assert g4_exactly_once.check(action, context(ledger)).reason_code == "G4_NEW"
    assert action.sik is not None
    put_intent(ledger, action.sik, "APPLIED", amount=50000)
    result = g4_exactly_once.check(action, context(ledger))
    assert (result.verdict, result.reason_code) == (A, "G4_DUPLICATE")
    assert result.detail["existing_state"] == "APPLIED"


class _Objector:
    def judge(self, action: object, purposes: object, min_similarity: float, verdict: AdvisoryVerdict) -> Objection:
        return Objection(verdict, "G5_OFF_PURPOSE", {"similarity": "0.1000"})


class _Silent:
    def judge(self, action: object, purposes: object, min_similarity: float, verdict: AdvisoryVerdict) -> None:
        return None


def test_g5_is_off_by_default_and_can_only_object(ledger: sqlite3.Connection) -> None:
    assert g5_purpose.check(refund_action(), context(ledger, purpose_judge=_Objector())).reason_code == "G5_DISABLED"
    on = make_mandate({"purpose_check": {"mode": "hold"}})
    held = g5_purpose.check(refund_action(), context(ledger, on, purpose_judge=_Objector()))
    assert (held.verdict, held.reason_code, held.detail["similarity"]) == (H, "G5_OFF_PURPOSE", "0.1000")
    assert held.detail["advisory"] is True
    silent = g5_purpose.check(refund_action(), context(ledger, on, purpose_judge=_Silent()))
    assert (silent.verdict, silent.reason_code) == (A, "G5_NO_OBJECTION")
    blocking = make_mandate({"purpose_check": {"mode": "block"}})
    assert g5_purpose.check(refund_action(), context(ledger, blocking, purpose_judge=_Objector())).verdict == B


@pytest.mark.parametrize(("mode", "verdict"), [("hold", H), ("block", B)])
def test_g5_asked_for_without_a_judge_objects_rather_than_skip(ledger: sqlite3.Connection, mode: str,
                                                               verdict: Verdict) -> None:  # fmt: skip
    result = g5_purpose.check(refund_action(), context(ledger, make_mandate({"purpose_check": {"mode": mode}})))
    assert (result.verdict, result.reason_code) == (verdict, "G5_JUDGE_UNAVAILABLE")


def test_g6_pinned_unpinned_and_drift(ledger: sqlite3.Connection) -> None:
    pins = current_pins()
    assert g6_provenance.check(refund_action(), context(ledger)).reason_code == "G6_PINNED"
    drifted = {**pins, "create_refund": "0" * 64}
    result = g6_provenance.check(refund_action(), context(ledger, tool_hashes=drifted))
    assert (result.verdict, result.reason_code) == (B, "G6_MANIFEST_DRIFT")
    unpinned = make_mandate({"provenance.pinned_manifests": {}})
    result = g6_provenance.check(refund_action(), context(ledger, unpinned))
    assert (result.verdict, result.reason_code, result.detail["unpinned"]) == (A, "G6_UNPINNED", True)
    upstream = context(ledger, unpinned, upstream_tools=frozenset({"create_refund"}))
    assert g6_provenance.check(refund_action(), upstream).reason_code == "G6_UNPINNED_TOOL"


def test_g6_one_character_of_description_drift_blocks(ledger: sqlite3.Connection) -> None:
    from interlock.tools import TOOLS, tool_definition_hash

    spec = TOOLS["create_refund"]
    poisoned = tool_definition_hash(spec.name, spec.description.replace("paise", "paisE", 1), spec.input_schema)
    result = g6_provenance.check(refund_action(), context(ledger, tool_hashes={**current_pins(),
                                                                               "create_refund": poisoned}))
    assert (result.verdict, result.reason_code) == (B, "G6_MANIFEST_DRIFT")


def test_g3_is_not_applicable_without_a_resolved_amount(ledger: sqlite3.Connection) -> None:
    action = refund_action(resolution_error="G2_PAYMENT_NOT_FOUND")
    assert g3_limits.check(action, context(ledger)).reason_code == "G3_NOT_APPLICABLE"
