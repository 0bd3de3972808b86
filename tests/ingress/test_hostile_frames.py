"""ingress.frames: what is refused before the MCP SDK parses a message (issue 17's fuzzer found each)."""

from __future__ import annotations

import json

import mcp_types as types

from ingress.frames import MAX_MESSAGE_BYTES, refusal

CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "create_refund", "arguments": {"payment_id": "pay_X", "amount": 100}}}  # fmt: skip


def test_a_valid_request_goes_on_to_the_sdk() -> None:
    assert refusal(json.dumps(CALL), full=True) is None
    assert refusal(b'{"jsonrpc":"2.0","method":"notifications/initialized"}', full=True) is None


def test_two_amounts_are_refused_naming_the_key_not_resolved_last_wins() -> None:
    text = json.dumps(CALL).replace('"amount": 100', '"amount": 100, "amount": 500000')
    for full in (True, False):
        error = refusal(text, full=full)
        assert error is not None and error.error.code == types.INVALID_REQUEST
        assert "'amount'" in error.error.message and error.id == 7


def test_an_id_of_the_wrong_type_is_refused_not_taken_for_a_notification() -> None:
    for ident in ("true", "1.5", "[1]", '{"a": 1}'):
        text = json.dumps(CALL).replace('"id": 7', f'"id": {ident}')
        error = refusal(text, full=False)
        assert error is not None and error.error.code == types.INVALID_REQUEST and error.id is None, ident


def test_on_stdio_what_the_sdk_would_drop_unanswered_gets_a_json_rpc_error() -> None:
    assert refusal(b'{"jsonrpc": "2.0", "id": 1, "meth', full=True).error.code == types.PARSE_ERROR  # type: ignore[union-attr]
    assert refusal(b"[" * 100_000 + b"]" * 100_000, full=True).error.code == types.PARSE_ERROR  # type: ignore[union-attr]
    batch = refusal(json.dumps([CALL]), full=True)
    assert batch is not None and batch.error.code == types.INVALID_REQUEST
    wrong = refusal(json.dumps({**CALL, "jsonrpc": "1.0"}), full=True)
    assert wrong is not None and wrong.error.code == types.INVALID_REQUEST and wrong.id == 7
    assert refusal(json.dumps([CALL]), full=False) is None, "over HTTP the SDK answers these itself"


def test_a_message_over_the_limit_is_refused_unparsed() -> None:
    error = refusal(b"x" * (MAX_MESSAGE_BYTES + 1), full=False)
    assert error is not None and str(MAX_MESSAGE_BYTES) in error.error.message
