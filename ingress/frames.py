"""Refusing a JSON-RPC message before the MCP SDK parses it (issue 17: hostile input).

Two things the SDK's parser lets through or drops silently:

* a duplicate object key anywhere — `{"amount": 100, "amount": 500000}` — is resolved last-wins, so the
  value a log, a reviewer or another parser reads may not be the one that is paid. Such a message is
  ambiguous, and refused whole, with the key named;
* a request whose id is not a string or an integer (`true`, `1.5`, `[1]`) is taken by the SDK for a
  notification and never answered: it is refused as an invalid request;
* on stdio, a line that is not a valid JSON-RPC message (truncated, a batch, a wrong `jsonrpc`, an id of
  the wrong type, nesting too deep for the parser) gets no answer at all, so the client waits forever.
  JSON-RPC 2.0 §5.1 answers it: -32700 for text that is not JSON, -32600 for JSON that is not a request.

A message over MAX_MESSAGE_BYTES is refused without being parsed: tool arguments are limited to 64 KiB
(SPEC §10), so a valid message is far smaller, and the ingress's memory stays bounded.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from pydantic import ValidationError

MAX_MESSAGE_BYTES = 1024 * 1024


class DuplicateKey(ValueError):
    """Raised when a JSON object names the same key twice."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKey(key)
        seen[key] = value
    return seen


def refusal(data: bytes | str, *, full: bool) -> types.JSONRPCError | None:
    """The error answering *data*, or None when it may go on to the SDK.

    *full*: also refuse what the SDK's own parser would refuse (stdio, where the SDK drops it unanswered);
    over HTTP the SDK answers those itself, so only size and duplicate keys are checked there.
    """
    size = len(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
    if size > MAX_MESSAGE_BYTES:
        return _error(None, types.INVALID_REQUEST, f"message is {size} bytes; the limit is {MAX_MESSAGE_BYTES}")
    try:
        message = json.loads(data, object_pairs_hook=_no_duplicates)
    except DuplicateKey as exc:
        return _error(_lenient_id(data), types.INVALID_REQUEST,
                      f"duplicate key {exc.key[:64]!r} in the message: which value is meant is ambiguous")  # fmt: skip
    except (ValueError, RecursionError) as exc:
        if not full:
            return None
        return _error(None, types.PARSE_ERROR, f"Parse error: not a JSON text ({type(exc).__name__})")
    if isinstance(message, dict) and "id" in message and not _usable_id(message["id"]):
        # The SDK would take it for a notification and never answer (JSON-RPC §4: a string, a number or null).
        return _error(None, types.INVALID_REQUEST, "Invalid Request: the id must be a string or an integer")
    if not full:
        return None
    try:
        types.jsonrpc_message_adapter.validate_json(data, by_name=False)
    except (ValidationError, ValueError, RecursionError):
        return _error(_lenient_id(data), types.INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message")
    return None


def _usable_id(ident: Any) -> bool:
    return ident is None or isinstance(ident, str) or (isinstance(ident, int) and not isinstance(ident, bool))


def _lenient_id(data: bytes | str) -> int | str | None:
    """The request's id if it is a usable one (an int or a string, given once), else None (JSON-RPC §5)."""
    try:
        message = json.loads(data, object_pairs_hook=lambda pairs: (pairs, dict(pairs)))
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, tuple):
        return None
    pairs, fields = message
    ident = fields.get("id")
    if sum(1 for key, _ in pairs if key == "id") != 1 or isinstance(ident, bool):
        return None
    return ident if isinstance(ident, int | str) else None


def _error(ident: int | str | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=ident, error=types.ErrorData(code=code, message=message))
