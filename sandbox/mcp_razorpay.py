"""The front's razorpay-mcp-server profile: the real server's contract over the sandbox rail.

How the real server answers (public repository razorpay/razorpay-mcp-server, Go):
* Arguments are checked by its fluent Validator (pkg/razorpay/tools_params.go): every problem is collected
  and the call is answered with one `isError` text, "Validation errors:\\n- missing required parameter: X"
  or "- invalid parameter type: X" (a JSON round trip into the Go type: a string for a number, 100.5 for
  an int64 ...). The input schema itself is not enforced (mcp-go does not validate it). create_refund
  reads amount as a float64 and sends int(amount): 100.7 becomes 100 (Interlock refuses floats first).
* A result is the rail's JSON as one text block, compact with sorted keys (json.Marshal of the
  razorpay-go SDK's map); no structured content.
* A failure is `isError` text "<action> failed: <reason>" (e.g. "creating refund failed: ..."). The
  razorpay-go SDK (requests/request.go, errors/rzperrors.go) keeps only the rail error's `description`:
  the HTTP status and error code are lost, a non-JSON error page gives an empty reason ("creating
  refund failed: "), and a transport failure gives Go's own text ('Post "<url>": context deadline
  exceeded (Client.Timeout exceeded while awaiting headers)'). The SDK's HTTP timeout is 10 s.
* An unknown tool is a JSON-RPC error -32602 "tool 'X' not found: tool not found" (mcp-go).

The tool definitions are sandbox.mcp_razorpay_tools. There is no balance tool: razorpay-mcp-server has none.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult

from sandbox.mcp_razorpay_tools import TOOLS
from sandbox.mcp_tools import RestCall, RestReply, text_result

_BAD = object()


def _as(value: Any, kind: str) -> Any:
    """*value* as Go's json.Unmarshal would read it into *kind*, or _BAD."""
    if kind == "string":
        return value if isinstance(value, str) else _BAD
    if kind == "bool":
        return value if isinstance(value, bool) else _BAD
    if kind == "map":
        return value if isinstance(value, dict) else _BAD
    if kind == "strings":
        return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else _BAD
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _BAD
    if kind == "float":
        return value
    # int64: 100.0 marshals as 100 and is accepted; 100.5 (or 1e21, written 1e+21) is not.
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 1e21 else _BAD
    return value


_EMPTY: dict[str, Any] = {"string": "", "map": {}, "int": 0, "float": 0}


class Validator:
    """razorpay-mcp-server's Validator: each check adds the argument to *out* or records why it cannot."""

    def __init__(self, args: dict[str, Any]) -> None:
        self.args = args
        self.errors: list[str] = []

    def required(self, out: dict[str, Any], name: str, kind: str) -> Validator:
        value = self.args.get(name)
        if value is None:
            self.errors.append(f"missing required parameter: {name}")
        elif (converted := _as(value, kind)) is _BAD:
            self.errors.append(f"invalid parameter type: {name}")
        else:
            out[name] = converted
        return self

    def optional(self, out: dict[str, Any], name: str, kind: str, *, key: str | None = None) -> Validator:
        value = self.args.get(name)
        if value is None:
            return self
        converted = _as(value, kind)
        if converted is _BAD:
            self.errors.append(f"invalid parameter type: {name}")
        elif kind == "bool" or converted != _EMPTY.get(kind, _BAD):  # an empty value is left out, a bool never
            out[key or name] = converted
        return self

    def pagination(self, out: dict[str, Any]) -> Validator:
        return self.optional(out, "count", "int").optional(out, "skip", "int")

    def refusal(self) -> CallToolResult | None:
        if not self.errors:
            return None
        return text_result("Validation errors:\n- " + "\n- ".join(self.errors), is_error=True)


def _path(value: str) -> str:
    # The SDK formats ids into the path as they are; quoted here so a bad id reaches the rail as a bad id.
    return quote(value, safe="")


# A tool: the failure prefix of its answers, and the checks that give the REST call to make once they pass.
Plan = tuple[str, Callable[[Validator], Callable[[], RestCall]]]


def _fetch_payment(v: Validator) -> Callable[[], RestCall]:
    p: dict[str, Any] = {}
    v.required(p, "payment_id", "string")
    return lambda: RestCall("GET", f"/v1/payments/{_path(p['payment_id'])}")


def _create_refund(v: Validator) -> Callable[[], RestCall]:
    p: dict[str, Any] = {}
    data: dict[str, Any] = {}
    v.required(p, "payment_id", "string").required(p, "amount", "float")
    v.optional(data, "speed", "string").optional(data, "receipt", "string").optional(data, "notes", "map")
    return lambda: RestCall(
        "POST", f"/v1/payments/{_path(p['payment_id'])}/refund", json={**data, "amount": int(p["amount"])})


def _fetch_refund(v: Validator) -> Callable[[], RestCall]:
    p: dict[str, Any] = {}
    v.required(p, "refund_id", "string")
    return lambda: RestCall("GET", f"/v1/refunds/{_path(p['refund_id'])}")


def _update_refund(v: Validator) -> Callable[[], RestCall]:
    p: dict[str, Any] = {}
    data: dict[str, Any] = {}
    v.required(p, "refund_id", "string").required(data, "notes", "map")
    return lambda: RestCall("PATCH", f"/v1/refunds/{_path(p['refund_id'])}", json=data)


def _refunds_for_payment(v: Validator) -> Callable[[], RestCall]:
    p: dict[str, Any] = {}
    query: dict[str, Any] = {}
    v.required(p, "payment_id", "string").optional(query, "from", "int").optional(query, "to", "int").pagination(query)
    return lambda: RestCall(
        "GET", f"/v1/payments/{_path(p['payment_id'])}/refunds", params=query)


def _refund_for_payment(v: Validator) -> Callable[[], RestCall]:
    p: dict[str, Any] = {}
    v.required(p, "payment_id", "string").required(p, "refund_id", "string")
    return lambda: RestCall(
        "GET", f"/v1/payments/{_path(p['payment_id'])}/refunds/{_path(p['refund_id'])}")


def _all_refunds(v: Validator) -> Callable[[], RestCall]:
    query: dict[str, Any] = {}
    v.optional(query, "from", "int").optional(query, "to", "int").pagination(query)
    return lambda: RestCall("GET", "/v1/refunds", params=query)


def _create_settlement(v: Validator) -> Callable[[], RestCall]:
    body: dict[str, Any] = {}
    v.required(body, "amount", "int").optional(body, "settle_full_balance", "bool")
    v.optional(body, "description", "string").optional(body, "notes", "map")
    return lambda: RestCall("POST", "/v1/settlements/ondemand", json=body)


def _all_settlements(v: Validator) -> Callable[[], RestCall]:
    query: dict[str, Any] = {}
    expand: dict[str, Any] = {}
    v.pagination(query).optional(expand, "expand", "strings").optional(query, "from", "int")
    v.optional(query, "to", "int")
    if expand.get("expand"):
        query["expand[]"] = expand["expand"][-1]  # the SDK keeps the last value only
    return lambda: RestCall("GET", "/v1/settlements/ondemand", params=query)


def _settlement(v: Validator) -> Callable[[], RestCall]:
    p: dict[str, Any] = {}
    v.required(p, "settlement_id", "string")
    return lambda: RestCall(
        "GET", f"/v1/settlements/ondemand/{_path(p['settlement_id'])}")


PLANS: dict[str, Plan] = {
    "fetch_payment": ("fetching payment failed", _fetch_payment),
    "create_refund": ("creating refund failed", _create_refund),
    "fetch_refund": ("fetching refund failed", _fetch_refund),
    "update_refund": ("updating refund failed", _update_refund),
    "fetch_multiple_refunds_for_payment": ("fetching multiple refunds failed", _refunds_for_payment),
    "fetch_specific_refund_for_payment": ("fetching specific refund for payment failed", _refund_for_payment),
    "fetch_all_refunds": ("fetching refunds failed", _all_refunds),
    "create_instant_settlement": ("creating instant settlement failed", _create_settlement),
    "fetch_all_instant_settlements": ("fetching instant settlements failed", _all_settlements),
    "fetch_instant_settlement_with_id": ("fetching instant settlement failed", _settlement),
}
assert set(PLANS) == set(TOOLS)


def go_json(value: Any) -> str:
    """json.Marshal of a decoded map: compact, keys sorted, <, > and & escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def go_transport_error(call: RestCall, exc: Exception | None) -> str:
    """What Go's net/http says when the request got no response, as a url.Error: 'Post "<url>": <reason>'."""
    url = str(exc.request.url) if isinstance(exc, httpx.RequestError) else call.path
    if isinstance(exc, httpx.TimeoutException):
        reason = "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
    elif isinstance(exc, httpx.ConnectError):
        reason = f"dial tcp {httpx.URL(url).host}:{httpx.URL(url).port}: connect: connection refused"
    elif isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        reason = "EOF"
    else:
        reason = str(exc) or type(exc).__name__
    return f'{call.method.capitalize()} "{url}": {reason}'


def _entity_or_reason(text: str) -> tuple[Any, str | None]:
    """The SDK's processResponse: an empty (or two-byte) body is {}, anything else must be a JSON object."""
    if len(text.encode()) in (0, 2):
        return {}, None
    try:
        value = json.loads(text)
    except ValueError:
        first = text.strip()[:1] or " "
        return None, f"invalid character {first!r} looking for beginning of value"
    if not isinstance(value, dict):
        kind = {list: "array", str: "string", bool: "bool"}.get(type(value), "number")
        return None, f"json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"
    return value, None


class RazorpayMcpServerProfile:
    name = "razorpay-mcp-server"
    server_name = "razorpay-mcp-server"
    rail_timeout_s = 10.0  # razorpay-go's client timeout

    def tools(self) -> list[dict[str, Any]]:
        return [tool.to_mcp() for tool in TOOLS.values()]

    def request(self, name: str, arguments: dict[str, Any]) -> RestCall | CallToolResult:
        plan = PLANS.get(name)
        if plan is None:
            raise MCPError(INVALID_PARAMS, f"tool '{name}' not found: tool not found")
        validator = Validator(arguments)
        build = plan[1](validator)
        refusal = validator.refusal()
        return refusal if refusal is not None else build()

    def answer(self, name: str, call: RestCall, reply: RestReply) -> CallToolResult:
        prefix = PLANS[name][0]
        if reply.status is None:
            return text_result(f"{prefix}: {go_transport_error(call, reply.error)}", is_error=True)
        if 200 <= reply.status < 300:
            entity, reason = _entity_or_reason(reply.text)
            if reason is not None:
                return text_result(f"{prefix}: {reason}", is_error=True)
            return text_result(go_json(entity), is_error=False)
        # Only the description survives the SDK; a body that is not Razorpay's error JSON leaves it empty.
        body = reply.json_body()
        error = body.get("error") if isinstance(body, dict) else None
        description = error.get("description") if isinstance(error, dict) else None
        return text_result(f"{prefix}: {description if isinstance(description, str) else ''}", is_error=True)
