"""The official Razorpay Python SDK (`razorpay` on PyPI) against a real sandbox process.

Every SDK call for payments, refunds and instant settlements that the sandbox serves is driven through
the SDK's own `base_url` option, on its success and error paths; the SDK raises BadRequestError with
Razorpay's description, which is what an integrator's code sees against api.razorpay.com.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import razorpay
from razorpay.errors import BadRequestError, ServerError

from sandbox.payments import default_details
from sandbox.testing import SandboxProcess, start_sandbox, wait_for

_ids = itertools.count(1)

ID_NOT_FOUND = "The id provided does not exist"
# The payment entity's fields as Razorpay's payments API reference lists them (card payments add `card`).
PAYMENT_FIELDS = {
    "id", "entity", "amount", "currency", "status", "order_id", "invoice_id", "international", "method",
    "amount_refunded", "refund_status", "captured", "description", "card_id", "bank", "wallet", "vpa", "email",
    "contact", "customer_id", "notes", "fee", "tax", "error_code", "error_description", "error_source", "error_step",
    "error_reason", "acquirer_data", "created_at",
}  # fmt: skip
REFUND_FIELDS = {
    "id", "entity", "amount", "currency", "payment_id", "notes", "receipt", "acquirer_data", "created_at", "batch_id",
    "status", "speed_processed", "speed_requested",
}  # fmt: skip


@pytest.fixture(scope="module")
def rail(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    """A sandbox process of this module's own, so its lists hold only what these tests made (and the demo seed)."""
    with start_sandbox(tmp_path_factory.mktemp("sdk-sandbox")) as process:
        yield process


@pytest.fixture(scope="module")
def client(rail: SandboxProcess) -> razorpay.Client:
    # base_url is the SDK's own option and, as with api.razorpay.com, the origin: the SDK appends /v1/...
    return razorpay.Client(auth=(rail.key_id, rail.key_secret), base_url=rail.url)


def new_payment(rail: SandboxProcess, amount: int = 100_000, **extra: Any) -> str:
    payment_id = f"pay_SDK{os.getpid()}x{next(_ids)}"
    rail.add_payment(payment_id, amount, **extra)
    return payment_id


def raises_bad_request(call: Any, *args: Any, **kwargs: Any) -> str:
    """Run an SDK call that must fail; return the description the SDK raised BadRequestError with."""
    with pytest.raises(BadRequestError) as caught:
        call(*args, **kwargs)
    return str(caught.value)


def ids(collection: dict[str, Any]) -> list[str]:
    assert collection["entity"] == "collection" and collection["count"] == len(collection["items"])
    return [item["id"] for item in collection["items"]]


# -- payments ------------------------------------------------------------------------------------


def test_payment_fetch_serves_razorpay_fields_with_seeded_order_and_customer(rail: SandboxProcess, client):
    payment_id = new_payment(rail, 100_000, order_id="order_SDKORDER0001", customer_id="cust_SDKCUST00001")
    payment = client.payment.fetch(payment_id)
    assert PAYMENT_FIELDS <= set(payment) and "card" in payment
    assert (payment["order_id"], payment["customer_id"]) == ("order_SDKORDER0001", "cust_SDKCUST00001")
    assert (payment["amount"], payment["currency"], payment["status"], payment["captured"]) == (
        100_000, "INR", "captured", True,
    )  # fmt: skip
    # 2% gateway fee plus 18% GST on it; `fee` includes the GST, `tax` is the GST.
    assert (payment["fee"], payment["tax"]) == (2360, 360)
    assert payment["method"] == "card" and payment["card_id"] == payment["card"]["id"]
    assert (payment["refund_status"], payment["amount_refunded"], payment["notes"]) == (None, 0, [])
    assert payment["error_code"] is None and payment["international"] is False


def test_payment_details_default_to_values_derived_from_the_id(rail: SandboxProcess, client):
    payment_id = new_payment(rail, 5_000, method="upi")
    payment = client.payment.fetch(payment_id)
    expected = default_details(payment_id)
    assert (payment["order_id"], payment["customer_id"]) == (expected["order_id"], expected["customer_id"])
    assert payment["order_id"].startswith("order_") and len(payment["order_id"]) == len("order_") + 14
    assert payment["customer_id"].startswith("cust_") and len(payment["customer_id"]) == len("cust_") + 14
    assert payment["method"] == "upi" and payment["upi"]["vpa"] == payment["vpa"] and payment["card_id"] is None
    # The demo seed's payments carry the same derived order and customer on every start.
    demo = client.payment.fetch("pay_DEMO0001")
    assert demo["order_id"] == default_details("pay_DEMO0001")["order_id"]


def test_a_seeded_payment_with_a_malformed_order_id_is_refused(rail: SandboxProcess):
    response = httpx.post(
        rail.url + "/__sandbox/payments", auth=(rail.key_id, rail.key_secret),
        json={"id": "pay_BADORDER", "amount": 100, "order_id": "ord-1"},
    )  # fmt: skip
    assert response.status_code == 400 and "order_id" in response.json()["error"]["description"]


def test_payment_edit_replaces_the_notes_and_nothing_else(rail: SandboxProcess, client):
    payment_id = new_payment(rail, 20_000, notes={"order": "A-1"})
    edited = client.payment.edit(payment_id, {"notes": {"key1": "value1"}})
    assert edited["notes"] == {"key1": "value1"} and edited["amount"] == 20_000
    assert client.payment.fetch(payment_id)["notes"] == {"key1": "value1"}
    assert raises_bad_request(client.payment.edit, payment_id, {"notes": {}}) == "The notes field is required."
    assert "amount is/are not required" in raises_bad_request(
        client.payment.edit, payment_id, {"notes": {"a": "b"}, "amount": 1}
    )
    assert client.payment.fetch(payment_id)["notes"] == {"key1": "value1"}


# -- refunds -------------------------------------------------------------------------------------


def test_payment_refund_and_both_refund_fetches(rail: SandboxProcess, client):
    payment_id = new_payment(rail, 10_000)
    fast = client.payment.refund(
        payment_id, {"amount": 2500, "speed": "optimum", "notes": {"why": "damaged"}, "receipt": "rcpt-1"}
    )
    assert REFUND_FIELDS <= set(fast)
    assert (fast["amount"], fast["payment_id"], fast["status"]) == (2500, payment_id, "processed")
    assert (fast["speed_requested"], fast["speed_processed"]) == ("optimum", "instant")
    assert (fast["notes"], fast["receipt"]) == ({"why": "damaged"}, "rcpt-1")
    assert client.payment.fetch_refund_id(payment_id, fast["id"]) == fast
    assert client.refund.fetch(fast["id"]) == fast
    plain = client.payment.refund(payment_id, {"amount": 500})
    assert (plain["speed_requested"], plain["speed_processed"], plain["notes"]) == ("normal", "normal", [])
    payment = client.payment.fetch(payment_id)
    assert (payment["amount_refunded"], payment["refund_status"], payment["status"]) == (3000, "partial", "captured")
    listed = client.payment.fetch_multiple_refund(payment_id)
    assert ids(listed) == [plain["id"], fast["id"]]


def test_a_refund_fetched_under_another_payment_does_not_exist(rail: SandboxProcess, client):
    mine, other = new_payment(rail, 1_000), new_payment(rail, 1_000)
    refund = client.payment.refund(mine, {"amount": 100})
    assert raises_bad_request(client.payment.fetch_refund_id, other, refund["id"]) == ID_NOT_FOUND


def test_refund_create_posts_the_payment_id_in_the_body(rail: SandboxProcess, client):
    payment_id = new_payment(rail, 8_000)
    refund = client.refund.create({"payment_id": payment_id, "amount": 1000, "notes": {"via": "v1/refunds"}})
    assert (refund["payment_id"], refund["amount"], refund["notes"]) == (payment_id, 1000, {"via": "v1/refunds"})
    assert client.payment.fetch(payment_id)["amount_refunded"] == 1000
    journaled = [e for e in rail.entities("refund") if e["id"] == refund["id"]]
    assert journaled[0]["request"]["body"]["payment_id"] == payment_id
    assert raises_bad_request(client.refund.create, {"amount": 1000}) == "The payment id field is required."
    assert raises_bad_request(client.refund.create, {"payment_id": "pay_NOSUCHPAYMENT"}) == ID_NOT_FOUND


def test_one_idempotency_key_is_one_refund_whichever_create_route_the_sdk_uses(rail: SandboxProcess, client):
    payment_id = new_payment(rail, 8_000)
    headers = {"X-Refund-Idempotency": f"sdk-key-{os.getpid()}-{next(_ids)}"}
    first = client.refund.create({"payment_id": payment_id, "amount": 700}, headers=dict(headers))
    again = client.payment.refund(payment_id, {"amount": 700}, headers=dict(headers))
    assert again == first
    assert client.payment.fetch(payment_id)["amount_refunded"] == 700
    assert "different request body" in raises_bad_request(
        client.payment.refund, payment_id, {"amount": 701}, headers=dict(headers)
    )


def test_refund_edit_replaces_the_notes_and_the_journal_follows(rail: SandboxProcess, client):
    payment_id = new_payment(rail, 3_000)
    refund = client.payment.refund(payment_id, {"amount": 300, "notes": {"interlock_sik": "SDKEDIT1"}})
    assert rail.count_stamped("SDKEDIT1") == 1
    edited = client.refund.edit(refund["id"], {"notes": {"ticket": "T-9"}})
    assert edited == {**refund, "notes": {"ticket": "T-9"}}
    assert client.refund.fetch(refund["id"]) == edited
    assert rail.count_stamped("SDKEDIT1") == 0
    events = [e for e in rail.journal()["events"] if e["kind"] == "entity_notes_updated"]
    assert {"id": refund["id"], "was": {"interlock_sik": "SDKEDIT1"}, "now": {"ticket": "T-9"}} in [
        e["detail"] for e in events
    ]
    assert raises_bad_request(client.refund.edit, refund["id"], {}) == "The notes field is required."
    assert "receipt is/are not required" in raises_bad_request(
        client.refund.edit, refund["id"], {"notes": {"a": "b"}, "receipt": "x"}
    )


def test_over_refunds_and_invalid_amounts_raise_bad_request_and_move_nothing(rail: SandboxProcess, client):
    payment_id = new_payment(rail, 5_000)
    refused = {
        "The refund amount provided is greater than amount captured": {"amount": 5_001},
        "The amount must be at least INR 1.00": {"amount": 0},
        "The amount must be an integer.": {"amount": 10.5},
    }
    for description, body in refused.items():
        assert raises_bad_request(client.payment.refund, payment_id, body) == description
    # Stricter than Razorpay's docs, whose SDK examples send "100": amounts are JSON integers (SPEC §4).
    assert raises_bad_request(client.payment.refund, payment_id, {"amount": "100"}) == "The amount must be an integer."
    assert raises_bad_request(client.payment.refund, payment_id, {"amount": 100, "speed": "fast"}) == (
        "The selected speed is invalid."
    )
    assert client.payment.fetch(payment_id)["amount_refunded"] == 0
    assert client.payment.fetch_multiple_refund(payment_id)["count"] == 0
    client.payment.refund(payment_id, {})
    assert raises_bad_request(client.payment.refund, payment_id, {"amount": 1}) == (
        "The payment has been fully refunded already"
    )


# -- instant settlements -------------------------------------------------------------------------


def test_instant_settlement_create_fetch_and_expanded_payouts(rail: SandboxProcess, client):
    rail.set_balance(1_000_000)
    # The SDK's documented example body: settle_full_balance as 0, which Razorpay reads as false.
    created = client.settlement.create_ondemand_settlement(
        {"amount": 100_000, "settle_full_balance": 0, "description": "Testing", "notes": {"k": "v"}}
    )
    assert created["entity"] == "settlement.ondemand" and created["settle_full_balance"] is False
    assert (created["amount_requested"], created["fees"], created["tax"], created["amount_settled"]) == (
        100_000, 354, 54, 99_646,
    )  # fmt: skip
    assert client.settlement.fetch_ondemand_settlement_id(created["id"]) == created
    expanded = client.settlement.fetch_ondemand_settlement_id(created["id"], {"expand[]": "ondemand_payouts"})
    payouts = expanded.pop("ondemand_payouts")
    assert expanded == created and payouts["count"] == 1
    payout = payouts["items"][0]
    assert payout["entity"] == "settlement.ondemand_payout" and payout["id"].startswith("setlodp_")
    assert (payout["amount"], payout["amount_settled"], payout["fees"], payout["tax"]) == (100_000, 99_646, 354, 54)
    listed = client.settlement.fetch_all_ondemand_settlement({"count": 1, "expand[]": "ondemand_payouts"})
    assert listed["items"][0]["ondemand_payouts"]["items"] == [payout]
    full = client.settlement.create_ondemand_settlement({"settle_full_balance": True, "amount": 1})
    assert full["amount_requested"] == 900_000 and full["settle_full_balance"] is True


def test_instant_settlement_errors_raise_bad_request(rail: SandboxProcess, client):
    rail.set_balance(10_000)
    create = client.settlement.create_ondemand_settlement
    assert raises_bad_request(create, {"amount": 199}) == "The amount must be at least 200."
    assert raises_bad_request(create, {"amount": 10_001}) == (
        "The settlement amount is greater than the available balance"
    )
    assert raises_bad_request(create, {"amount": 1000, "receipt": "r"}) == (
        "receipt is/are not required and should not be sent"
    )
    assert raises_bad_request(create, {"settle_full_balance": 2}) == "settle_full_balance must be a boolean"
    assert raises_bad_request(client.settlement.fetch_ondemand_settlement_id, "setlod_NOSUCHSETTLEM") == ID_NOT_FOUND
    assert raises_bad_request(
        client.settlement.fetch_ondemand_settlement_id, "setlod_NOSUCHSETTLEM", {"expand[]": "payments"}
    ) == ("The selected expand is invalid.")
    assert httpx.get(rail.url + "/v1/balance", auth=(rail.key_id, rail.key_secret)).json()["balance"] == 10_000


# -- lists: from / to / count / skip ---------------------------------------------------------------


@dataclass(frozen=True)
class TwoSeconds:
    """Entities made in one second (early) and in a later one (late), on every list the sandbox serves."""

    payment: str
    early: dict[str, str]
    late: dict[str, str]
    early_from: int
    early_until: int
    late_from: int
    late_until: int


@pytest.fixture(scope="module")
def two_seconds(rail: SandboxProcess, client) -> TwoSeconds:
    rail.set_balance(10_000_000)

    def make(payment: str | None) -> tuple[dict[str, str], int, int]:
        payment = payment or new_payment(rail, 50_000)
        refund = client.payment.refund(payment, {"amount": 1000})
        settlement = client.settlement.create_ondemand_settlement({"amount": 10_000})
        made = {"payment": payment, "refund": refund["id"], "settlement": settlement["id"]}
        stamps = [client.payment.fetch(payment)["created_at"], refund["created_at"], settlement["created_at"]]
        return made, min(stamps), max(stamps)

    early, early_from, early_until = make(None)
    # Poll (no fixed sleep) until the clock has left the early entities' last second.
    wait_for(lambda: int(time.time()) > early_until, timeout=5)
    late, late_from, late_until = make(None)
    on_early = client.payment.refund(early["payment"], {"amount": 1000})  # a late refund on the early payment
    return TwoSeconds(
        early["payment"], early, late, early_from, early_until, late_from, max(late_until, on_early["created_at"])
    )


def test_every_list_honours_from_and_to(client, two_seconds: TwoSeconds):
    t = two_seconds
    lists = {
        "payment": lambda q: client.payment.all(q),
        "refund": lambda q: client.refund.all(q),
        "settlement": lambda q: client.settlement.fetch_all_ondemand_settlement(q),
    }
    for kind, fetch in lists.items():
        late_only = ids(fetch({"from": t.late_from, "count": 100}))
        early_only = ids(fetch({"to": t.early_until, "count": 100}))
        assert t.late[kind] in late_only and t.early[kind] not in late_only, kind
        assert t.early[kind] in early_only and t.late[kind] not in early_only, kind
        both = ids(fetch({"from": t.early_from, "to": t.late_until, "count": 100}))
        assert {t.early[kind], t.late[kind]} <= set(both), kind
    on_payment = client.payment.fetch_multiple_refund(t.payment, {"from": t.late_from})
    assert len(ids(on_payment)) == 1 and ids(on_payment) != [t.early["refund"]]
    assert ids(client.payment.fetch_multiple_refund(t.payment, {"to": t.early_until})) == [t.early["refund"]]


def test_every_list_pages_newest_first_with_count_and_skip(client, two_seconds: TwoSeconds):
    t = two_seconds
    newest_two = ids(client.settlement.fetch_all_ondemand_settlement({"count": 2}))
    assert newest_two[0] == t.late["settlement"]
    assert ids(client.settlement.fetch_all_ondemand_settlement({"count": 1, "skip": 1})) == newest_two[1:]
    refunds = ids(client.refund.all({"count": 3}))
    assert len(refunds) == 3 and ids(client.refund.all({"count": 2, "skip": 1})) == refunds[1:]
    payments = ids(client.payment.all({"from": t.early_from, "count": 100}))
    assert payments.index(t.late["payment"]) < payments.index(t.early["payment"])
    assert ids(client.payment.all({"count": 1})) == payments[:1]


def test_list_parameters_out_of_range_or_unknown_raise_bad_request(client, two_seconds: TwoSeconds):
    assert raises_bad_request(client.refund.all, {"count": 101}) == "The count may not be greater than 100."
    assert raises_bad_request(client.payment.all, {"from": 1}) == "from must be between 946684800 and 4765046400"
    assert raises_bad_request(client.settlement.fetch_all_ondemand_settlement, {"to": "yesterday"}) == (
        "The to must be an integer."
    )
    # A filter the sandbox does not know is refused, never silently ignored.
    assert raises_bad_request(client.payment.fetch_multiple_refund, two_seconds.payment, {"status": "x"}) == (
        "status is/are not required and should not be sent"
    )


# -- errors the SDK surfaces -----------------------------------------------------------------------


def test_unknown_ids_raise_bad_request_with_razorpays_description(rail: SandboxProcess, client):
    calls = [
        (client.payment.fetch, ("pay_NOSUCHPAYMENT",)),
        (client.payment.edit, ("pay_NOSUCHPAYMENT", {"notes": {"a": "b"}})),
        (client.payment.refund, ("pay_NOSUCHPAYMENT", {"amount": 100})),
        (client.payment.fetch_multiple_refund, ("pay_NOSUCHPAYMENT",)),
        (client.payment.fetch_refund_id, ("pay_NOSUCHPAYMENT", "rfnd_NOSUCHREFUND00")),
        (client.refund.fetch, ("rfnd_NOSUCHREFUND00",)),
        (client.refund.edit, ("rfnd_NOSUCHREFUND00", {"notes": {"a": "b"}})),
        (client.settlement.fetch_ondemand_settlement_id, ("setlod_NOSUCHSETTLEM",)),
    ]
    for call, args in calls:
        assert raises_bad_request(call, *args) == ID_NOT_FOUND, call
    raw = httpx.get(rail.url + "/v1/payments/pay_NOSUCHPAYMENT", auth=(rail.key_id, rail.key_secret))
    assert raw.status_code == 400 and raw.json() == {
        "error": {
            "code": "BAD_REQUEST_ERROR", "description": ID_NOT_FOUND, "source": "business",
            "step": "payment_initiation", "reason": "input_validation_failed", "metadata": {},
        }
    }  # fmt: skip


def test_bad_credentials_raise_bad_request_with_na_source_step_and_reason(rail: SandboxProcess):
    wrong = razorpay.Client(auth=(rail.key_id, "not-the-secret"), base_url=rail.url)
    assert raises_bad_request(wrong.payment.fetch, "pay_DEMO0001") == "The api key provided is invalid"
    assert raises_bad_request(wrong.refund.all) == "The api key provided is invalid"
    raw = httpx.get(rail.url + "/v1/refunds", auth=("rzp_test_someone_else", rail.key_secret))
    assert raw.status_code == 401 and raw.json() == {
        "error": {
            "code": "BAD_REQUEST_ERROR", "description": "The api key provided is invalid", "source": "NA",
            "step": "NA", "reason": "NA", "metadata": {},
        }
    }  # fmt: skip


def test_calls_the_sandbox_does_not_serve_answer_url_not_found(rail: SandboxProcess, client):
    payment_id = new_payment(rail, 1_000)
    not_served = "The requested URL was not found on the server."
    assert raises_bad_request(client.payment.capture, payment_id, 1_000, {}) == not_served
    assert raises_bad_request(client.settlement.all) == not_served
    raw = httpx.put(rail.url + f"/v1/payments/{payment_id}", auth=(rail.key_id, rail.key_secret), json={})
    assert raw.status_code == 400 and raw.json()["error"] == {
        "code": "BAD_REQUEST_ERROR", "description": not_served, "source": "NA", "step": "NA", "reason": "NA",
        "metadata": {},
    }  # fmt: skip


def test_an_ambiguous_504_reaches_the_sdk_as_server_error_though_the_refund_landed(rail: SandboxProcess, client):
    payment_id = new_payment(rail, 2_000)
    rail.set_faults([{"name": "ambiguous_504", "rate": 1.0, "params": {"html": 0}}])
    try:
        with pytest.raises(ServerError):
            client.payment.refund(payment_id, {"amount": 400, "notes": {"interlock_sik": "SDK504"}})
    finally:
        rail.clear_faults()
    assert rail.count_stamped("SDK504") == 1
    assert client.payment.fetch(payment_id)["amount_refunded"] == 400


# -- RazorpayX ------------------------------------------------------------------------------------------


def test_fund_account_fetch_serves_the_fund_account_and_unknown_ids_raise_bad_request(rail: SandboxProcess, client):
    """The SDK (2.x) has no payouts, contacts or banking balances; of RazorpayX it has only `fund_account`, whose
    `fetch` the sandbox serves (its `all` and `create` are not: fund accounts are made on the control surface)."""
    made = rail.add_fund_account("fa_SDKFUNDACCT001", contact={"name": "SDK Payee", "type": "vendor"})
    assert client.fund_account.fetch("fa_SDKFUNDACCT001", {}) == made
    assert raises_bad_request(client.fund_account.fetch, "fa_DOESNOTEXIST01", {}) == ID_NOT_FOUND
    assert not hasattr(client, "payout") and not hasattr(client, "contact")
