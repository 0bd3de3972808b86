"""Tampering with the audit chain is detected at the exact seq, by verify_chain and by the CLI."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.canonical import canonical_json
from ledger import audit
from ledger.db import open_ledger, transaction

FIELDS = ["ts", "kind", "payload_json", "prev_hash", "hash"]


def build_chain(path: Path, n: int = 8) -> None:
    conn = open_ledger(path)
    for i in range(n):
        with transaction(conn):
            audit.append(conn, "TEST", {"i": i, "note": f"record {i}"}, 1000 + i)
    conn.close()


def tamper(path: Path, *statements: str) -> None:
    """A tamperer with write access to the file: drop the append-only triggers, then edit."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DROP TRIGGER audit_log_no_update")
    conn.execute("DROP TRIGGER audit_log_no_delete")
    conn.execute("DROP TRIGGER audit_log_move_head")
    for sql in statements:
        conn.execute(sql)
    conn.close()


def first_bad(path: Path) -> int | None:
    conn = open_ledger(path)
    try:
        return audit.verify_chain(conn)
    finally:
        conn.close()


def cli_verify(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "interlock.cli", "audit", "verify", "--ledger", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_intact_chain_verifies(ledger_path: Path) -> None:
    build_chain(ledger_path)
    assert first_bad(ledger_path) is None
    result = cli_verify(ledger_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "chain ok: 8 records"


def test_empty_chain_verifies(ledger_path: Path) -> None:
    open_ledger(ledger_path).close()
    assert first_bad(ledger_path) is None


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("seq", [1, 4, 8])
def test_editing_any_field_of_any_row_is_detected(ledger_path: Path, field: str, seq: int) -> None:
    build_chain(ledger_path)
    value = "12345" if field == "ts" else "'tampered'"
    if field == "payload_json":
        value = """'{"i":99,"note":"record 99"}'"""
    tamper(ledger_path, f"UPDATE audit_log SET {field} = {value} WHERE seq = {seq}")
    expected = seq
    assert first_bad(ledger_path) == expected
    result = cli_verify(ledger_path)
    assert result.returncode == 1
    assert f"seq {expected}" in result.stderr


def test_deleting_a_row_is_detected_at_its_seq(ledger_path: Path) -> None:
    build_chain(ledger_path)
    tamper(ledger_path, "DELETE FROM audit_log WHERE seq = 5")
    assert first_bad(ledger_path) == 5
    assert "seq 5" in cli_verify(ledger_path).stderr


def test_reordering_two_rows_is_detected(ledger_path: Path) -> None:
    build_chain(ledger_path)
    # Swap the contents of seq 3 and 4, keeping each row's own hash: the chain links no longer meet.
    tamper(
        ledger_path,
        "UPDATE audit_log SET seq = -3 WHERE seq = 3",
        "UPDATE audit_log SET seq = 3 WHERE seq = 4",
        "UPDATE audit_log SET seq = 4 WHERE seq = -3",
    )
    assert first_bad(ledger_path) == 3
    assert cli_verify(ledger_path).returncode == 1


def test_truncating_the_tail_is_detected_at_the_first_missing_seq(ledger_path: Path) -> None:
    build_chain(ledger_path)
    tamper(ledger_path, "DELETE FROM audit_log WHERE seq >= 6")
    assert first_bad(ledger_path) == 6
    assert "seq 6" in cli_verify(ledger_path).stderr


def test_verify_records_works_without_a_ledger(ledger_path: Path) -> None:
    build_chain(ledger_path, 3)
    conn = open_ledger(ledger_path)
    rows = [dict(r) for r in conn.execute("SELECT * FROM audit_log ORDER BY seq")]
    conn.close()
    assert audit.verify_records(rows) is None
    rows[1]["kind"] = "OTHER"
    assert audit.verify_records(rows) == 2


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(kind=st.text(max_size=12), payload=st.dictionaries(st.text(max_size=8), _JSON, max_size=5),
       seq=st.integers(1, 2**53 - 1), ts=st.integers(0, 2**53 - 1))  # fmt: skip
def test_an_appended_record_is_hashed_exactly_as_record_hash_says(kind: str, payload: dict, seq: int,
                                                                  ts: int) -> None:  # fmt: skip
    # append() serialises the payload once and wraps it; the chain's rule is record_hash over the whole record.
    payload_json = canonical_json(payload).decode("utf-8")
    assert audit._record_hash_of("p" * 64, seq, ts, kind, payload_json) == audit.record_hash("p" * 64, seq, ts, kind,
                                                                                             payload)  # fmt: skip


def test_the_chain_verifies_after_appends_with_unicode_kinds_and_keys(tmp_path: Path) -> None:
    conn = open_ledger(tmp_path / "l.sqlite3")
    with transaction(conn):
        audit.append(conn, "KIND_é\"\\", {"ключ": "значение", "a": [1, {"z": None, "é": True}], "\u2028": "x"}, 7)
        audit.append(conn, "TEST", {}, 8)
    rows = conn.execute("SELECT * FROM audit_log ORDER BY seq").fetchall()
    assert audit.verify_records([dict(r) for r in rows]) is None
    conn.close()
