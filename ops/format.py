"""How operator screens print money and times (display only; the ledger keeps integers)."""

from __future__ import annotations

import datetime as dt

# ISO 4217 minor-unit exponents that are not 2; anything else displays with 2 decimals.
_EXPONENTS = {"JPY": 0, "KRW": 0, "BHD": 3, "KWD": 3, "OMR": 3}


def format_minor(amount_minor: int, currency: str) -> str:
    """350000 INR -> '3,500.00 INR' (the integer is what was approved; this is how a person reads it)."""
    exponent = _EXPONENTS.get(currency, 2)
    major, minor = divmod(abs(amount_minor), 10**exponent)
    sign = "-" if amount_minor < 0 else ""
    return f"{sign}{major:,}" + (f".{minor:0{exponent}d}" if exponent else "") + f" {currency}"


def format_ms(epoch_ms: int | None) -> str:
    if epoch_ms is None:
        return "-"
    return dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
