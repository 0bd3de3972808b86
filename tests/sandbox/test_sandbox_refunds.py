"""The refund side of the sandbox: payment and refund entities, validation, idempotency header, paging."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

import httpx
import pytest

from sandbox.testing import SandboxProcess, wait_for

ERROR_KEYS = {"code", "description", "source", "step", "reason", "metadata"}


def refund(http: httpx.Client, payment_id: str, body: dict[str, object], key: str | None = None) -> httpx.Response:
    headers = {"X-Refund-Idempotency": key} if key else {}
    return http.post(f"/v1/payments/{payment_id}/refund", json=body, headers=headers)


def refunds_on(sandbox: SandboxProcess, payment_id: str) -> list[dict[str, object]]:
    return [e for e in sandbox.entities("refund") if e["payment_id"] == payment_id]


def assert_bad_request(response: httpx.Response, field: str | None = None) -> dict[str, object]:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert ERROR_KEYS <= set(error)
    assert error["code"] == "BAD_REQUEST_ERROR"
    if field is not None:
        assert error["field"] == field
    return error


def test_payment_entity_has_razorpay_shape_and_empty_notes_as_list(http: httpx.Client, new_payment: Callable[..., str]):
    payment_id = new_payment(50_000)
    body = http.get(f"/v1/payments/{payment_id}").json()
    assert {k: body[k] for k in ("id", "entity", "amount", "currency", "status", "amount_refunded")} == {
        "id": payment_id, "entity": "payment", "amount": 50_000, "currency": "INR", "status": "captured",
        "amount_refunded": 0,
    }  # fmt: skip
    assert (body["refund_status"], body["captured"], body["notes"]) == (None, True, [])
    assert isinstance(body["created_at"], int)


def test_payment_status_follows_refunds_partial_then_full(http: httpx.Client, new_payment: Callable[..., str]):
    payment_id = new_payment(10_000)
    assert refund(http, payment_id, {"amount": 4000}).status_code == 200
    partial = http.get(f"/v1/payments/{payment_id}").json()
    assert (partial["status"], partial["refund_status"], partial["amount_refunded"]) == ("captured", "partial", 4000)
    assert refund(http, payment_id, {}).json()["amount"] == 6000  # no amount: the full remaining amount
    full = http.get(f"/v1/payments/{payment_id}").json()
    assert (full["status"], full["refund_status"], full["amount_refunded"]) == ("refunded", "full", 10_000)


def test_unknown_ids_answer_400_not_404(http: httpx.Client):
    for response in (
        http.get("/v1/payments/pay_NOSUCHTHING"),
        refund(http, "pay_NOSUCHTHING", {"amount": 100}),
        http.get("/v1/payments/pay_NOSUCHTHING/refunds"),
        http.get("/v1/refunds/rfnd_NOSUCHTHING000"),
        http.get("/v1/settlements/ondemand/setlod_NOSUCHTHING00"),
    ):
        assert assert_bad_request(response)["description"] == "The id provided does not exist"


@pytest.mark.parametrize("auth", [None, ("rzp_test_interlock", "wrong"), ("someone_else", "interlock_sandbox_secret")])
def test_v1_requires_basic_auth(sandbox: SandboxProcess, auth: tuple[str, str] | None):
    response = httpx.get(sandbox.url + "/v1/payments/pay_DEMO0001", auth=auth)
    assert response.status_code == 401
    assert ERROR_KEYS <= set(response.json()["error"])
    assert httpx.get(sandbox.url + "/__sandbox/journal", auth=auth).status_code == 401


def test_refund_entity_shape_with_default_and_requested_speed(http: httpx.Client, new_payment: Callable[..., str]):
    payment_id = new_payment(10_000)
    plain = refund(http, payment_id, {"amount": 100, "notes": {"interlock_sik": "S"}, "receipt": "ilk_S"}).json()
    assert re.fullmatch(r"rfnd_[A-Za-z0-9]{14}", plain["id"])
    assert plain["entity"] == "refund" and plain["status"] == "processed"
    assert (plain["amount"], plain["currency"], plain["payment_id"]) == (100, "INR", payment_id)
    assert (plain["notes"], plain["receipt"]) == ({"interlock_sik": "S"}, "ilk_S")
    assert plain["batch_id"] is None and plain["acquirer_data"] == {"arn": None}
    # Razorpay shows both speed fields on every refund; without `speed` in the request both are "normal".
    assert (plain["speed_requested"], plain["speed_processed"]) == ("normal", "normal")
    fast = refund(http, payment_id, {"amount": 100, "speed": "optimum"}).json()
    assert fast["speed_requested"] == "optimum" and fast["speed_processed"] in ("instant", "normal")
    assert fast["notes"] == [] and fast["receipt"] is None


def test_over_refund_is_refused_and_moves_nothing(sandbox: SandboxProcess, http: httpx.Client, new_payment):
    payment_id = new_payment(10_000)
    assert_bad_request(refund(http, payment_id, {"amount": 10_001}), "amount")
    assert refund(http, payment_id, {"amount": 10_000}).status_code == 200
    assert_bad_request(refund(http, payment_id, {"amount": 1}))
    assert len(refunds_on(sandbox, payment_id)) == 1


@pytest.mark.parametrize("amount", [100.0, 99.5, "100", True, 0, -5, None, [100]])
def test_amount_must_be_a_positive_integer(sandbox: SandboxProcess, http: httpx.Client, new_payment, amount: object):
    payment_id = new_payment()
    assert_bad_request(refund(http, payment_id, {"amount": amount}), "amount")
    assert refunds_on(sandbox, payment_id) == []


@pytest.mark.parametrize(
    "body, field",
    [
        ({"amount": 100, "currency": "INR"}, "currency"),
        ({"amount": 100, "notes": {f"k{i}": "v" for i in range(16)}}, "notes"),
        ({"amount": 100, "notes": {"k": "v" * 257}}, "notes"),
        ({"amount": 100, "notes": {"k" * 257: "v"}}, "notes"),
        ({"amount": 100, "notes": "text"}, "notes"),
        ({"amount": 100, "speed": "warp"}, "speed"),
        ({"amount": 100, "receipt": "r" * 41}, "receipt"),
    ],
)
def test_refund_body_is_checked_strictly(http: httpx.Client, new_payment, body: dict[str, object], field: str):
    assert_bad_request(refund(http, new_payment(), body), field)


def test_notes_at_the_limits_are_accepted(http: httpx.Client, new_payment):
    notes = {f"k{i:0>254}": "v" * 256 for i in range(15)}
    assert refund(http, new_payment(), {"amount": 100, "notes": notes}).json()["notes"] == notes


def test_receipt_cannot_be_reused_on_the_same_payment(http: httpx.Client, new_payment):
    first, second = new_payment(), new_payment()
    assert refund(http, first, {"amount": 100, "receipt": "ilk_R1"}).status_code == 200
    assert_bad_request(refund(http, first, {"amount": 100, "receipt": "ilk_R1"}), "receipt")
    assert refund(http, second, {"amount": 100, "receipt": "ilk_R1"}).status_code == 200


def test_same_idempotency_key_and_body_returns_the_original_refund(sandbox: SandboxProcess, http, new_payment, new_sik):
    payment_id, sik = new_payment(10_000), new_sik()
    body = {"amount": 2500, "notes": {"interlock_sik": sik}, "receipt": "ilk_" + sik}
    first = refund(http, payment_id, body, key="ilk_" + sik)
    again = refund(http, payment_id, body, key="ilk_" + sik)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert sandbox.count_stamped(sik) == 1
    assert http.get(f"/v1/payments/{payment_id}").json()["amount_refunded"] == 2500


def test_same_idempotency_key_with_a_different_body_is_refused(sandbox: SandboxProcess, http, new_payment, new_sik):
    payment_id, sik = new_payment(10_000), new_sik()
    assert refund(http, payment_id, {"amount": 100, "notes": {"interlock_sik": sik}}, key="ilk_" + sik).is_success
    assert_bad_request(refund(http, payment_id, {"amount": 101, "notes": {"interlock_sik": sik}}, key="ilk_" + sik))
    assert_bad_request(refund(http, new_payment(), {"amount": 100, "notes": {"interlock_sik": sik}}, key="ilk_" + sik))
    assert sandbox.count_stamped(sik) == 1


@pytest.mark.parametrize("key", ["short_key", "has space 12345", "semi;colon12345", "ünïcødé_keys_x"])
def test_malformed_idempotency_key_is_refused(sandbox: SandboxProcess, new_payment, key: str):
    # Raw bytes: httpx would refuse to encode some of these header values itself.
    payment_id = new_payment()
    response = httpx.post(
        f"{sandbox.url}/v1/payments/{payment_id}/refund", auth=(sandbox.key_id, sandbox.key_secret),
        json={"amount": 100}, headers={"X-Refund-Idempotency": key.encode()},
    )  # fmt: skip
    assert_bad_request(response, "X-Refund-Idempotency")


def test_key_still_in_progress_answers_409(sandbox: SandboxProcess, http: httpx.Client, new_payment, new_sik):
    payment_id, sik = new_payment(10_000), new_sik()
    body, key = {"amount": 700, "notes": {"interlock_sik": sik}}, "ilk_" + sik
    first: dict[str, httpx.Response] = {}
    worker = threading.Thread(target=lambda: first.update(r=refund(http, payment_id, body, key=key)))
    try:
        with sandbox.slow_held():  # the first request is held until the second has been answered
            worker.start()
            # The slow request holds the key from arrival; a second one must see "still processing".
            wait_for(lambda: key in sandbox.health()["in_progress"], timeout=60)
            second = refund(http, payment_id, body, key=key)
            assert second.status_code == 409
            assert second.json()["error"]["code"] == "BAD_REQUEST_ERROR"
    finally:
        worker.join(60)
    assert first["r"].status_code == 200
    assert sandbox.count_stamped(sik) == 1
    assert refund(http, payment_id, body, key=key).json()["id"] == first["r"].json()["id"]


def test_refund_lists_are_newest_first_with_offset_paging(http: httpx.Client, new_payment):
    payment_id = new_payment(100_000)
    made = [refund(http, payment_id, {"amount": 100 + i}).json()["id"] for i in range(12)]
    newest_first = list(reversed(made))
    default = http.get(f"/v1/payments/{payment_id}/refunds").json()
    assert default["entity"] == "collection" and default["count"] == 10
    assert [r["id"] for r in default["items"]] == newest_first[:10]
    pages = [http.get(f"/v1/payments/{payment_id}/refunds", params={"count": 5, "skip": s}).json() for s in (0, 5, 10)]
    assert [p["count"] for p in pages] == [5, 5, 2]
    assert [r["id"] for p in pages for r in p["items"]] == newest_first
    everyone = http.get("/v1/refunds", params={"count": 100}).json()["items"]
    assert [r["id"] for r in everyone if r["payment_id"] == payment_id] == newest_first
    assert http.get(f"/v1/refunds/{made[3]}").json()["amount"] == 103


@pytest.mark.parametrize("params", [{"count": 101}, {"count": 0}, {"count": "ten"}, {"skip": -1}, {"count": 1.5}])
def test_list_paging_params_are_checked(http: httpx.Client, new_payment, params: dict[str, object]):
    assert_bad_request(http.get(f"/v1/payments/{new_payment()}/refunds", params=params))
    assert_bad_request(http.get("/v1/refunds", params=params))


def test_refund_list_filters_by_created_at(http: httpx.Client, new_payment):
    payment_id = new_payment()
    created = refund(http, payment_id, {"amount": 100}).json()["created_at"]
    listed = http.get(f"/v1/payments/{payment_id}/refunds", params={"from": created, "to": created}).json()
    assert listed["count"] == 1
    assert http.get(f"/v1/payments/{payment_id}/refunds", params={"from": created + 1}).json()["count"] == 0
    assert http.get(f"/v1/payments/{payment_id}/refunds", params={"to": created - 1}).json()["count"] == 0


def test_journal_records_the_request_but_never_the_credentials(sandbox: SandboxProcess, http, new_payment, new_sik):
    payment_id, sik = new_payment(), new_sik()
    body = {"amount": 300, "notes": {"interlock_sik": sik}, "receipt": "ilk_" + sik}
    refund(http, payment_id, body, key="ilk_" + sik)
    [entry] = refunds_on(sandbox, payment_id)
    assert entry["request"]["body"] == body
    assert entry["request"]["headers"]["x-refund-idempotency"] == "ilk_" + sik
    assert "authorization" not in entry["request"]["headers"]
    assert entry["idempotency_key"] == "ilk_" + sik and entry["stamp_sik"] == sik and entry["origin"] == "api"
    assert sandbox.count_stamped(sik) == 1
