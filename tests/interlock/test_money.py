from __future__ import annotations

import pytest

from interlock.errors import InvalidAmount, InvalidInput
from interlock.money import Money, parse_amount, parse_currency


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1899.5, "not a float"),
        (100.0, "not a float"),
        (True, "not a boolean"),
        (False, "not a boolean"),
        ("100", "not str"),
        (None, "not NoneType"),
        (0, "must be positive"),
        (-1, "must be positive"),
        (2**63, "too large"),
    ],
)
def test_non_money_is_refused_with_a_clear_message(value: object, message: str) -> None:
    with pytest.raises(InvalidAmount, match=message) as info:
        parse_amount(value, field="amount")
    assert info.value.field == "amount"
    assert "amount" in str(info.value)


@pytest.mark.parametrize("value", [1, 189900, 2**63 - 1])
def test_positive_integers_are_money(value: int) -> None:
    assert parse_amount(value) == value


@pytest.mark.parametrize("code", ["inr", "IN", "INRR", 356, None])
def test_currency_is_three_upper_case_letters(code: object) -> None:
    with pytest.raises(InvalidInput, match="3-letter"):
        parse_currency(code)


def test_money_value_object_validates() -> None:
    assert str(Money(100, "INR")) == "100 INR (minor units)"
    with pytest.raises(InvalidAmount):
        Money(100.0, "INR")  # type: ignore[arg-type]
