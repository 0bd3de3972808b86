"""interlock/terms.py (ADR 0016): a stamped entity is the intent's only on the intent's subject, amount and currency;
a settle-full-balance settlement on any positive amount up to the balance read."""

from __future__ import annotations

from typing import Any

import pytest

from interlock.terms import entity_terms, terms_mismatch

REFUND_TERMS = {"subject": "pay_ASHA1", "amount_minor": 189900, "currency": "INR"}
SETTLEMENT_TERMS = {"subject": "balance", "amount_minor": 50000, "currency": "INR"}


def _refund(**changes: Any) -> dict[str, Any]:
    return {"id": "rfnd_1", "payment_id": "pay_ASHA1", "amount": 189900, "currency": "INR", **changes}


def _settlement(**changes: Any) -> dict[str, Any]:
    return {"id": "setlod_1", "amount_requested": 50000, "amount_settled": 0, "currency": "INR", **changes}


def test_a_refund_on_the_intents_terms_matches() -> None:
    assert terms_mismatch("create_refund", REFUND_TERMS, _refund()) is None


@pytest.mark.parametrize(("changes", "differ"), [
    ({"payment_id": "pay_OTHER"}, ["subject"]),
    ({"amount": 1}, ["amount_minor"]),
    ({"currency": "USD"}, ["currency"]),
    ({"amount": 1, "currency": "USD", "payment_id": "pay_OTHER"}, ["subject", "amount_minor", "currency"]),
    ({"amount": True}, ["amount_minor"]),
    ({"amount": None}, ["amount_minor"]),
])  # fmt: skip
def test_a_refund_on_other_terms_is_a_mismatch_with_both_sets_of_terms(changes: dict[str, Any],
                                                                      differ: list[str]) -> None:  # fmt: skip
    found = terms_mismatch("create_refund", REFUND_TERMS, _refund(**changes))
    assert found is not None and found["differ"] == differ
    assert found["intent_terms"] == {**REFUND_TERMS, "full_balance": False}
    assert found["entity_terms"] == entity_terms("create_refund", _refund(**changes))


def test_a_settlement_must_be_for_the_amount_and_currency_asked() -> None:
    assert terms_mismatch("create_instant_settlement", SETTLEMENT_TERMS, _settlement()) is None
    less = terms_mismatch("create_instant_settlement", SETTLEMENT_TERMS, _settlement(amount_requested=49999))
    assert less is not None and less["differ"] == ["amount_minor"]
    usd = terms_mismatch("create_instant_settlement", SETTLEMENT_TERMS, _settlement(currency="USD"))
    assert usd is not None and usd["differ"] == ["currency"]


@pytest.mark.parametrize(("amount", "ok"), [(50000, True), (1, True), (50001, False), (0, False), (-5, False)])
def test_a_full_balance_settlement_is_any_positive_amount_within_the_balance_read(amount: int, ok: bool) -> None:
    found = terms_mismatch("create_instant_settlement", SETTLEMENT_TERMS, _settlement(amount_requested=amount),
                           full_balance=True)  # fmt: skip
    assert (found is None) is ok
