"""The schema defends the invariants by itself, even against raw SQL that bypasses ledger/."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from interlock.errors import LedgerError
from ledger import intents
from ledger.db import open_ledger, transaction
from ledger.states import Event
from tests.ledger.helpers import propose

INSERT = """INSERT INTO intents (merchant_id, sik, tool, subject_id, amount_minor, currency, params_hash, params_json,
            state, agent_id, mandate_id, mandate_hash, first_seen_at, updated_at)
            VALUES (?, ?, 'create_refund', 'pay_1', ?, 'INR', 'h', '{}', 'PROPOSED', 'a', 'm', 'mh', 1, 1)"""


def test_ledger_opens_in_wal_with_synchronous_full(ledger: sqlite3.Connection) -> None:
    assert ledger.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert ledger.execute("PRAGMA synchronous").fetchone()[0] == 2


def test_every_table_is_strict(ledger: sqlite3.Connection) -> None:
    tables = ledger.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    assert {t["name"] for t in tables} >= {
        "intents", "intent_attempts", "decisions", "recon_findings", "operation_refs", "audit_log", "leases",
    }  # fmt: skip
    for table in tables:
        assert "STRICT" in table["sql"], table["name"]


def test_float_amount_is_refused_by_the_strict_table(ledger: sqlite3.Connection) -> None:
    with pytest.raises(sqlite3.IntegrityError, match="cannot store REAL"):
        ledger.execute(INSERT, ("acc", "S" * 32, 100.5))
    with pytest.raises(sqlite3.IntegrityError, match="cannot store TEXT"):
        ledger.execute(INSERT, ("acc", "T" * 32, "one hundred"))
    # STRICT converts a lossless 100.0 to 100, so the exact-type check lives before the ledger:
    # interlock.money.parse_amount refuses floats and strings before anything is recorded.


def test_second_intent_with_the_same_key_is_refused_by_the_primary_key(ledger: sqlite3.Connection) -> None:
    ledger.execute(INSERT, ("acc", "S" * 32, 100))
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        ledger.execute(INSERT, ("acc", "S" * 32, 200))
    ledger.execute(INSERT, ("acc_other", "S" * 32, 100))  # the key is (merchant_id, sik)


def test_insert_intent_returns_none_on_conflict(ledger: sqlite3.Connection) -> None:
    propose(ledger, "K" * 32)
    with transaction(ledger):
        again = intents.insert_intent(
            ledger, merchant_id="acc_TEST", sik="K" * 32, tool="create_refund", subject_id="pay_X", amount_minor=5,
            currency="INR", params={}, params_hash="x", agent_id="a", mandate_id="m", mandate_hash="h",
            operation_ref=None, distinct_reason=None, now=9,
        )  # fmt: skip
    assert again is None
    assert intents.require_intent(ledger, "acc_TEST", "K" * 32).amount_minor == 1000


def test_confirmed_not_applied_requires_exhausted_pagination(ledger: sqlite3.Connection) -> None:
    sql = """INSERT INTO recon_findings (merchant_id, sik, attempt_seq, outcome, pages_scanned, pagination_exhausted,
             queried_at) VALUES ('acc', 'S', 1, ?, 1, ?, 1)"""
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        ledger.execute(sql, ("CONFIRMED_NOT_APPLIED", 0))
    ledger.execute(sql, ("CONFIRMED_NOT_APPLIED", 1))
    ledger.execute(sql, ("INCONCLUSIVE", 0))


@pytest.mark.parametrize("absorbing", ["APPLIED", "BLOCKED"])
def test_leaving_an_absorbing_state_is_refused_by_the_trigger(ledger: sqlite3.Connection, absorbing: str) -> None:
    propose(ledger, "Z" * 32)
    with transaction(ledger):
        if absorbing == "BLOCKED":
            intents.transition(ledger, "acc_TEST", "Z" * 32, Event.GATES_HELD, now=2)
            intents.transition(ledger, "acc_TEST", "Z" * 32, Event.HOLD_REJECTED, now=3)
        else:
            intents.transition(ledger, "acc_TEST", "Z" * 32, Event.GATES_PASSED, now=2)
            intents.start_attempt(ledger, "acc_TEST", "Z" * 32, now=3, lease_owner="w", lease_epoch=1,
                                  lease_expires_at=9, request={})  # fmt: skip
            intents.transition(ledger, "acc_TEST", "Z" * 32, Event.RAIL_APPLIED, now=4)
    with pytest.raises(sqlite3.IntegrityError, match="I4"):
        ledger.execute("UPDATE intents SET state = 'AUTHORIZED' WHERE sik = ?", ("Z" * 32,))
    assert intents.require_intent(ledger, "acc_TEST", "Z" * 32).state == absorbing


def test_attempt_seq_cannot_go_backwards_even_with_raw_sql(ledger: sqlite3.Connection) -> None:
    propose(ledger, "Y" * 32)
    ledger.execute("UPDATE intents SET attempt_seq = 3 WHERE sik = ?", ("Y" * 32,))
    with pytest.raises(sqlite3.IntegrityError, match="I5"):
        ledger.execute("UPDATE intents SET attempt_seq = 2 WHERE sik = ?", ("Y" * 32,))


def test_audit_log_is_append_only(ledger: sqlite3.Connection) -> None:
    propose(ledger)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        ledger.execute("UPDATE audit_log SET kind = 'X' WHERE seq = 1")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        ledger.execute("DELETE FROM audit_log WHERE seq = 1")


def test_ledger_writes_outside_a_transaction_are_refused(ledger: sqlite3.Connection) -> None:
    with pytest.raises(LedgerError, match="transaction"):
        intents.record_finding(ledger, merchant_id="a", sik="s", attempt_seq=1, outcome="INCONCLUSIVE",
                               pages_scanned=1, pagination_exhausted=False, matched_entity_id=None, now=1)  # fmt: skip


def test_readonly_open_of_a_missing_ledger_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="INTERLOCK_LEDGER"):
        open_ledger(tmp_path / "absent.sqlite3", readonly=True)


def test_readonly_connection_cannot_write(ledger_path: Path, ledger: sqlite3.Connection) -> None:
    ro = open_ledger(ledger_path, readonly=True)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        ro.execute(INSERT, ("acc", "S" * 32, 100))
    ro.close()
