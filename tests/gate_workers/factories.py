from __future__ import annotations

import sqlite3
from typing import Any

from gate_workers.context import GateContext, ResolvedAction
from interlock.mandate import Mandate
from interlock.sik import compute_sik
from interlock.tools import current_pins
from rails.models import Balance, Payment
from tests.mandates import AGENT, MERCHANT, make_mandate

NOW = 1_800_000_000_000


def payment(amount: int = 189900, refunded: int = 0, *, pid: str = "pay_T0001", currency: str = "INR",
            status: str = "captured", captured: bool = True) -> Payment:
    raw = {"id": pid, "entity": "payment", "amount": amount, "currency": currency, "status": status,
           "amount_refunded": refunded, "captured": captured, "notes": []}
    result: Payment = Payment.from_raw(raw)
    return result


def refund_action(amount: int = 50000, *, pay: Payment | None = None, tool: str = "create_refund",
                  agent_id: str = AGENT, merchant_id: str = MERCHANT, distinct: str | None = None,
                  resolution_error: str | None = None) -> ResolvedAction:
    pay = pay or payment()
    sik = None if resolution_error else compute_sik(merchant_id=merchant_id, tool=tool, subject=pay.id,
                                                   amount_minor=amount, currency=pay.currency, distinct=distinct)
    return ResolvedAction(
        request_id="req_1", agent_id=agent_id, merchant_id=merchant_id, tool=tool,
        arguments={"payment_id": pay.id, "amount": amount}, subject=pay.id, amount_minor=amount,
        currency=pay.currency, requested_amount=amount, payment=pay, sik=sik, distinct_reason=distinct,
        params={"amount": amount, "notes": {}}, resolution_error=resolution_error,
    )


def settlement_action(amount: int = 100000, *, balance: int = 5_000_000, window: int = 1) -> ResolvedAction:
    sik = compute_sik(merchant_id=MERCHANT, tool="create_instant_settlement", subject="balance",
                      amount_minor=amount, currency="INR", window=window)
    bal: Balance = Balance.from_raw({"balance": balance, "currency": "INR"})
    return ResolvedAction(
        request_id="req_2", agent_id=AGENT, merchant_id=MERCHANT, tool="create_instant_settlement",
        arguments={"amount": amount}, subject="balance", amount_minor=amount, currency="INR",
        requested_amount=amount, balance=bal, sik=sik, window=window, params={"amount": amount, "notes": {}},
    )


def context(ledger: sqlite3.Connection, mandate: Mandate | None = None, *, now: int = NOW,
            tool_hashes: dict[str, str] | None = None, **kw: Any) -> GateContext:
    return GateContext(mandate=mandate if mandate is not None else make_mandate(), now_ms=now, ledger=ledger,
                       tool_hashes=tool_hashes if tool_hashes is not None else current_pins(), **kw)
