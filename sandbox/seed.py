"""Initial rail state: payments and a balance from a YAML seed file, or a few demo payments.

Seed file:
    payments:
      - {id: pay_DEMO0001, amount: 189900, currency: INR, amount_refunded: 0, notes: {}, prior_refunds: 0}
      - {id: pay_DEMO0002, amount: 49900, order_id: order_DEMO0002, customer_id: cust_DEMO0002, method: upi}
    balance: {amount: 5000000, currency: INR}

A payment's order_id, customer_id, method, email, contact and description default to values derived
from its id (sandbox.payments.default_details), so the same seed always serves the same entities.

`prior_refunds: N` creates N historical 100-paise refunds on the payment (unstamped, journaled with
origin "seed") so a list has more than one page — what deep_page needs to push ours past page one.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from sandbox.journal import Journal, now_ms
from sandbox.payments import DETAIL_FIELDS, METHODS, default_details
from sandbox.refunds import refund_entity

logger = logging.getLogger(__name__)

PAYMENT_ID = re.compile(r"^[A-Za-z0-9_]{1,64}$")
PAYMENT_FIELDS = {"id", "amount", "currency", "amount_refunded", "notes", "prior_refunds", *DETAIL_FIELDS}
DETAIL_PATTERNS = {
    "order_id": re.compile(r"^order_[A-Za-z0-9]{1,40}$"),
    "customer_id": re.compile(r"^cust_[A-Za-z0-9]{1,40}$"),
    "email": re.compile(r"^[^@\s]{1,64}@[^@\s]{1,190}$"),
    "contact": re.compile(r"^\+?[0-9]{8,15}$"),
    "description": re.compile(r"^.{1,255}$"),
}
PRIOR_REFUND_AMOUNT = 100

DEMO: dict[str, Any] = {
    "payments": [
        {"id": "pay_DEMO0001", "amount": 189900, "currency": "INR"},
        {"id": "pay_DEMO0002", "amount": 49900, "currency": "INR"},
        {"id": "pay_DEMO0003", "amount": 1250000, "currency": "INR", "amount_refunded": 250000},
        {"id": "pay_DEMO0004", "amount": 99900, "currency": "INR", "notes": {"order": "demo-4"}},
    ],
    "balance": {"amount": 5_000_000, "currency": "INR"},
}


class SeedError(ValueError):
    """Raised when a seed file or a seeded payment is malformed; the message names the field."""


def load_seed_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SeedError(f"cannot read seed file {path}: {exc}") from None
    if not isinstance(data, dict) or set(data) - {"payments", "balance"}:
        raise SeedError(f"seed file {path} must be a mapping with only `payments` and `balance`")
    return data


def seed_if_new(journal: Journal, seed: Mapping[str, Any], source: str) -> None:
    """Write *seed* on first start only: a restarted sandbox keeps the state it journaled."""
    if journal.is_seeded():
        logger.info("journal %s already holds state; seed %s not applied", journal.path, source)
        return
    with journal.transaction() as conn:
        for payment in seed.get("payments") or []:
            add_payment(journal, conn, payment)
        balance = seed.get("balance")
        if balance is not None:
            set_balance(journal, conn, balance)
        journal.mark_seeded(conn, source)
    logger.info("seeded %s payments from %s", len(seed.get("payments") or []), source)


def add_payment(journal: Journal, conn: sqlite3.Connection, spec: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(spec, Mapping) or set(spec) - PAYMENT_FIELDS:
        raise SeedError(f"a payment takes only {sorted(PAYMENT_FIELDS)}, got {spec!r}")
    payment_id = spec.get("id")
    if not isinstance(payment_id, str) or not PAYMENT_ID.match(payment_id):
        raise SeedError(f"payment id must be 1-64 characters of [A-Za-z0-9_], got {payment_id!r}")
    amount = _int(spec.get("amount"), "amount", minimum=1)
    refunded = _int(spec.get("amount_refunded", 0), "amount_refunded", minimum=0)
    prior = _int(spec.get("prior_refunds", 0), "prior_refunds", minimum=0)
    currency = spec.get("currency", "INR")
    if not isinstance(currency, str) or not re.fullmatch(r"[A-Z]{3}", currency):
        raise SeedError(f"currency must be a 3-letter upper-case code, got {currency!r}")
    if refunded + prior * PRIOR_REFUND_AMOUNT > amount:
        raise SeedError(f"payment {payment_id}: refunded more than its amount")
    notes = spec.get("notes") or {}
    if not isinstance(notes, Mapping):
        raise SeedError(f"payment {payment_id}: notes must be a mapping")
    payment = {
        "id": payment_id,
        "amount": amount,
        "currency": currency,
        "amount_refunded": refunded,
        "notes": dict(notes),
        "created_at": now_ms() // 1000,
        "details": _details(payment_id, spec),
    }
    journal.upsert_payment(conn, payment)
    for _ in range(prior):
        created = now_ms()
        refund = refund_entity(
            payment_id=payment_id, amount=PRIOR_REFUND_AMOUNT, currency=currency, notes={}, receipt=None,
            speed=None, created_ms=created,
        )  # fmt: skip
        journal.insert_entity(
            conn, kind="refund", entity=refund, created_ms=created, request={}, headers={}, origin="seed"
        )
        journal.add_refunded(conn, payment_id, PRIOR_REFUND_AMOUNT)
    return payment


def _details(payment_id: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    details = default_details(payment_id)
    for name, pattern in DETAIL_PATTERNS.items():
        value = spec.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or not pattern.match(value):
            raise SeedError(f"payment {payment_id}: {name} must match {pattern.pattern}, got {value!r}")
        details[name] = value
    method = spec.get("method", details["method"])
    if method not in METHODS:
        raise SeedError(f"payment {payment_id}: method must be one of {list(METHODS)}, got {method!r}")
    details["method"] = method
    return details


def set_balance(journal: Journal, conn: sqlite3.Connection, spec: Mapping[str, Any]) -> None:
    if not isinstance(spec, Mapping) or set(spec) - {"amount", "currency"}:
        raise SeedError(f"balance takes only amount and currency, got {spec!r}")
    currency = spec.get("currency", "INR")
    if currency != "INR":
        raise SeedError("the sandbox settles INR only")
    journal.set_balance(conn, currency, _int(spec.get("amount"), "balance.amount", minimum=0))


def _int(value: Any, name: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SeedError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value
