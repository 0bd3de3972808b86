"""The tamper-evident audit chain (I6).

hash = sha256(prev_hash + "\\n" + canonical_json({seq, ts, kind, payload})), genesis prev_hash =
sha256("interlock-genesis-v1"). Appends read the head and insert the next row inside the caller's
BEGIN IMMEDIATE transaction, so two writers can never chain onto the same head.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

from interlock.canonical import canonical_json, sha256_hex
from ledger.db import require_transaction

GENESIS_HASH = sha256_hex("interlock-genesis-v1")


def record_hash(prev_hash: str, seq: int, ts: int, kind: str, payload: Any) -> str:
    body = canonical_json({"seq": seq, "ts": ts, "kind": kind, "payload": payload}).decode("utf-8")
    return sha256_hex(prev_hash + "\n" + body)


def _record_hash_of(prev_hash: str, seq: int, ts: int, kind: str, payload_json: str) -> str:
    """record_hash, given the payload's canonical JSON already made: the record's canonical JSON is its four members
    in key order (kind, payload, seq, ts) around it, so the payload is serialised once per append, not twice.
    tests/ledger/test_audit.py checks it against record_hash."""
    head = canonical_json({"kind": kind}).decode("utf-8")[:-1]  # '{"kind":"…"'
    tail = canonical_json({"seq": seq, "ts": ts}).decode("utf-8")[1:]  # '"seq":…,"ts":…}'
    return sha256_hex(f'{prev_hash}\n{head},"payload":{payload_json},{tail}')


def append(conn: sqlite3.Connection, kind: str, payload: Mapping[str, Any], ts: int) -> int:
    """Append one audit record in the caller's transaction; returns its seq."""
    require_transaction(conn)
    head = conn.execute("SELECT seq, hash FROM audit_head WHERE id = 1").fetchone()
    seq, prev_hash = (head["seq"] + 1, head["hash"]) if head else (1, GENESIS_HASH)
    payload_json = canonical_json(dict(payload)).decode("utf-8")
    digest = _record_hash_of(prev_hash, seq, ts, kind, payload_json)
    conn.execute(
        "INSERT INTO audit_log (seq, ts, kind, payload_json, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?)",
        (seq, ts, kind, payload_json, prev_hash, digest),
    )
    return seq


def canonical_payload(payload_json: Any) -> dict[str, Any] | None:
    """The object *payload_json* holds when it is exactly the canonical JSON append() writes, else None.

    The chain hashes the parsed value, so any other spelling of it (a duplicate key, whitespace, key order)
    would verify while a reader that keeps the first of two keys sees another record: refuse it (ADR 0020)."""
    try:
        payload = json.loads(payload_json)
        exact = canonical_json(payload).decode("utf-8") == payload_json
    except (TypeError, ValueError, RecursionError):  # not JSON, or a value canonical JSON refuses (a float)
        return None
    return payload if exact and isinstance(payload, dict) else None


def verify_records(records: Iterable[Mapping[str, Any]], *, head: tuple[int, str] | None = None) -> int | None:
    """Verify audit records in seq order; return the first divergent seq, or None when intact.

    Works on ledger rows or on an exported bundle. *head* (seq, hash), when known, exposes a
    truncated tail: the first missing seq is reported. A payload_json that is not byte for byte the
    canonical JSON of its value does not verify (`canonical_payload`).
    """
    expected_seq, prev_hash = 1, GENESIS_HASH
    for row in records:
        seq = int(row["seq"])
        if seq != expected_seq:
            # A deleted row or reordering shows up as a gap at the first seq that is not where it should be.
            return expected_seq
        payload = canonical_payload(row["payload_json"])
        if payload is None:
            return seq
        if row["prev_hash"] != prev_hash:
            return seq
        if record_hash(prev_hash, seq, int(row["ts"]), str(row["kind"]), payload) != row["hash"]:
            return seq
        prev_hash = str(row["hash"])
        expected_seq += 1
    if head is not None:
        head_seq, head_hash = head
        if head_seq >= expected_seq:
            return expected_seq  # the tail from here on is missing
        if head_seq == expected_seq - 1 and head_seq > 0 and head_hash != prev_hash:
            return head_seq
    return None


def verify_chain(conn: sqlite3.Connection) -> int | None:
    """Return the first divergent seq of the ledger's audit chain, or None when it verifies."""
    head_row = conn.execute("SELECT seq, hash FROM audit_head WHERE id = 1").fetchone()
    head = (int(head_row["seq"]), str(head_row["hash"])) if head_row else None
    rows = conn.execute("SELECT seq, ts, kind, payload_json, prev_hash, hash FROM audit_log ORDER BY rowid")
    return verify_records(rows, head=head)


def count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM audit_log").fetchone()[0])
