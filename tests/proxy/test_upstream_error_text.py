"""razorpay-mcp-server reports a failure as plain text in which the razorpay-go SDK kept only the rail's
error description: a refusal Interlock recognises is definitive (FAILED_TERMINAL), anything else — a
transport failure, a gateway page, a server error, "still being processed", a text we do not know — may
hide an applied call and is ambiguous (UNKNOWN, reconciled by stamp)."""

from __future__ import annotations

import pytest
from mcp_types import CallToolResult, TextContent

from interlock.errors import ConfigError
from rails.base import RailError, RailErrorKind
from rails.mcp_upstream import classify_result
from rails.upstream_tools import ToolMap

REJECTED, AMBIGUOUS = RailErrorKind.REJECTED, RailErrorKind.AMBIGUOUS


def error_result(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(text=text)], is_error=True)


def classified(text: str, tool: str = "create_refund") -> RailError:
    with pytest.raises(RailError) as caught:
        classify_result(error_result(text), tool)
    return caught.value


@pytest.mark.parametrize(
    "text",
    [
        "creating refund failed: The requested refund amount is greater than the refundable amount",
        "creating refund failed: The refund amount provided is greater than amount captured",
        "creating refund failed: The payment has been fully refunded already",
        "creating refund failed: The amount must be at least INR 1.00",
        "creating refund failed: The selected speed is invalid.",
        "creating refund failed: instant is/are not required and should not be sent",
        "creating instant settlement failed: The settlement amount is greater than the available balance",
        "creating refund failed: The api key provided is invalid",
        "Validation errors:\n- missing required parameter: amount",
        "Validation errors:\n- invalid parameter type: payment_id\n- invalid parameter type: amount",
    ],
)
def test_a_refusal_of_the_request_itself_is_definitive(text: str) -> None:
    assert classified(text).kind is REJECTED


@pytest.mark.parametrize(
    "text",
    [
        # A gateway's HTML 504 or a 5xx without Razorpay's JSON: the SDK finds no description.
        "creating refund failed: ",
        # The same, as later releases word it (formatErrorMessage): not an unknown id.
        "creating refund failed: resource does not exist",
        'creating refund failed: Post "https://api.razorpay.com/v1/payments/pay_1/refund": context deadline exceeded '
        "(Client.Timeout exceeded while awaiting headers)",
        'creating refund failed: Post "https://api.razorpay.com/v1/payments/pay_1/refund": EOF',
        "creating refund failed: read tcp 10.0.0.2:53514->10.0.0.9:443: read: connection reset by peer",
        "creating refund failed: A request with this idempotency key is still being processed",
        "creating refund failed: We are facing some trouble completing your request at the moment. Please try again "
        "shortly.",
        "creating refund failed: The server encountered an error. The incident has been reported to admins.",
        "creating refund failed: Payment processing failed due to error at bank or wallet gateway",
        "creating refund failed: invalid character '<' looking for beginning of value",
        "no client found in context",
        "something else entirely",
        "",
    ],
)
def test_anything_that_may_hide_an_applied_call_is_ambiguous(text: str) -> None:
    assert classified(text).kind is AMBIGUOUS


def test_an_unknown_id_is_not_found_and_a_validation_error_names_its_field() -> None:
    missing = classified("fetching payment failed: The id provided does not exist", "fetch_payment")
    assert missing.kind is REJECTED and missing.not_found
    invalid = classified("Validation errors:\n- invalid parameter type: amount")
    assert invalid.field == "amount" and invalid.code is None and invalid.http_status is None


def test_a_reused_receipt_keeps_the_words_the_rail_worker_reads_as_we_were_here() -> None:
    reused = classified("creating refund failed: The receipt has already been used for a refund of this payment")
    assert reused.kind is REJECTED and "receipt" in (reused.description or "")


def test_the_sandbox_fronts_json_errors_are_read_as_before() -> None:
    rejected = classified('{"http_status": 400, "error": {"code": "BAD_REQUEST_ERROR", "description": "nope"}}')
    gateway = classified('{"http_status": 504, "body": "<html>Gateway Timeout</html>"}')
    assert (rejected.kind, rejected.http_status, gateway.kind) == (REJECTED, 400, AMBIGUOUS)


def test_the_tool_map_is_razorpay_mcp_servers_names_and_renames_only_the_adapters_own_reads() -> None:
    default = ToolMap.parse(None)
    assert (default.create_refund, default.list_refunds, default.list_settlements, default.fetch_balance) == (
        "create_refund", "fetch_multiple_refunds_for_payment", "fetch_all_instant_settlements", "fetch_balance")
    renamed = ToolMap.parse('{"fetch_balance": null, "list_refunds": "list_payment_refunds"}')
    assert (renamed.fetch_balance, renamed.list_refunds) == (None, "list_payment_refunds")
    for bad in ('{"create_refund": "refund_payment"}', '{"fetch_balances": "x"}', '{"list_refunds": ""}', "[]", "{"):
        with pytest.raises(ConfigError, match="INTERLOCK_UPSTREAM_TOOLS"):
            ToolMap.parse(bad)
