"""The rail as an upstream MCP server exposing Razorpay MCP tool names (INTERLOCK_RAIL=mcp-upstream).

Tool per rail method (the argument names are razorpay-mcp-server's):

    fetch_payment                        {payment_id}
    fetch_refund                         {refund_id}
    create_refund                        {payment_id, amount, speed?, notes, receipt}
    fetch_multiple_refunds_for_payment   {payment_id, count, skip}
    create_instant_settlement            {amount | settle_full_balance, description?, notes}
    fetch_all_instant_settlements        {count, skip}
    fetch_balance                        {}   (the sandbox front only, like GET /v1/balance)

The upstream tool has no idempotency header: `create_refund` carries our stamp in `receipt` and
`notes.interlock_sik` only, and the idempotency key a REST call would send is dropped (docs/proxy.md).

Classification gives the same `RailError` kinds as the REST client:
* an `isError` result whose body is a Razorpay error (`{"error": {"code", ...}}`) with a definitive
  4xx (or, when no status is given, code BAD_REQUEST_ERROR) → REJECTED;
* any other `isError` result, an unreadable result, the deadline passing or the session dropping after
  the request was handed to the upstream session → AMBIGUOUS;
* nothing handed over — no session within the deadline, or the deadline or the caller's send window
  (rails.deadline.send_window) passed first → NOT_SENT.

Each call, opening the upstream session included, has one total deadline, INTERLOCK_RAIL_TIMEOUT_MS
(rails.mcp_session says how it is enforced and how close to the byte the send window is checked).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, TypeVar

from mcp_types import CallToolResult, TextContent, Tool
from pydantic import ValidationError

from interlock.config import Settings
from interlock.errors import ConfigError, InvalidInput
from rails.checks import MAX_PAGE, entity_id, page_args
from rails.checks import amount as amount_arg
from rails.mcp_session import UpstreamAmbiguous, UpstreamNotSent, UpstreamSession, UpstreamTarget
from rails.models import Balance, Page, Payment, RailEntity, Refund, Settlement
from rails.razorpay import RailError, RailErrorKind

logger = logging.getLogger(__name__)

E = TypeVar("E", bound=RailEntity)
BAD_REQUEST = "BAD_REQUEST_ERROR"

FETCH_PAYMENT = "fetch_payment"
FETCH_REFUND = "fetch_refund"
CREATE_REFUND = "create_refund"
LIST_REFUNDS = "fetch_multiple_refunds_for_payment"
CREATE_SETTLEMENT = "create_instant_settlement"
LIST_SETTLEMENTS = "fetch_all_instant_settlements"
FETCH_BALANCE = "fetch_balance"


class McpUpstreamRail:
    def __init__(self, session: UpstreamSession) -> None:
        self.session = session

    @classmethod
    def from_settings(cls, settings: Settings) -> McpUpstreamRail:
        """Rail from INTERLOCK_UPSTREAM_COMMAND or _URL (exactly one) and INTERLOCK_RAIL_TIMEOUT_MS."""
        if settings.upstream_command is None and settings.upstream_url is None:
            raise ConfigError(
                "INTERLOCK_RAIL=mcp-upstream needs INTERLOCK_UPSTREAM_URL (streamable HTTP) or "
                "INTERLOCK_UPSTREAM_COMMAND (stdio)",
                variable="INTERLOCK_UPSTREAM_URL",
            )
        target = UpstreamTarget(command=settings.upstream_command, url=settings.upstream_url)
        return cls(UpstreamSession(target, timeout_s=settings.rail_timeout_ms / 1000))

    def close(self) -> None:
        self.session.close()

    def list_tools(self) -> list[Tool]:
        """The upstream's manifest as it is served now (for G6); an unreachable upstream is a RailError."""
        try:
            return self.session.list_tools()
        except UpstreamNotSent as exc:
            raise RailError(RailErrorKind.NOT_SENT, str(exc), method="MCP", path="tools/list") from exc
        except UpstreamAmbiguous as exc:
            raise RailError(RailErrorKind.AMBIGUOUS, str(exc), method="MCP", path="tools/list") from exc

    def call_raw(self, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        """The upstream's own result for a pass-through read (the proxy's read path), unparsed."""
        try:
            return self.session.call_tool(tool, arguments)
        except UpstreamNotSent as exc:
            raise RailError(RailErrorKind.NOT_SENT, str(exc), method="MCP", path=tool) from exc
        except UpstreamAmbiguous as exc:
            raise RailError(RailErrorKind.AMBIGUOUS, str(exc), method="MCP", path=tool) from exc

    # -- payments and refunds ------------------------------------------------------------------

    def fetch_payment(self, payment_id: str) -> Payment:
        body = self._call(FETCH_PAYMENT, {"payment_id": entity_id(payment_id, "payment_id")})
        return _parse(Payment, body, FETCH_PAYMENT)

    def fetch_refund(self, refund_id: str) -> Refund:
        return _parse(Refund, self._call(FETCH_REFUND, {"refund_id": entity_id(refund_id, "refund_id")}), FETCH_REFUND)

    def create_refund(
        self,
        payment_id: str,
        amount: int | None,
        *,
        speed: str | None = None,
        notes: Mapping[str, Any] | None,
        receipt: str | None,
        idempotency_key: str | None,
    ) -> Refund:
        """create_refund with exactly the stamps passed. *idempotency_key* has no place in the MCP tool and
        is not sent: the receipt (unique per payment on Razorpay) and notes carry the identity instead."""
        args: dict[str, Any] = {"payment_id": entity_id(payment_id, "payment_id")}
        if amount is not None:
            args["amount"] = amount_arg(amount)
        if speed is not None:
            args["speed"] = speed
        if notes:
            args["notes"] = dict(notes)
        if receipt is not None:
            args["receipt"] = receipt
        return _parse(Refund, self._call(CREATE_REFUND, args), CREATE_REFUND)

    def list_refunds_for_payment(self, payment_id: str, *, count: int = MAX_PAGE, skip: int = 0) -> Page[Refund]:
        """One page, newest first; page on with skip until `page.exhausted` (SPEC §9)."""
        args = {"payment_id": entity_id(payment_id, "payment_id"), **page_args(count, skip)}
        return _page(Refund, self._call(LIST_REFUNDS, args), count, skip, LIST_REFUNDS)

    # -- instant settlements and balance -------------------------------------------------------

    def create_instant_settlement(
        self,
        amount: int | None = None,
        *,
        settle_full_balance: bool = False,
        description: str | None = None,
        notes: Mapping[str, Any] | None,
    ) -> Settlement:
        if (amount is None) == (not settle_full_balance):
            raise InvalidInput("pass exactly one of amount or settle_full_balance=True", field="amount")
        args: dict[str, Any] = {"settle_full_balance": True} if settle_full_balance else {"amount": amount_arg(amount)}
        if description is not None:
            args["description"] = description
        if notes:
            args["notes"] = dict(notes)
        return _parse(Settlement, self._call(CREATE_SETTLEMENT, args), CREATE_SETTLEMENT)

    def list_instant_settlements(self, *, count: int = 10, skip: int = 0) -> Page[Settlement]:
        return _page(Settlement, self._call(LIST_SETTLEMENTS, page_args(count, skip)), count, skip, LIST_SETTLEMENTS)

    def fetch_balance(self) -> Balance:
        return _parse(Balance, self._call(FETCH_BALANCE, {}), FETCH_BALANCE)

    # -- transport and classification ----------------------------------------------------------

    def _call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return classify_result(self.call_raw(tool, arguments), tool)


def classify_result(result: CallToolResult, tool: str) -> dict[str, Any]:
    """The entity body of a successful result, or the RailError its error result means."""
    text = result_text(result)
    body = result.structured_content if isinstance(result.structured_content, dict) else _json_object(text)
    if not result.is_error:
        if body is None:
            raise RailError(RailErrorKind.AMBIGUOUS, "unreadable result", method="MCP", path=tool, body=text[:2000])
        return body
    error = body.get("error") if body is not None else None
    status = body.get("http_status") if body is not None else None
    fields: dict[str, Any] = {"method": "MCP", "path": tool, "body": text[:2000]}
    fields["http_status"] = status if isinstance(status, int) and not isinstance(status, bool) else None
    if isinstance(error, dict):
        fields.update(code=error.get("code"), description=error.get("description"), field=error.get("field"))
    if _definitive(error, fields["http_status"]):
        raise RailError(RailErrorKind.REJECTED, f"{fields['http_status'] or ''} {fields['description']}", **fields)
    # An error result we cannot read as the rail's own refusal (a 5xx, a gateway page, the upstream's own
    # failure text) may hide an applied call.
    raise RailError(RailErrorKind.AMBIGUOUS, " ".join(text.split())[:200] or "error result", **fields)


def _definitive(error: Any, status: int | None) -> bool:
    if not isinstance(error, dict) or not error.get("code"):
        return False
    if status is None:
        return error.get("code") == BAD_REQUEST
    # Same rule as REST: 408 and 409 ("still processing") are not the rail's decision.
    return 400 <= status < 500 and status not in (408, 409)


def result_text(result: CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _parse(model: type[E], body: dict[str, Any], tool: str) -> E:
    try:
        result: E = model.from_raw(body)
    except ValidationError as exc:
        # A result we cannot read may still have moved money: ambiguous, never "failed".
        raise RailError(RailErrorKind.AMBIGUOUS, f"result is not a {model.__name__}: {exc.errors()[:1]}",
                        method="MCP", path=tool, body=str(body)[:2000]) from exc  # fmt: skip
    return result


def _page(model: type[E], body: dict[str, Any], count: int, skip: int, tool: str) -> Page[E]:
    items = body.get("items")
    if not isinstance(items, list):
        raise RailError(RailErrorKind.AMBIGUOUS, "collection without items", method="MCP", path=tool)
    parsed = [_parse(model, item, tool) for item in items]
    return Page[model](items=parsed, requested_count=count, skip=skip, raw=body)  # type: ignore[valid-type]
