"""The sandbox's durable state and journal: one SQLite file in the data directory.

Every entity the rail creates is inserted here, with the request body and headers that created it,
in the same transaction as the payment or balance change it causes, and committed with
synchronous=FULL *before* any response is chosen. Chaos and bench verdicts count this table, so it
records what the rail really did whatever answer the client got (a 504, a replayed response, none).
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import sqlite3
import string
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sandbox.schema import INDEXES, TABLES, ensure_tables

logger = logging.getLogger(__name__)

JOURNAL_FILENAME = "sandbox-journal.sqlite3"
_ID_ALPHABET = string.ascii_letters + string.digits


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_id(prefix: str) -> str:
    """Razorpay-style id: prefix + 14 alphanumerics (SPEC §14)."""
    return prefix + "".join(secrets.choice(_ID_ALPHABET) for _ in range(14))


def stable_id(prefix: str, *parts: str) -> str:
    """A Razorpay-style id derived from *parts*: the same parts give the same id on every start."""
    number = int.from_bytes(hashlib.sha256("\x1f".join(parts).encode()).digest(), "big")
    chars = []
    for _ in range(14):
        number, digit = divmod(number, len(_ID_ALPHABET))
        chars.append(_ID_ALPHABET[digit])
    return prefix + "".join(chars)


def stable_utr(entity_id: str) -> str:
    """A 12-digit bank reference (UTR) derived from an entity's id: every read shows the same one."""
    return str(int(hashlib.sha256(("utr\x1f" + entity_id).encode()).hexdigest(), 16))[-12:]


def dump(value: Any, *, sort: bool = True) -> str:
    return json.dumps(value, sort_keys=sort, separators=(",", ":"))


def stamp_of(entity: Mapping[str, Any]) -> str | None:
    notes = entity.get("notes")
    if isinstance(notes, Mapping):
        sik = notes.get("interlock_sik")
        return str(sik) if sik is not None else None
    return None


class Journal:
    """State and journal of one sandbox process; the connection never crosses threads or forks."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = connect(path)
        # An older journal is brought up to the current tables here (sandbox/schema.py): payments without their
        # details, entities that could not be payouts, idempotency keys without a scope.
        ensure_tables(self.conn, TABLES, INDEXES)

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        # BEGIN IMMEDIATE + COMMIT with synchronous=FULL: the entity is on disk before we answer.
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    # -- seeding and meta ------------------------------------------------------------------------

    def is_seeded(self) -> bool:
        return self.conn.execute("SELECT 1 FROM meta WHERE key = 'seeded'").fetchone() is not None

    def mark_seeded(self, conn: sqlite3.Connection, source: str) -> None:
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('seeded', ?)", (source,))

    # -- payments and balance --------------------------------------------------------------------

    def upsert_payment(self, conn: sqlite3.Connection, payment: Mapping[str, Any]) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO payments (id, amount, currency, amount_refunded, notes_json, created_at, "
            "details_json) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                payment["id"],
                payment["amount"],
                payment["currency"],
                payment.get("amount_refunded", 0),
                dump(payment.get("notes") or {}),
                payment.get("created_at") or now_ms() // 1000,
                dump(payment.get("details") or {}),
            ),
        )
        self.event(conn, "payment_upserted", dict(payment))

    def payment(self, payment_id: str) -> dict[str, Any] | None:
        row = self.conn.execute(f"SELECT {_PAYMENT_COLUMNS} FROM payments WHERE id = ?", (payment_id,)).fetchone()
        return None if row is None else _payment_row(row)

    def payments(self) -> list[dict[str, Any]]:
        """Every payment, oldest first (the journal export)."""
        rows = self.conn.execute(f"SELECT {_PAYMENT_COLUMNS} FROM payments ORDER BY created_at, id")
        return [_payment_row(row) for row in rows]

    def list_payments(self) -> list[dict[str, Any]]:
        """Every payment, newest first (GET /v1/payments)."""
        rows = self.conn.execute(f"SELECT {_PAYMENT_COLUMNS} FROM payments ORDER BY created_at DESC, rowid DESC")
        return [_payment_row(row) for row in rows]

    def set_payment_notes(self, conn: sqlite3.Connection, payment_id: str, notes: Mapping[str, Any]) -> None:
        conn.execute("UPDATE payments SET notes_json = ? WHERE id = ?", (dump(dict(notes)), payment_id))
        self.event(conn, "payment_notes_updated", {"id": payment_id, "notes": dict(notes)})

    def add_refunded(self, conn: sqlite3.Connection, payment_id: str, amount: int) -> None:
        conn.execute("UPDATE payments SET amount_refunded = amount_refunded + ? WHERE id = ?", (amount, payment_id))

    def balance(self, currency: str = "INR") -> int:
        row = self.conn.execute("SELECT amount FROM balances WHERE currency = ?", (currency,)).fetchone()
        return int(row[0]) if row else 0

    def set_balance(self, conn: sqlite3.Connection, currency: str, amount: int) -> None:
        conn.execute("INSERT OR REPLACE INTO balances (currency, amount) VALUES (?, ?)", (currency, amount))
        self.event(conn, "balance_set", {"currency": currency, "amount": amount})

    def debit_balance(self, conn: sqlite3.Connection, currency: str, amount: int) -> None:
        conn.execute("UPDATE balances SET amount = amount - ? WHERE currency = ?", (amount, currency))

    # -- RazorpayX: payees and the business account's balance --------------------------------------------

    def upsert_contact(self, conn: sqlite3.Connection, contact: Mapping[str, Any], created_ms: int) -> None:
        conn.execute("INSERT OR REPLACE INTO contacts (id, created_ms, entity_json) VALUES (?, ?, ?)",
                     (contact["id"], created_ms, dump(contact, sort=False)))  # fmt: skip
        self.event(conn, "contact_upserted", dict(contact))

    def upsert_fund_account(self, conn: sqlite3.Connection, fund_account: Mapping[str, Any], created_ms: int) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO fund_accounts (id, contact_id, created_ms, entity_json) VALUES (?, ?, ?, ?)",
            (fund_account["id"], fund_account["contact_id"], created_ms, dump(fund_account, sort=False)),
        )
        self.event(conn, "fund_account_upserted", dict(fund_account))

    def contact(self, contact_id: str) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT entity_json FROM contacts WHERE id = ?", (contact_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def fund_account(self, fund_account_id: str) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT entity_json FROM fund_accounts WHERE id = ?", (fund_account_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def banking_balance(self, account_number: str) -> tuple[int, int] | None:
        """(amount, refreshed_ms) of the RazorpayX account, or None before any balance was set."""
        row = self.conn.execute(
            "SELECT amount, refreshed_ms FROM banking_balances WHERE account_number = ?", (account_number,)
        ).fetchone()
        return (int(row[0]), int(row[1])) if row else None

    def set_banking_balance(self, conn: sqlite3.Connection, account_number: str, amount: int) -> None:
        conn.execute("INSERT OR REPLACE INTO banking_balances (account_number, amount, refreshed_ms) VALUES (?, ?, ?)",
                     (account_number, amount, now_ms()))  # fmt: skip
        self.event(conn, "banking_balance_set", {"account_number": account_number, "amount": amount})

    def move_banking_balance(self, conn: sqlite3.Connection, account_number: str, delta: int) -> None:
        """Debit (delta < 0) or credit the RazorpayX account; the caller has checked a debit fits."""
        conn.execute(
            "INSERT INTO banking_balances (account_number, amount, refreshed_ms) VALUES (?, ?, ?) "
            "ON CONFLICT (account_number) DO UPDATE SET amount = amount + excluded.amount, "
            "refreshed_ms = excluded.refreshed_ms",
            (account_number, delta, now_ms()),
        )

    # -- entities ----------------------------------------------------------------------------------

    def insert_entity(
        self,
        conn: sqlite3.Connection,
        *,
        kind: str,
        entity: Mapping[str, Any],
        created_ms: int,
        request: Mapping[str, Any],
        headers: Mapping[str, str],
        origin: str = "api",
        fault: str | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        conn.execute(
            "INSERT INTO entities (id, kind, payment_id, stamp_sik, receipt, created_ms, origin, fault, "
            "idempotency_key, entity_json, request_json, headers_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                entity["id"],
                kind,
                entity.get("payment_id"),
                stamp_of(entity),
                # The caller's own reference: a refund's receipt, a payout's reference_id (both "ilk_" + SIK).
                entity.get("receipt") or entity.get("reference_id"),
                created_ms,
                origin,
                fault,
                idempotency_key,
                # Unsorted: a replayed entity reads exactly like the original response.
                dump(entity, sort=False),
                dump(request),
                dump(dict(headers)),
            ),
        )

    def entity(self, entity_id: str, kind: str) -> tuple[dict[str, Any], int] | None:
        row = self.conn.execute(
            "SELECT entity_json, created_ms FROM entities WHERE id = ? AND kind = ?", (entity_id, kind)
        ).fetchone()
        return (json.loads(row[0]), int(row[1])) if row else None

    def list_entities(self, kind: str, *, payment_id: str | None = None) -> list[tuple[dict[str, Any], int]]:
        """All entities of *kind* (optionally of one payment), newest first, with their created_ms."""
        if payment_id is None:
            rows = self.conn.execute(
                "SELECT entity_json, created_ms FROM entities WHERE kind = ? ORDER BY seq DESC", (kind,)
            )
        else:
            rows = self.conn.execute(
                "SELECT entity_json, created_ms FROM entities WHERE kind = ? AND payment_id = ? ORDER BY seq DESC",
                (kind, payment_id),
            )
        return [(json.loads(r[0]), int(r[1])) for r in rows]

    def replace_entity(self, conn: sqlite3.Connection, entity: Mapping[str, Any], *, was: Mapping[str, Any]) -> None:
        """Store an edited entity (PATCH of notes); the stamp column follows the notes it now carries.

        The edit is an event with the notes it replaced, so the journal still shows what was created.
        """
        conn.execute(
            "UPDATE entities SET entity_json = ?, stamp_sik = ? WHERE id = ?",
            (dump(entity, sort=False), stamp_of(entity), entity["id"]),
        )
        self.event(conn, "entity_notes_updated", {"id": entity["id"], "was": was.get("notes"), "now": entity["notes"]})

    def set_status(self, conn: sqlite3.Connection, entity: Mapping[str, Any], *, was: Mapping[str, Any]) -> None:
        """Store an entity that moved on (lifecycle, cancel, a hand move); the change is an event."""
        conn.execute("UPDATE entities SET entity_json = ? WHERE id = ?", (dump(entity, sort=False), entity["id"]))
        self.event(conn, "entity_status_changed", {"id": entity["id"], "was": was.get("status"),
                                                   "now": entity.get("status")})  # fmt: skip

    def entities_in_status(self, conn: sqlite3.Connection, kind: str, status: str) -> list[dict[str, Any]]:
        """Entities of *kind* now in *status*, oldest first (a queue's order)."""
        rows = conn.execute(
            "SELECT entity_json FROM entities WHERE kind = ? AND json_extract(entity_json, '$.status') = ? "
            "ORDER BY seq",
            (kind, status),
        )
        return [json.loads(row[0]) for row in rows]

    def receipt_used(self, payment_id: str, receipt: str) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM entities WHERE kind = 'refund' AND payment_id = ? AND receipt = ?", (payment_id, receipt)
        ).fetchone()
        return row is not None

    def latest_entity_except(self, kind: str, entity_id: str) -> dict[str, Any] | None:
        row = self.conn.execute(
            "SELECT entity_json FROM entities WHERE kind = ? AND id <> ? ORDER BY seq DESC LIMIT 1", (kind, entity_id)
        ).fetchone()
        return json.loads(row[0]) if row else None

    def count_stamped(self, sik: str) -> int:
        return count_stamped(self.conn, sik)

    # -- idempotency keys --------------------------------------------------------------------------

    def idempotency_key(self, key: str, scope: str = "refund") -> tuple[str, str] | None:
        """(body hash, entity id) of the first request sent with *key* in *scope* ("refund" or "payout")."""
        row = self.conn.execute(
            "SELECT body_hash, entity_id FROM idempotency_keys WHERE scope = ? AND key = ?", (scope, key)
        ).fetchone()
        return (row[0], row[1]) if row else None

    def record_idempotency_key(
        self, conn: sqlite3.Connection, key: str, body_hash: str, entity_id: str, scope: str = "refund"
    ) -> None:
        conn.execute(
            "INSERT INTO idempotency_keys (scope, key, body_hash, entity_id, created_ms) VALUES (?, ?, ?, ?, ?)",
            (scope, key, body_hash, entity_id, now_ms()),
        )

    # -- events and export -------------------------------------------------------------------------

    def event(self, conn: sqlite3.Connection, kind: str, detail: Mapping[str, Any]) -> None:
        conn.execute("INSERT INTO events (at_ms, kind, detail_json) VALUES (?, ?, ?)", (now_ms(), kind, dump(detail)))

    def log_event(self, kind: str, detail: Mapping[str, Any]) -> None:
        with self.transaction() as conn:
            self.event(conn, kind, detail)

    def export(self) -> dict[str, Any]:
        """Everything the journal holds, for GET /__sandbox/journal."""
        entities = [
            {
                "seq": r[0],
                "id": r[1],
                "kind": r[2],
                "payment_id": r[3],
                "stamp_sik": r[4],
                "receipt": r[5],
                "created_ms": r[6],
                "origin": r[7],
                "fault": r[8],
                "idempotency_key": r[9],
                "entity": json.loads(r[10]),
                "request": {"body": json.loads(r[11]), "headers": json.loads(r[12])},
            }
            for r in self.conn.execute(
                "SELECT seq, id, kind, payment_id, stamp_sik, receipt, created_ms, origin, fault, idempotency_key, "
                "entity_json, request_json, headers_json FROM entities ORDER BY seq"
            )
        ]
        keys = [
            {"key": r[0], "body_hash": r[1], "entity_id": r[2], "created_ms": r[3], "scope": r[4]}
            for r in self.conn.execute(
                "SELECT key, body_hash, entity_id, created_ms, scope FROM idempotency_keys ORDER BY scope, key"
            )
        ]
        events = [
            {"seq": r[0], "at_ms": r[1], "kind": r[2], "detail": json.loads(r[3])}
            for r in self.conn.execute("SELECT seq, at_ms, kind, detail_json FROM events ORDER BY seq")
        ]
        balances = {r[0]: r[1] for r in self.conn.execute("SELECT currency, amount FROM balances")}
        banking = {r[0]: r[1] for r in self.conn.execute("SELECT account_number, amount FROM banking_balances")}
        return {
            "entities": entities,
            "payments": self.payments(),
            "balances": balances,
            "banking_balances": banking,
            "contacts": self._payees("contacts"),
            "fund_accounts": self._payees("fund_accounts"),
            "idempotency_keys": keys,
            "events": events,
        }

    def _payees(self, table: str) -> list[dict[str, Any]]:
        return [json.loads(r[0]) for r in self.conn.execute(f"SELECT entity_json FROM {table} ORDER BY created_ms, id")]


_PAYMENT_COLUMNS = "id, amount, currency, amount_refunded, notes_json, created_at, details_json"


def _payment_row(row: tuple[Any, ...]) -> dict[str, Any]:
    return {
        "id": row[0],
        "amount": row[1],
        "currency": row[2],
        "amount_refunded": row[3],
        "notes": json.loads(row[4]),
        "created_at": row[5],
        "details": json.loads(row[6]),
    }


def connect(path: Path) -> sqlite3.Connection:
    # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE ... COMMIT), never implicit.
    conn = sqlite3.connect(path, isolation_level=None, timeout=10.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def count_stamped(conn: sqlite3.Connection, sik: str) -> int:
    """Entities carrying the stamp of *sik*: notes.interlock_sik == sik, or a receipt or payout reference_id
    "ilk_" + sik (SPEC §4, §18)."""
    row = conn.execute(
        "SELECT count(*) FROM entities WHERE stamp_sik = ? OR receipt = ?", (sik, "ilk_" + sik)
    ).fetchone()
    return int(row[0])
