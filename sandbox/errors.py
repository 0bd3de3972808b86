"""Razorpay's error shape, raised by handlers and rendered by the app."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

BAD_REQUEST = "BAD_REQUEST_ERROR"
SERVER_ERROR = "SERVER_ERROR"
ID_NOT_FOUND = "The id provided does not exist"


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
        return error_response(self.status, self.code, self.description, field=self.field, reason=self.reason)


def error_body(code: str, description: str, *, field: str | None = None, reason: str = "NA") -> dict[str, Any]:
    error: dict[str, Any] = {
        "code": code,
        "description": description,
        "source": "business" if code == BAD_REQUEST else "NA",
        "step": "payment_initiation" if code == BAD_REQUEST else "NA",
        "reason": reason,
        "metadata": {},
    }
    # Razorpay omits `field` when the error is not about one input; clients must cope (SPEC §14).
    if field is not None:
        error["field"] = field
    return {"error": error}


def error_response(
    status: int, code: str, description: str, *, field: str | None = None, reason: str = "NA"
) -> JSONResponse:
    return JSONResponse(error_body(code, description, field=field, reason=reason), status_code=status)


def not_found() -> RailHttpError:
    # Razorpay answers unknown ids with 400, not 404 (SPEC §14).
    return RailHttpError(ID_NOT_FOUND, field="id", reason="NA")
