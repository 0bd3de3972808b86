"""The audit chain's construction and verification, record by record: each record's hash is the one the spec
defines (recomputed here independently), each links to its predecessor and moves the head, and verification
names the first seq that diverges for every kind of damage, on ledger rows and on exported dicts alike."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from typing import Any

import pytest

from interlock.errors import LedgerError
from ledger import audit
from ledger.db import transaction

GENESIS = hashlib.sha256(b"interlock-genesis-v1").hexdigest()


def spec_hash(prev_hash: str, seq: int, ts: int, kind: str, payload: Any) -> str:
    """sha256(prev_hash + "\\n" + canonical_json({seq, ts, kind, payload})), written out from SPEC §8."""
    body = json.dumps({"seq": seq, "ts": ts, "kind": kind, "payload": payload}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)  # fmt: skip
    return hashlib.sha256((prev_hash + "\n" + body).encode("utf-8")).hexdigest()


def append(conn: sqlite3.Connection, kind: str, payload: dict[str, Any], ts: int) -> int:
    with transaction(conn):
        return audit.append(conn, kind, payload, ts)


def rows(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute("SELECT * FROM audit_log ORDER BY seq")]


def head(conn: sqlite3.Connection) -> tuple[int, str]:
    row = conn.execute("SELECT seq, hash FROM audit_head WHERE id = 1").fetchone()
    return int(row["seq"]), str(row["hash"])


def test_the_genesis_and_record_hash_are_the_specs() -> None:
    assert audit.GENESIS_HASH == GENESIS
    payload = {"b": [1, "x"], "a": None, "z": {"k": True}}
    assert audit.record_hash(GENESIS, 7, 1234, "KIND", payload) == spec_hash(GENESIS, 7, 1234, "KIND", payload)


def test_each_field_of_a_record_changes_its_hash() -> None:
    base = audit.record_hash(GENESIS, 1, 10, "K", {"a": 1})
    variants = [audit.record_hash("0" * 64, 1, 10, "K", {"a": 1}), audit.record_hash(GENESIS, 2, 10, "K", {"a": 1}),
                audit.record_hash(GENESIS, 1, 11, "K", {"a": 1}), audit.record_hash(GENESIS, 1, 10, "L", {"a": 1}),
                audit.record_hash(GENESIS, 1, 10, "K", {"a": 2})]  # fmt: skip
    assert len({base, *variants}) == 6


def test_appends_chain_from_genesis_and_move_the_head(ledger: sqlite3.Connection) -> None:
    assert append(ledger, "FIRST", {"n": 1, "note": "é"}, 100) == 1
    assert append(ledger, "SECOND", {"n": 2}, 105) == 2
    h1 = spec_hash(GENESIS, 1, 100, "FIRST", {"n": 1, "note": "é"})
    h2 = spec_hash(h1, 2, 105, "SECOND", {"n": 2})
    assert rows(ledger) == [
        {"seq": 1, "ts": 100, "kind": "FIRST", "payload_json": '{"n":1,"note":"é"}', "prev_hash": GENESIS, "hash": h1},
        {"seq": 2, "ts": 105, "kind": "SECOND", "payload_json": '{"n":2}', "prev_hash": h1, "hash": h2},
    ]  # fmt: skip
    assert head(ledger) == (2, h2)
    assert audit.count(ledger) == 2
    assert audit.verify_chain(ledger) is None


def test_an_append_outside_a_transaction_is_refused(ledger: sqlite3.Connection) -> None:
    with pytest.raises(LedgerError, match="must run inside transaction"):
        audit.append(ledger, "K", {}, 1)
    assert audit.count(ledger) == 0


def test_an_empty_ledger_has_no_records_and_verifies(ledger: sqlite3.Connection) -> None:
    assert audit.count(ledger) == 0
    assert audit.verify_chain(ledger) is None
    assert audit.verify_records([]) is None


def canonical(payload: dict[str, Any]) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def chain(n: int, payload_of: Any = lambda seq: {"i": seq}) -> list[dict[str, Any]]:
    """An exported chain of n records, built without the ledger."""
    records, prev = [], GENESIS
    for seq in range(1, n + 1):
        payload = payload_of(seq)
        digest = spec_hash(prev, seq, 1000 + seq, f"K{seq}", payload)
        records.append({"seq": seq, "ts": 1000 + seq, "kind": f"K{seq}", "payload_json": canonical(payload),
                        "prev_hash": prev, "hash": digest})  # fmt: skip
        prev = digest
    return records


def test_an_intact_export_verifies_with_and_without_its_head() -> None:
    records = chain(3)
    assert audit.verify_records(records) is None
    assert audit.verify_records(records, head=(3, records[-1]["hash"])) is None


@pytest.mark.parametrize(("field", "value"), [
    ("ts", 999), ("kind", "OTHER"), ("payload_json", '{"i": 99}'), ("prev_hash", "0" * 64), ("hash", "0" * 64),
    ("payload_json", "{not json"), ("payload_json", None),
])  # fmt: skip
@pytest.mark.parametrize("at", [1, 2, 3])
def test_damage_to_any_field_of_an_exported_record_is_found_at_its_seq(field: str, value: Any, at: int) -> None:
    records = chain(3)
    records[at - 1][field] = value
    assert audit.verify_records(records) == at


@pytest.mark.parametrize("spelling", [
    pytest.param('{"amount_minor":1,"amount_minor":2,"sik":"S"}', id="duplicate-key"),  # first-wins reads 1
    pytest.param('{"amount_minor": 2, "sik": "S"}', id="whitespace"),
    pytest.param('{"sik":"S","amount_minor":2}', id="key-order"),
    pytest.param('{"amount_minor":2,"sik":"\\u0053"}', id="escaped-character"),
])  # fmt: skip
def test_a_payload_json_that_is_not_the_canonical_bytes_is_found_at_its_seq(spelling: str) -> None:
    # regression (issue 25 item 10): verify_records hashed json.loads(payload_json), so another spelling of the
    # same value verified, a duplicate key among them, and what a reader saw was not what the chain hashed.
    records = chain(3, lambda seq: {"amount_minor": seq, "sik": "S"})
    records[1]["payload_json"] = spelling
    assert json.loads(records[1]["payload_json"]) == {"amount_minor": 2, "sik": "S"}  # the hashed value is intact
    assert audit.verify_records(records) == 2


def test_a_missing_or_repeated_record_is_found_where_the_seq_breaks() -> None:
    records = chain(4)
    assert audit.verify_records(records[:1] + records[2:]) == 2
    assert audit.verify_records(records[1:]) == 1
    assert audit.verify_records(records[:2] + records[1:]) == 3


def test_a_truncated_tail_is_found_at_the_first_missing_seq() -> None:
    records = chain(4)
    assert audit.verify_records(records[:3], head=(4, records[3]["hash"])) == 4
    assert audit.verify_records(records[:2], head=(4, records[3]["hash"])) == 3
    assert audit.verify_records([], head=(4, records[3]["hash"])) == 1


def test_a_head_that_does_not_match_the_last_record_is_found_at_the_head() -> None:
    records = chain(1)
    assert audit.verify_records(records, head=(1, "0" * 64)) == 1
    records = chain(3)
    assert audit.verify_records(records, head=(3, records[1]["hash"])) == 3


def test_a_head_behind_the_records_or_at_zero_flags_nothing() -> None:
    # Pinned as verify_records behaves today: only a head past the records, or one that disagrees with the record
    # at its seq, is reported. A consistent snapshot (ledger.operator.snapshot) never has a head behind its records,
    # so one would mean records appended with the head trigger dropped; if that should be flagged, change both.
    records = chain(3)
    assert audit.verify_records(records, head=(2, records[1]["hash"])) is None
    assert audit.verify_records(records, head=(2, "0" * 64)) is None
    assert audit.verify_records([], head=(0, "0" * 64)) is None


def test_the_ledger_head_exposes_a_dropped_last_record(ledger: sqlite3.Connection) -> None:
    for i in range(3):
        append(ledger, "K", {"i": i}, 100 + i)
    ledger.execute("DROP TRIGGER audit_log_no_delete")
    ledger.execute("DELETE FROM audit_log WHERE seq = 3")
    assert audit.verify_chain(ledger) == 3
    assert audit.count(ledger) == 2


def test_the_ledger_head_must_match_the_last_record(ledger: sqlite3.Connection) -> None:
    for i in range(2):
        append(ledger, "K", {"i": i}, 100 + i)
    ledger.execute("UPDATE audit_head SET hash = ? WHERE id = 1", ("0" * 64,))
    assert audit.verify_chain(ledger) == 2


def test_the_ledger_chain_is_checked_in_insertion_order(ledger: sqlite3.Connection) -> None:
    for i in range(3):
        append(ledger, "K", {"i": i}, 100 + i)
    assert audit.verify_chain(ledger) is None
    ledger.execute("DROP TRIGGER audit_log_no_update")
    ledger.execute("UPDATE audit_log SET kind = 'X' WHERE seq = 2")
    assert audit.verify_chain(ledger) == 2
