"""Strict input checks shared by the sandbox's endpoints; each failure is Razorpay's 400 naming the field."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from sandbox.errors import RailHttpError

MAX_NOTES = 15
MAX_NOTE_CHARS = 256
MAX_RECEIPT_CHARS = 40
MAX_COUNT = 100
DEFAULT_COUNT = 10
IDEMPOTENCY_KEY = re.compile(r"^[A-Za-z0-9_-]{10,}$")
DESCRIPTION = re.compile(r"^[A-Za-z0-9 ]{0,30}$")
PAYOUT_IDEMPOTENCY_HEADER = "X-Payout-Idempotency"
PAYOUT_IDEMPOTENCY_KEY = re.compile(r"^[A-Za-z0-9 _-]{4,36}$")
MAX_REFERENCE_ID_CHARS = 40


async def json_object(request: Request) -> dict[str, Any]:
    """The request body as a JSON object; an empty body is {}."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise RailHttpError("The request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise RailHttpError("The request body must be a JSON object")
    return body


def reject_unknown(body: Mapping[str, Any], allowed: Iterable[str]) -> None:
    extra = sorted(set(body) - set(allowed))
    if extra:
        raise RailHttpError(f"{extra[0]} is/are not required and should not be sent", field=extra[0])


def positive_int(value: Any, field: str, *, minimum: int = 1, below_minimum: str | None = None) -> int:
    # bool is an int subclass and 100.0 == 100: both are refused, amounts are integers of paise (SPEC §4).
    if isinstance(value, bool) or not isinstance(value, int):
        raise RailHttpError(f"The {field} must be an integer.", field=field)
    if value < minimum:
        raise RailHttpError(below_minimum or f"The {field} must be at least {minimum}.", field=field)
    return value


def boolean(value: Any, field: str) -> bool:
    # Razorpay takes 0/1 for a boolean too (the Python SDK's own example sends settle_full_balance: 0).
    if value is True or value is False or (type(value) is int and value in (0, 1)):
        return bool(value)
    raise RailHttpError(f"{field} must be a boolean", field=field)


def notes(value: Any) -> dict[str, Any]:
    if value is None or value == []:
        return {}
    if not isinstance(value, dict):
        raise RailHttpError("The notes field must be an object of key/value pairs.", field="notes")
    if len(value) > MAX_NOTES:
        raise RailHttpError(f"Number of fields in notes should be less than or equal to {MAX_NOTES}", field="notes")
    for key, item in value.items():
        if len(key) > MAX_NOTE_CHARS:
            raise RailHttpError(f"notes keys may be at most {MAX_NOTE_CHARS} characters", field="notes")
        if isinstance(item, bool) or not isinstance(item, str | int):
            raise RailHttpError(f"notes.{key} must be a string", field="notes")
        if len(str(item)) > MAX_NOTE_CHARS:
            raise RailHttpError(f"notes.{key} may be at most {MAX_NOTE_CHARS} characters", field="notes")
    return dict(value)


def receipt(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_RECEIPT_CHARS:
        raise RailHttpError(f"The receipt must be a string of at most {MAX_RECEIPT_CHARS} characters.", field="receipt")
    return value


def speed(value: Any) -> str | None:
    if value is None:
        return None
    if value not in ("normal", "optimum"):
        raise RailHttpError("The selected speed is invalid.", field="speed")
    return str(value)


def description(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not DESCRIPTION.match(value):
        raise RailHttpError(
            "The description may have at most 30 characters of letters, digits and spaces.", field="description"
        )
    return value


def idempotency_key(value: str | None) -> str | None:
    if value is None:
        return None
    if not IDEMPOTENCY_KEY.match(value):
        raise RailHttpError(
            "X-Refund-Idempotency must be at least 10 characters of letters, digits, '_' or '-'.",
            field="X-Refund-Idempotency",
        )
    return value


def payout_idempotency_key(value: str | None) -> str:
    """X-Payout-Idempotency: mandatory since 2025-03-15, 4-36 letters, digits, hyphens, underscores and spaces."""
    if value is None or value == "":
        raise RailHttpError("Idempotency key is missing. Include idempotency header and key in the request.",
                            field=PAYOUT_IDEMPOTENCY_HEADER)  # fmt: skip
    if not PAYOUT_IDEMPOTENCY_KEY.match(value):
        raise RailHttpError(
            "The idempotency key must be 4 to 36 characters of letters, digits, hyphens, underscores and spaces.",
            field=PAYOUT_IDEMPOTENCY_HEADER,
        )
    return value


def narration(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not DESCRIPTION.match(value):
        raise RailHttpError(
            "The narration may have at most 30 characters of letters, digits and spaces.", field="narration"
        )
    return value


def reference_id(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_REFERENCE_ID_CHARS:
        raise RailHttpError(
            f"The reference id must be a string of at most {MAX_REFERENCE_ID_CHARS} characters.", field="reference_id"
        )
    return value


def required(body: Mapping[str, Any], field: str) -> Any:
    """The value of a required field; missing (or empty) is Razorpay's "The x y field is required."."""
    value = body.get(field)
    if value is None or value == "":
        raise RailHttpError(f"The {field.replace('_', ' ')} field is required.", field=field)
    return value


def choice(value: Any, field: str, allowed: Iterable[str]) -> str:
    if not isinstance(value, str) or value not in tuple(allowed):
        raise RailHttpError(f"The selected {field.replace('_', ' ')} is invalid.", field=field)
    return value


MIN_TIMESTAMP = 946_684_800  # 2000-01-01: Razorpay's bounds for `from`/`to` on every list
MAX_TIMESTAMP = 4_765_046_400
LIST_PARAMS = ("count", "skip", "from", "to")


@dataclass(frozen=True)
class ListQuery:
    """A list request's paging and time window: `from`/`to` are inclusive unix seconds (SPEC §14)."""

    count: int
    skip: int
    since: int | None
    until: int | None

    def window(self, items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """The entities created inside [from, to], in the order given."""
        return [
            item
            for item in items
            if (self.since is None or item["created_at"] >= self.since)
            and (self.until is None or item["created_at"] <= self.until)
        ]

    def page(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return items[self.skip : self.skip + self.count]


def list_query(request: Request, *, extra: Iterable[str] = ()) -> ListQuery:
    """count 1..100 (default 10), skip >= 0, from/to unix seconds; any other parameter is refused.

    Razorpay refuses a query parameter it does not know rather than ignoring it, and so does the
    sandbox: a filter that is silently dropped looks exactly like a filter that matched everything.
    """
    reject_unknown(dict(request.query_params), (*LIST_PARAMS, *extra))
    count = _query_int(request, "count", DEFAULT_COUNT)
    if not 1 <= count <= MAX_COUNT:
        raise RailHttpError(f"The count may not be greater than {MAX_COUNT}.", field="count")
    skip = _query_int(request, "skip", 0)
    if skip < 0:
        raise RailHttpError("The skip must be at least 0.", field="skip")
    since, until = (_timestamp(request, name) for name in ("from", "to"))
    return ListQuery(count, skip, since, until)


def _timestamp(request: Request, name: str) -> int | None:
    value: int | None = _query_int(request, name, None)
    if value is not None and not MIN_TIMESTAMP <= value <= MAX_TIMESTAMP:
        raise RailHttpError(f"{name} must be between {MIN_TIMESTAMP} and {MAX_TIMESTAMP}", field=name)
    return value


def required_notes(body: Mapping[str, Any]) -> dict[str, Any]:
    """The `notes` of an edit (PATCH) body, the only field Razorpay lets you change; empty counts as missing."""
    reject_unknown(body, ("notes",))
    value = notes(body.get("notes"))
    if not value:
        raise RailHttpError("The notes field is required.", field="notes")
    return value


def _query_int(request: Request, name: str, default: int | None) -> Any:
    text = request.query_params.get(name)
    if text is None:
        return default
    if not re.fullmatch(r"-?[0-9]{1,18}", text):
        raise RailHttpError(f"The {name} must be an integer.", field=name)
    return int(text)
