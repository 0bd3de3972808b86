"""Initial rail state: payments, a balance, RazorpayX payees and their account's balance from a YAML seed file,
or a few demo ones.

Seed file:
    payments:
      - {id: pay_DEMO0001, amount: 189900, currency: INR, amount_refunded: 0, notes: {}, prior_refunds: 0}
      - {id: pay_DEMO0002, amount: 49900, order_id: order_DEMO0002, customer_id: cust_DEMO0002, method: upi}
    balance: {amount: 5000000, currency: INR}
    fund_accounts:
      - {id: fa_DEMOBANK000001, account_type: bank_account, bank_account: {name: Asha Rao, ifsc: HDFC0000053},
         contact: {id: cont_DEMOBANK000001, name: Asha Rao, type: vendor}}
      - {id: fa_DEMOVPA0000001, account_type: vpa, vpa: {address: asha@okhdfcbank}, active: false}
    banking_balance: {amount: 10000000, currency: INR}

A fund account's contact is either `contact_id` (a contact seeded before) or `contact` (created with it; every
field optional). What a payee is seeded without is derived from its id (sandbox.payees), and so is stable.

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

from sandbox import payees
from sandbox.journal import Journal, new_id, now_ms, stable_id
from sandbox.payments import DETAIL_FIELDS, METHODS, default_details
from sandbox.rail import DEFAULT_ACCOUNT_NUMBER
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
SEED_KEYS = {"payments", "balance", "fund_accounts", "banking_balance"}
FUND_ACCOUNT_FIELDS = {"id", "account_type", "active", "bank_account", "vpa", "contact_id", "contact"}
CONTACT_FIELDS = {"id", "name", "email", "contact", "type", "reference_id", "notes", "active"}
PAYEE_PATTERNS = {
    "fund_account_id": re.compile(r"^fa_[A-Za-z0-9]{14}$"),
    "contact_id": re.compile(r"^cont_[A-Za-z0-9]{14}$"),
    "name": re.compile(r"^[A-Za-z0-9 .'&-]{3,50}$"),
    "ifsc": re.compile(r"^[A-Z]{4}0[A-Z0-9]{6}$"),
    "account_number": re.compile(r"^[0-9A-Za-z]{5,35}$"),
    "address": re.compile(r"^[A-Za-z0-9.\-_]{2,256}@[A-Za-z]{2,64}$"),
    "reference_id": re.compile(r"^.{1,40}$"),
}

DEMO: dict[str, Any] = {
    "payments": [
        {"id": "pay_DEMO0001", "amount": 189900, "currency": "INR"},
        {"id": "pay_DEMO0002", "amount": 49900, "currency": "INR"},
        {"id": "pay_DEMO0003", "amount": 1250000, "currency": "INR", "amount_refunded": 250000},
        {"id": "pay_DEMO0004", "amount": 99900, "currency": "INR", "notes": {"order": "demo-4"}},
    ],
    "balance": {"amount": 5_000_000, "currency": "INR"},
    "fund_accounts": [
        {"id": "fa_DEMOBANK000001", "account_type": "bank_account",
         "contact": {"id": "cont_DEMOBANK000001", "name": "Demo Vendor", "type": "vendor"}},
        {"id": "fa_DEMOVPA0000001", "account_type": "vpa",
         "contact": {"id": "cont_DEMOVPA0000001", "name": "Demo Employee", "type": "employee"}},
    ],
    "banking_balance": {"amount": 10_000_000, "currency": "INR"},
}


class SeedError(ValueError):
    """Raised when a seed file or a seeded payment is malformed; the message names the field."""


def load_seed_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SeedError(f"cannot read seed file {path}: {exc}") from None
    if not isinstance(data, dict) or set(data) - SEED_KEYS:
        raise SeedError(f"seed file {path} must be a mapping with only {sorted(SEED_KEYS)}")
    return data


def seed_if_new(
    journal: Journal, seed: Mapping[str, Any], source: str, *, account_number: str = DEFAULT_ACCOUNT_NUMBER
) -> None:
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
        for fund_account in seed.get("fund_accounts") or []:
            add_fund_account(journal, conn, fund_account)
        banking = seed.get("banking_balance")
        if banking is not None:
            set_banking_balance(journal, conn, banking, account_number)
        journal.mark_seeded(conn, source)
    logger.info("seeded %s payments and %s fund accounts from %s", len(seed.get("payments") or []),
                len(seed.get("fund_accounts") or []), source)  # fmt: skip


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


def set_banking_balance(
    journal: Journal, conn: sqlite3.Connection, spec: Mapping[str, Any], account_number: str
) -> None:
    """Set the RazorpayX business account's balance (payouts are paid from it, apart from `balance`)."""
    if not isinstance(spec, Mapping) or set(spec) - {"amount", "currency"}:
        raise SeedError(f"banking_balance takes only amount and currency, got {spec!r}")
    if spec.get("currency", "INR") != "INR":
        raise SeedError("RazorpayX pays out INR only")
    journal.set_banking_balance(conn, account_number, _int(spec.get("amount"), "banking_balance.amount", minimum=0))


def add_fund_account(journal: Journal, conn: sqlite3.Connection, spec: Mapping[str, Any]) -> dict[str, Any]:
    """Add (or replace) a fund account, with its contact unless `contact_id` names one; returns the fund account."""
    if not isinstance(spec, Mapping) or set(spec) - FUND_ACCOUNT_FIELDS:
        raise SeedError(f"a fund account takes only {sorted(FUND_ACCOUNT_FIELDS)}, got {spec!r}")
    fund_account_id = _payee_text(spec.get("id") or new_id("fa_"), "fund_account_id")
    account_type = spec.get("account_type", "bank_account")
    if account_type not in payees.ACCOUNT_TYPES:
        raise SeedError(f"fund account {fund_account_id}: account_type must be one of {list(payees.ACCOUNT_TYPES)}")
    other = "vpa" if account_type == "bank_account" else "bank_account"
    if spec.get(other) is not None:
        raise SeedError(f"fund account {fund_account_id}: {other} details on a {account_type} fund account")
    created = now_ms()
    contact = _contact(journal, conn, fund_account_id, spec, created)
    details = _account_details(fund_account_id, account_type, spec.get(account_type) or {}, contact["name"])
    fund_account = payees.fund_account_entity(
        fund_account_id=fund_account_id,
        contact_id=contact["id"],
        account_type=account_type,
        details=details,
        active=_flag(spec.get("active", True), f"fund account {fund_account_id}: active"),
        created_ms=created,
    )
    journal.upsert_fund_account(conn, fund_account, created)
    return fund_account


def _contact(
    journal: Journal, conn: sqlite3.Connection, fund_account_id: str, spec: Mapping[str, Any], created: int
) -> dict[str, Any]:
    """The fund account's contact: the one `contact_id` names, or the one `contact` describes (created now)."""
    if spec.get("contact_id") is not None:
        if spec.get("contact") is not None:
            raise SeedError(f"fund account {fund_account_id}: give contact_id or contact, not both")
        found = journal.contact(_payee_text(spec["contact_id"], "contact_id"))
        if found is None:
            raise SeedError(f"fund account {fund_account_id}: no contact {spec['contact_id']}")
        return found
    given = spec.get("contact") or {}
    if not isinstance(given, Mapping) or set(given) - CONTACT_FIELDS:
        raise SeedError(f"a contact takes only {sorted(CONTACT_FIELDS)}, got {given!r}")
    contact_id = _payee_text(given.get("id") or stable_id("cont_", "contact", fund_account_id), "contact_id")
    contact_type = given.get("type", "vendor")
    if contact_type not in payees.CONTACT_TYPES:
        raise SeedError(f"contact {contact_id}: type must be one of {list(payees.CONTACT_TYPES)}")
    notes = given.get("notes") or {}
    if not isinstance(notes, Mapping):
        raise SeedError(f"contact {contact_id}: notes must be a mapping")
    reference_id = given.get("reference_id")
    contact = payees.contact_entity(
        contact_id=contact_id,
        name=_payee_text(given.get("name") or payees.default_name(contact_id), "name"),
        email=_optional(given, "email", DETAIL_PATTERNS["email"]),
        contact=_optional(given, "contact", DETAIL_PATTERNS["contact"]),
        contact_type=contact_type,
        reference_id=None if reference_id is None else _payee_text(reference_id, "reference_id"),
        notes=dict(notes),
        active=_flag(given.get("active", True), f"contact {contact_id}: active"),
        created_ms=created,
    )
    journal.upsert_contact(conn, contact, created)
    return contact


def _account_details(fund_account_id: str, account_type: str, given: Any, name: str) -> dict[str, Any]:
    if not isinstance(given, Mapping):
        raise SeedError(f"fund account {fund_account_id}: {account_type} must be a mapping")
    if account_type == "vpa":
        if set(given) - {"address"}:
            raise SeedError(f"fund account {fund_account_id}: vpa takes only address")
        return payees.vpa(_payee_text(given.get("address") or payees.default_vpa(fund_account_id), "address"))
    if set(given) - {"name", "ifsc", "account_number"}:
        raise SeedError(f"fund account {fund_account_id}: bank_account takes only name, ifsc and account_number")
    return payees.bank_account(
        _payee_text(given.get("name") or name, "name"),
        _payee_text(given.get("ifsc") or payees.DEFAULT_IFSC, "ifsc"),
        _payee_text(given.get("account_number") or payees.default_account_number(fund_account_id), "account_number"),
    )


def _payee_text(value: Any, name: str) -> str:
    pattern = PAYEE_PATTERNS[name]
    if not isinstance(value, str) or not pattern.match(value):
        raise SeedError(f"{name} must match {pattern.pattern}, got {value!r}")
    return value


def _optional(spec: Mapping[str, Any], name: str, pattern: re.Pattern[str]) -> str | None:
    value = spec.get(name)
    if value is not None and (not isinstance(value, str) or not pattern.match(value)):
        raise SeedError(f"contact {name} must match {pattern.pattern}, got {value!r}")
    return value


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise SeedError(f"{name} must be true or false, got {value!r}")
    return value


def _int(value: Any, name: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SeedError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value
