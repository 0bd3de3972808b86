"""SIK vectors (SPEC §4): the key names the operation, not the call."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from interlock.sik import carries_stamp, compute_sik, receipt_for, stamp_notes, stamped_siks, window_bucket

BASE = {
    "merchant_id": "acc_DEMO000001",
    "tool": "create_refund",
    "subject": "pay_1002",
    "amount_minor": 189900,
    "currency": "INR",
}


def by_hand(canonical: str) -> str:
    return base64.b32encode(hashlib.sha256(canonical.encode()).digest()).decode().rstrip("=")[:32]


def test_refund_vector_matches_a_hand_written_canonical_form() -> None:
    # RFC 8785: keys sorted by code point, no whitespace, null literals.
    canonical = (
        '{"amount_minor":189900,"currency":"INR","distinct":null,"extra":null,'
        '"merchant_id":"acc_DEMO000001","subject":"pay_1002","tool":"create_refund","v":1,"window":null}'
    )
    assert compute_sik(**BASE) == by_hand(canonical) == "HQUYGA6KHP3J5C6LSJL73MWU3CB3XOSU"


VECTORS = [
    ({}, "HQUYGA6KHP3J5C6LSJL73MWU3CB3XOSU"),
    ({"distinct": "second item missing"}, "GLIFGZL3YDCSY5X6N4AGSF4KOLHH4XDD"),
    (
        {"tool": "create_instant_settlement", "subject": "balance", "amount_minor": 50000, "window": 20000},
        "DFVB6664MZ6B244PIPWRCQHW5IMXKRTJ",
    ),
]


@pytest.mark.parametrize(("changes", "expected"), VECTORS)
def test_known_vectors(changes: dict[str, object], expected: str) -> None:
    assert compute_sik(**{**BASE, **changes}) == expected


def test_key_is_32_base32_characters() -> None:
    sik = compute_sik(**BASE)
    assert len(sik) == 32
    assert set(sik) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")


@pytest.mark.parametrize(
    "changes",
    [
        {"merchant_id": "acc_DEMO000002"},
        {"tool": "create_instant_settlement"},
        {"subject": "pay_1003"},
        {"amount_minor": 189901},
        {"currency": "USD"},
        {"extra": {"speed": "optimum"}},
        {"window": 0},
        {"distinct": "late delivery"},
    ],
)
def test_changing_any_semantic_field_changes_the_key(changes: dict[str, object]) -> None:
    assert compute_sik(**{**BASE, **changes}) != compute_sik(**BASE)


def test_request_ids_key_order_and_whitespace_do_not_change_the_key() -> None:
    # Two agent calls for the same operation: different request ids, key order and formatting.
    call_a = json.loads('{"request_id": "r-1", "payment_id": "pay_1002", "amount": 189900}')
    call_b = json.loads('{  "amount":189900 ,\n "payment_id":"pay_1002","request_id":"r-2"}')
    key_a = compute_sik(**{**BASE, "subject": call_a["payment_id"], "amount_minor": call_a["amount"]})
    key_b = compute_sik(**{**BASE, "subject": call_b["payment_id"], "amount_minor": call_b["amount"]})
    assert key_a == key_b
    extra_a = {"speed": "normal", "x": [1, 2]}
    extra_b = json.loads('{"x":[1,2],   "speed":"normal"}')
    assert compute_sik(**BASE, extra=extra_a) == compute_sik(**BASE, extra=extra_b)


def test_refunds_have_no_window_so_time_never_makes_a_new_refund() -> None:
    assert window_bucket(1_700_000_000_000, None) is None
    assert compute_sik(**BASE, window=window_bucket(1, None)) == compute_sik(
        **BASE, window=window_bucket(10**13, None)
    )


def test_windowed_tools_get_a_new_key_in_the_next_window() -> None:
    day = 86_400_000
    today, later_today, tomorrow = 20_000 * day + 5, 20_000 * day + day - 1, 20_001 * day
    settle = {**BASE, "tool": "create_instant_settlement", "subject": "balance"}
    assert window_bucket(today, day) == window_bucket(later_today, day) == 20_000
    assert compute_sik(**settle, window=window_bucket(today, day)) == compute_sik(
        **settle, window=window_bucket(later_today, day)
    )
    assert compute_sik(**settle, window=window_bucket(tomorrow, day)) != compute_sik(
        **settle, window=window_bucket(today, day)
    )


def test_distinct_reason_is_the_only_way_to_a_second_identical_refund() -> None:
    first = compute_sik(**BASE)
    assert compute_sik(**BASE, distinct=None) == first
    assert compute_sik(**BASE, distinct="late delivery") != first
    assert compute_sik(**BASE, distinct="late delivery") == compute_sik(**BASE, distinct="late delivery")


@pytest.mark.parametrize("amount", [100.0, True, "189900", 0, -1])
def test_sik_refuses_non_money_amounts(amount: object) -> None:
    with pytest.raises(ValueError):
        compute_sik(**{**BASE, "amount_minor": amount})  # type: ignore[arg-type]


def test_stamps_and_matching() -> None:
    sik = compute_sik(**BASE)
    assert receipt_for(sik) == "ilk_" + sik
    notes = stamp_notes(sik, {"reason": "damaged", "interlock_sik": "forged"})
    assert notes == {"reason": "damaged", "interlock_sik": sik}
    assert carries_stamp({"notes": notes}, sik)
    assert carries_stamp({"notes": [], "receipt": "ilk_" + sik}, sik)
    assert not carries_stamp({"notes": [], "receipt": None, "amount": 189900}, sik), "amount is not an identity"
    assert not carries_stamp({"notes": {"interlock_sik": "OTHER"}}, sik)


def test_a_payouts_reference_id_is_our_stamp_like_a_refunds_receipt() -> None:
    # SPEC §18: a payout carries "ilk_" + SIK in reference_id (RazorpayX has no receipt), beside notes.interlock_sik.
    sik = compute_sik(**BASE)
    assert carries_stamp({"notes": [], "reference_id": "ilk_" + sik}, sik)
    assert not carries_stamp({"notes": [], "reference_id": sik}, sik), "only the prefixed form is our stamp"
    assert not carries_stamp({"notes": [], "reference_id": "ilk_OTHER"}, sik)


def test_the_siks_an_entity_names_are_read_from_every_stamp_once() -> None:
    assert stamped_siks({"notes": {"interlock_sik": "A" * 32}, "reference_id": "ilk_" + "A" * 32}) == ("A" * 32,)
    assert stamped_siks({"notes": {"interlock_sik": "A" * 32}, "receipt": "ilk_" + "B" * 32}) == ("A" * 32, "B" * 32)
    assert stamped_siks({"notes": [], "reference_id": "ilk_" + "C" * 32}) == ("C" * 32,)
    assert stamped_siks({"notes": {"interlock_sik": 7}, "receipt": "ilk_", "reference_id": "vendor-17"}) == ()
