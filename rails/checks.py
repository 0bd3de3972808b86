"""Argument checks every rail adapter makes before anything is sent: a refused argument never leaves."""

from __future__ import annotations

import re
from typing import Any

from interlock.errors import InvalidInput
from interlock.money import parse_amount

MAX_PAGE = 100  # Razorpay's list limit (SPEC §14); above it the rail answers 400
_ID = re.compile(r"^[A-Za-z0-9_]{1,64}$")


def page_args(count: int, skip: int) -> dict[str, int]:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PAGE:
        raise InvalidInput(f"count must be an integer in 1..{MAX_PAGE}, got {count!r}", field="count")
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
        raise InvalidInput(f"skip must be a non-negative integer, got {skip!r}", field="skip")
    return {"count": count, "skip": skip}


def entity_id(value: str, field: str) -> str:
    # Ids go into URL paths and tool arguments: refuse anything that could change what is addressed.
    if not isinstance(value, str) or not _ID.match(value):
        raise InvalidInput(f"{field} must be 1-64 characters of [A-Za-z0-9_], got {value!r}", field=field)
    return value


def amount(value: Any) -> int:
    return parse_amount(value, field="amount")
