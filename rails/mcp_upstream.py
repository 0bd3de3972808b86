"""The rail as an upstream MCP server exposing Razorpay MCP tool names (INTERLOCK_RAIL=mcp-upstream).

Which tool answers each rail method is a `rails.upstream_tools.ToolMap` (by default razorpay-mcp-server's
own names; the balance tool is optional: razorpay-mcp-server has none). The upstream tool has no
idempotency header: `create_refund` carries our stamp in `receipt` and `notes.interlock_sik` only, and
the idempotency key a REST call would send is dropped (docs/proxy.md).

Classification gives the same `RailError` kinds as the REST client. Two ways of reporting a failure
are read, told apart by the result itself:
* the sandbox front's own profile: an `isError` result whose text is JSON — a Razorpay error body
  (`{"error": {"code", ...}}`) with a definitive 4xx (or, when no status is given, code
  BAD_REQUEST_ERROR) → REJECTED; any other JSON (a 5xx, a gateway page, a transport error) → AMBIGUOUS;
* razorpay-mcp-server's: plain text. "Validation errors: ..." (the server's own check of the arguments,
  before any rail call) → REJECTED; "<action> failed: <reason>", where the razorpay-go SDK has kept only
  the rail error's description (no status, no code), → REJECTED only when the reason is one of Razorpay's
  refusals of the request itself (`_refusal`); an empty reason (a non-JSON error page), a transport
  failure ('Post "...": context deadline exceeded ...'), a server or gateway error, "still being
  processed", or anything not recognised → AMBIGUOUS. Wrongly ambiguous is slow; wrongly rejected could
  pay twice — so only recognised refusals are definitive.
Also AMBIGUOUS: an unreadable result, the deadline passing or the session dropping after the request was
handed to the upstream session. NOT_SENT: nothing handed over — no session within the deadline, or the
deadline or the caller's send window (rails.deadline.send_window) passed first.

Each call, opening the upstream session included, has one total deadline, INTERLOCK_RAIL_TIMEOUT_MS
(rails.mcp_session says how it is enforced and how close to the byte the send window is checked).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any, TypeVar

from mcp_types import CallToolResult, TextContent, Tool
from pydantic import ValidationError

from interlock.config import Settings
from interlock.errors import ConfigError, InvalidInput
from rails.checks import MAX_PAGE, entity_id, page_args
from rails.checks import amount as amount_arg
from rails.mcp_session import UpstreamAmbiguous, UpstreamNotSent, UpstreamSession, UpstreamTarget
from rails.models import Balance, BankingBalance, FundAccount, Page, Payment, Payout, RailEntity, Refund, Settlement
from rails.razorpay import ID_NOT_FOUND, RailError, RailErrorKind
from rails.upstream_tools import ToolMap

logger = logging.getLogger(__name__)

E = TypeVar("E", bound=RailEntity)
BAD_REQUEST = "BAD_REQUEST_ERROR"

# The default map's names (rails.upstream_tools), for callers that look for a tool in the manifest.
FETCH_BALANCE = "fetch_balance"


class McpUpstreamRail:
    def __init__(self, session: UpstreamSession, *, tools: ToolMap | None = None) -> None:
        self.session = session
        self.tools = tools or ToolMap()

    @classmethod
    def from_settings(cls, settings: Settings) -> McpUpstreamRail:
        """Rail from INTERLOCK_UPSTREAM_COMMAND or _URL (exactly one), INTERLOCK_RAIL_TIMEOUT_MS and the tool map
        (INTERLOCK_UPSTREAM_TOOLS: docs/proxy.md)."""
        if settings.upstream_command is None and settings.upstream_url is None:
            raise ConfigError(
                "INTERLOCK_RAIL=mcp-upstream needs INTERLOCK_UPSTREAM_URL (streamable HTTP) or "
                "INTERLOCK_UPSTREAM_COMMAND (stdio)",
                variable="INTERLOCK_UPSTREAM_URL",
            )
        target = UpstreamTarget(command=settings.upstream_command, url=settings.upstream_url)
        tools = ToolMap.parse(settings.upstream_tools)
        return cls(UpstreamSession(target, timeout_s=settings.rail_timeout_ms / 1000), tools=tools)

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
        tool = self.tools.fetch_payment
        return _parse(Payment, self._call(tool, {"payment_id": entity_id(payment_id, "payment_id")}), tool)

    def fetch_refund(self, refund_id: str) -> Refund:
        tool = self.tools.fetch_refund
        return _parse(Refund, self._call(tool, {"refund_id": entity_id(refund_id, "refund_id")}), tool)

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
        return _parse(Refund, self._call(self.tools.create_refund, args), self.tools.create_refund)

    def list_refunds_for_payment(self, payment_id: str, *, count: int = MAX_PAGE, skip: int = 0) -> Page[Refund]:
        """One page, newest first; page on with skip until `page.exhausted` (SPEC §9)."""
        args = {"payment_id": entity_id(payment_id, "payment_id"), **page_args(count, skip)}
        return _page(Refund, self._call(self.tools.list_refunds, args), count, skip, self.tools.list_refunds)

    # -- instant settlements and balance -------------------------------------------------------

    def create_instant_settlement(
        self,
        amount: int | None = None,
        *,
        settle_full_balance: bool = False,
        description: str | None = None,
        notes: Mapping[str, Any] | None,
    ) -> Settlement:
        """Interlock's rail worker always sends the amount G2 resolved. razorpay-mcp-server requires `amount` even
        with settle_full_balance, so a settle_full_balance call here is refused by it (REJECTED, nothing sent)."""
        if (amount is None) == (not settle_full_balance):
            raise InvalidInput("pass exactly one of amount or settle_full_balance=True", field="amount")
        args: dict[str, Any] = {"settle_full_balance": True} if settle_full_balance else {"amount": amount_arg(amount)}
        if description is not None:
            args["description"] = description
        if notes:
            args["notes"] = dict(notes)
        return _parse(Settlement, self._call(self.tools.create_settlement, args), self.tools.create_settlement)

    def list_instant_settlements(self, *, count: int = 10, skip: int = 0) -> Page[Settlement]:
        tool = self.tools.list_settlements
        return _page(Settlement, self._call(tool, page_args(count, skip)), count, skip, tool)

    def fetch_instant_settlement(self, settlement_id: str) -> Settlement:
        tool = self.tools.fetch_settlement
        args = {"settlement_id": entity_id(settlement_id, "settlement_id")}
        return _parse(Settlement, self._call(tool, args), tool)

    def fetch_balance(self) -> Balance:
        tool = self.tools.fetch_balance
        if tool is None:
            # Said the way a rail without the endpoint says it (404), so G2 refuses for good, not as an outage.
            missing = "the upstream has no balance tool"
            raise RailError(RailErrorKind.REJECTED, missing, method="MCP", path="fetch_balance", http_status=404,
                            description=missing)  # fmt: skip
        return _parse(Balance, self._call(tool, {}), tool)

    # -- RazorpayX payouts: razorpay-mcp-server has no tool that makes one (SPEC §18) --------------

    def fetch_fund_account(self, fund_account_id: str) -> FundAccount:
        raise _no_payouts("fetch_fund_account")

    def fetch_banking_balance(self, account_number: str) -> BankingBalance:
        raise _no_payouts("fetch_banking_balance")

    def list_payouts(self, account_number: str, *, reference_id: str | None = None, status: str | None = None,
                     count: int = MAX_PAGE, skip: int = 0) -> Page[Payout]:  # fmt: skip
        raise _no_payouts("list_payouts")

    def fetch_payout(self, payout_id: str) -> Payout:
        raise _no_payouts("fetch_payout")

    def create_payout(self, **request: Any) -> Payout:
        # Never reached: G2 refuses every payout in proxy mode (G2_PAYOUTS_UNSUPPORTED); refused here all the same.
        raise _no_payouts("create_payout")

    def cancel_payout(self, payout_id: str) -> Payout:
        raise _no_payouts("cancel_payout")

    # -- transport and classification ----------------------------------------------------------

    def _call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return classify_result(self.call_raw(tool, arguments), tool)


NO_PAYOUTS = "payouts are made only on the REST rail (INTERLOCK_RAIL=razorpay-rest): the upstream has no payout tool"


def _no_payouts(what: str) -> RailError:
    # Said the way a rail without the endpoint says it (404), so a gate refuses for good, not as an outage.
    return RailError(RailErrorKind.REJECTED, NO_PAYOUTS, method="MCP", path=what, http_status=404,
                     description=NO_PAYOUTS)  # fmt: skip


def classify_result(result: CallToolResult, tool: str) -> dict[str, Any]:
    """The entity body of a successful result, or the RailError its error result means."""
    if result.is_error:
        raise error_of(result, tool)
    text = result_text(result)
    body = result.structured_content if isinstance(result.structured_content, dict) else _json_object(text)
    if body is None:
        raise RailError(RailErrorKind.AMBIGUOUS, "unreadable result", method="MCP", path=tool, body=text[:2000])
    return body


def error_of(result: CallToolResult, tool: str) -> RailError:
    """What an `isError` result of *tool* says about the money: REJECTED only when it is a refusal we recognise."""
    text = result_text(result)
    body = result.structured_content if isinstance(result.structured_content, dict) else _json_object(text)
    if body is None:
        return _text_error(text, tool)
    error = body.get("error")
    status = body.get("http_status")
    fields: dict[str, Any] = {"method": "MCP", "path": tool, "body": text[:2000]}
    fields["http_status"] = status if isinstance(status, int) and not isinstance(status, bool) else None
    if isinstance(error, dict):
        fields.update(code=error.get("code"), description=error.get("description"), field=error.get("field"))
    if _definitive(error, fields["http_status"]):
        return RailError(RailErrorKind.REJECTED, f"{fields['http_status'] or ''} {fields['description']}", **fields)
    # An error result we cannot read as the rail's own refusal (a 5xx, a gateway page, the upstream's own
    # failure text) may hide an applied call.
    return RailError(RailErrorKind.AMBIGUOUS, " ".join(text.split())[:200] or "error result", **fields)


# razorpay-mcp-server's failure text: "<action> failed: <reason>" (pkg/razorpay/*.go, fmt.Sprintf).
_FAILED = re.compile(r"(?P<action>[a-z][a-z ]*? failed): (?P<reason>.*)", re.DOTALL)
# Its own check of the arguments (pkg/razorpay/tools_params.go): nothing was sent to the rail.
_VALIDATION = re.compile(r"(Validation errors:|missing required parameter:|invalid parameter type:)")
_PARAM = re.compile(r"(?:missing required parameter|invalid parameter type): (\w+)")
# Razorpay's answers that say nothing was decided: only the SDK's "description" survives, so these are
# recognised by their words. Checked before the refusals below.
_UNDECIDED = re.compile(
    r'^[A-Z][a-z]+ "|deadline|time ?out|timed out|\bEOF\b|connection|reset by peer|broken pipe|being processed|'
    r"in progress|try again|temporar|unavailable|gateway|server|resource does not exist|invalid character|"
    r"cannot unmarshal", re.IGNORECASE)  # fmt: skip
# Razorpay's refusals of the request itself (4xx BAD_REQUEST_ERROR descriptions): the rail decided, nothing moved.
_EXACT_REFUSALS = (ID_NOT_FOUND.lower(), "the requested url was not found on the server")
_REFUSAL = re.compile(
    r"\bgreater than\b|\bexceeds?\b|\bfully refunded\b|\b(must|should) (be|not)\b|\bat ?least\b|\bminimum\b|"
    r"\bis (invalid|not valid|required)\b|\bnot required and should not be sent\b|\bhas already been\b|"
    r"\balready (been )?used\b|\binsufficient\b|\bnot enough\b|\bnot (been )?captured\b|\bapi key\b|"
    r"\bauthentication failed\b", re.IGNORECASE)  # fmt: skip


def _text_error(text: str, tool: str) -> RailError:
    """The RailError of a plain-text error result (razorpay-mcp-server's way), definitive only when recognised."""
    text = text.strip()
    fields: dict[str, Any] = {"method": "MCP", "path": tool, "body": text[:2000]}
    if _VALIDATION.match(text):
        param = _PARAM.search(text)
        return RailError(RailErrorKind.REJECTED, " ".join(text.split()), description=" ".join(text.split()),
                         field=param.group(1) if param else None, **fields)  # fmt: skip
    failed = _FAILED.fullmatch(text)
    reason = failed.group("reason").strip() if failed else ""
    if failed and _refusal(reason):
        # The id case keeps Razorpay's exact words: RailError.not_found (G2_PAYMENT_NOT_FOUND) reads them.
        described = ID_NOT_FOUND if reason.rstrip(".").lower() == ID_NOT_FOUND.lower() else reason
        return RailError(RailErrorKind.REJECTED, text, description=described, **fields)
    # Not a refusal we recognise (an empty reason is a non-JSON error page): it may hide an applied call.
    return RailError(RailErrorKind.AMBIGUOUS, " ".join(text.split())[:200] or "error result",
                     description=reason or None, **fields)  # fmt: skip


def _refusal(reason: str) -> bool:
    plain = reason.rstrip(".").lower()
    if plain in _EXACT_REFUSALS:
        return True
    return bool(reason) and not _UNDECIDED.search(reason) and bool(_REFUSAL.search(reason))


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
