"""The shard map a ledger accepted (ledger/ownership.py, SPEC §15): written with one audit record in the same
transaction, replaced by the next apply, and absent — not an error — in a ledger from before the table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from interlock.shards import Ownership
from ledger import audit, ownership
from ledger.db import open_ledger, transaction


def test_accepting_a_map_is_one_audit_record_and_the_next_replaces_it(ledger: sqlite3.Connection) -> None:
    assert ownership.accepted(ledger) is None
    first = Ownership(1, ("s0", "s1"), {"acme": "s1"})
    before = audit.count(ledger)
    with transaction(ledger):
        ownership.accept(ledger, "s0", first, now=1000)
    got = ownership.accepted(ledger)
    assert got is not None and (got.shard, got.ownership, got.digest, got.epoch) == ("s0", first, first.digest, 1)
    with transaction(ledger):
        ownership.accept(ledger, "s0", Ownership(2, ("s0", "s1"), {}), now=2000)
    assert ownership.accepted(ledger).epoch == 2  # type: ignore[union-attr]
    assert audit.count(ledger) == before + 2
    kinds = [r[0] for r in ledger.execute("SELECT kind FROM audit_log ORDER BY seq DESC LIMIT 2")]
    assert kinds == [ownership.ACCEPTED_KIND] * 2
    assert audit.verify_chain(ledger) is None


def test_a_ledger_from_before_the_table_reads_as_no_map_and_gains_the_table_when_the_rail_worker_opens_it(
    ledger_path: Path,
) -> None:
    conn = open_ledger(ledger_path)
    conn.execute("DROP TABLE shard_ownership")
    conn.close()
    readonly = open_ledger(ledger_path, readonly=True)
    assert ownership.accepted(readonly) is None
    readonly.close()
    conn = open_ledger(ledger_path)  # the schema is applied on every read-write open: the table is created
    with transaction(conn):
        ownership.accept(conn, "s0", Ownership(1, ("s0",), {}), now=1)
    assert ownership.accepted(conn) is not None
    conn.close()
