"""Instant settlements: fees including tax, balance drawdown, strict bodies, lists."""

from __future__ import annotations

import re

import httpx
import pytest

from sandbox.settlements import settlement_fees
from sandbox.testing import SandboxProcess


def settle(http: httpx.Client, body: dict[str, object]) -> httpx.Response:
    return http.post("/v1/settlements/ondemand", json=body)


def balance(http: httpx.Client) -> int:
    return int(http.get("/v1/balance").json()["balance"])


@pytest.mark.parametrize(
    "amount, fees, tax",
    [(100_000, 354, 54), (200, 2, 1), (1000, 4, 1), (333_333, 1180, 180), (333_334, 1182, 181)],
)
def test_fees_are_0_3_percent_plus_18_percent_tax_rounded_up(amount: int, fees: int, tax: int):
    assert settlement_fees(amount) == (fees, tax)


def test_settlement_entity_and_balance_drawdown(sandbox: SandboxProcess, http: httpx.Client):
    sandbox.set_balance(1_000_000)
    body = settle(http, {"amount": 100_000, "description": "Payout 42", "notes": {"interlock_sik": "SETL1"}}).json()
    assert re.fullmatch(r"setlod_[A-Za-z0-9]{14}", body["id"])
    assert body["entity"] == "settlement.ondemand" and body["status"] == "processed" and body["currency"] == "INR"
    assert (body["amount_requested"], body["fees"], body["tax"], body["amount_settled"]) == (100_000, 354, 54, 99_646)
    assert (body["amount_pending"], body["amount_reversed"], body["settle_full_balance"]) == (0, 0, False)
    assert (body["description"], body["notes"]) == ("Payout 42", {"interlock_sik": "SETL1"})
    assert balance(http) == 900_000
    assert http.get(f"/v1/settlements/ondemand/{body['id']}").json() == body
    assert http.get("/v1/settlements/ondemand", params={"count": 1}).json()["items"] == [body]
    assert sandbox.count_stamped("SETL1") == 1


def test_settle_full_balance_ignores_amount(sandbox: SandboxProcess, http: httpx.Client):
    sandbox.set_balance(50_000)
    body = settle(http, {"settle_full_balance": True, "amount": 999}).json()
    assert body["amount_requested"] == 50_000 and body["settle_full_balance"] is True and body["notes"] == []
    assert balance(http) == 0


@pytest.mark.parametrize(
    "body, field",
    [
        ({"amount": 199}, "amount"),
        ({"amount": 1000.0}, "amount"),
        ({"amount": "1000"}, "amount"),
        ({}, "amount"),
        ({"amount": 1000, "receipt": "ilk_X"}, "receipt"),
        ({"amount": 1000, "description": "d" * 31}, "description"),
        ({"amount": 1000, "description": "no-dashes"}, "description"),
        ({"settle_full_balance": "yes"}, "settle_full_balance"),
    ],
)
def test_settlement_body_is_checked_strictly(sandbox: SandboxProcess, http: httpx.Client, body, field: str):
    sandbox.set_balance(1_000_000)
    response = settle(http, body)
    assert response.status_code == 400 and response.json()["error"]["field"] == field
    assert balance(http) == 1_000_000


def test_insufficient_balance_is_refused(sandbox: SandboxProcess, http: httpx.Client):
    sandbox.set_balance(10_000)
    assert settle(http, {"amount": 10_001}).status_code == 400
    assert settle(http, {"amount": 10_000}).status_code == 200
    assert settle(http, {"settle_full_balance": True}).status_code == 400
    assert balance(http) == 0


def test_settlement_list_is_newest_first_and_paged(sandbox: SandboxProcess, http: httpx.Client):
    sandbox.set_balance(1_000_000)
    made = [settle(http, {"amount": 1000 + i}).json()["id"] for i in range(3)]
    page = http.get("/v1/settlements/ondemand", params={"count": 2, "skip": 1}).json()
    assert page["entity"] == "collection" and page["count"] == 2
    assert [s["id"] for s in page["items"]] == [made[1], made[0]]
    assert http.get("/v1/settlements/ondemand", params={"count": 101}).status_code == 400
