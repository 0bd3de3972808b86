"""Razorpay's error shape, raised by handlers and rendered by the app.

Razorpay fills `source`/`step`/`reason` for a refused input ("business" / "payment_initiation" /
"input_validation_failed") and sends "NA" in all three when the error is not about the request's
content — bad credentials, an unknown URL, a server error. `metadata` is always an object.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

BAD_REQUEST = "BAD_REQUEST_ERROR"
SERVER_ERROR = "SERVER_ERROR"
ID_NOT_FOUND = "The id provided does not exist"
INVALID_API_KEY = "The api key provided is invalid"
URL_NOT_FOUND = "The requested URL was not found on the server."
NA = "NA"


class RailHttpError(Exception):
    """Raised when a request is refused; rendered as {"error": {...}} with the given HTTP status."""

    def __init__(
        self,
        description: str,
        *,
        status: int = 400,
        code: str = BAD_REQUEST,
        field: str | None = None,
        reason: str = "input_validation_failed",
    ) -> None:
        super().__init__(description)
        self.description = description
        self.status = status
        self.code = code
        self.field = field
        self.reason = reason

    def response(self) -> JSONResponse:
        return error_response(
            self.status, self.code, self.description, field=self.field, source="business",
            step="payment_initiation", reason=self.reason,
        )  # fmt: skip


def error_body(
    code: str,
    description: str,
    *,
    field: str | None = None,
    source: str = NA,
    step: str = NA,
    reason: str = NA,
) -> dict[str, Any]:
    error: dict[str, Any] = {
        "code": code,
        "description": description,
        "source": source,
        "step": step,
        "reason": reason,
        "metadata": {},
    }
    # Razorpay omits `field` when the error is not about one input; clients must cope (SPEC §14).
    if field is not None:
        error["field"] = field
    return {"error": error}


def error_response(
    status: int,
    code: str,
    description: str,
    *,
    field: str | None = None,
    source: str = NA,
    step: str = NA,
    reason: str = NA,
) -> JSONResponse:
    body = error_body(code, description, field=field, source=source, step=step, reason=reason)
    return JSONResponse(body, status_code=status)


def not_found() -> RailHttpError:
    # Razorpay answers unknown ids with 400, not 404, and names no field (SPEC §14).
    return RailHttpError(ID_NOT_FOUND)


def unauthorized() -> JSONResponse:
    return error_response(401, BAD_REQUEST, INVALID_API_KEY)


def unknown_url() -> JSONResponse:
    # Razorpay answers an unknown URL (or a known URL with the wrong method) with 400, like an unknown id.
    return error_response(400, BAD_REQUEST, URL_NOT_FOUND)
