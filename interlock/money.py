"""Money is an integer count of minor units (paise) plus an ISO currency code. Nothing else is money."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from interlock.errors import InvalidAmount, InvalidInput

# SQLite INTEGER is signed 64-bit; anything at or above 2**63 cannot be stored, so it cannot be money.
MAX_MINOR = 2**63 - 1
_CURRENCY = re.compile(r"^[A-Z]{3}$")


def parse_amount(value: Any, *, field: str = "amount") -> int:
    """Return *value* as a positive integer amount of minor units, or raise InvalidAmount naming *field*.

    Refused: floats (even 100.0: a float on the wire means someone did arithmetic in floating
    point), bools (True is an int in Python), strings, zero, negatives, and values beyond int64.
    """
    if isinstance(value, bool):
        raise InvalidAmount(f"{field} must be an integer number of minor units, not a boolean ({value!r})", field=field)
    if isinstance(value, float):
        raise InvalidAmount(
            f"{field} must be an integer number of minor units (paise), not a float ({value!r}); "
            "e.g. Rs 1,899.00 is 189900",
            field=field,
        )
    if not isinstance(value, int):
        raise InvalidAmount(
            f"{field} must be an integer number of minor units, not {type(value).__name__} ({value!r})", field=field
        )
    if value <= 0:
        raise InvalidAmount(f"{field} must be positive, got {value}", field=field)
    if value > MAX_MINOR:
        raise InvalidAmount(f"{field} is too large ({value}); the most that can be recorded is {MAX_MINOR}",
                            field=field)
    return value


def parse_currency(value: Any, *, field: str = "currency") -> str:
    if not isinstance(value, str) or not _CURRENCY.match(value):
        raise InvalidInput(f"{field} must be a 3-letter upper-case ISO code like 'INR', got {value!r}", field=field)
    return value


@dataclass(frozen=True, slots=True)
class Money:
    amount_minor: int
    currency: str

    def __post_init__(self) -> None:
        parse_amount(self.amount_minor, field="amount_minor")
        parse_currency(self.currency)

    def __str__(self) -> str:
        return f"{self.amount_minor} {self.currency} (minor units)"


# ISO 4217 minor-unit exponents that are not 2; anything else displays with 2 decimals.
_EXPONENTS = {"JPY": 0, "KRW": 0, "BHD": 3, "KWD": 3, "OMR": 3}


def format_minor(amount_minor: int, currency: str) -> str:
    """350000 INR -> '3,500.00 INR' (display only: the integer is what was approved; this is how a person reads it)."""
    exponent = _EXPONENTS.get(currency, 2)
    major, minor = divmod(abs(amount_minor), 10**exponent)
    sign = "-" if amount_minor < 0 else ""
    return f"{sign}{major:,}" + (f".{minor:0{exponent}d}" if exponent else "") + f" {currency}"
