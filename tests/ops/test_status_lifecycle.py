"""What an operator sees of applied money after the rail accepted it (issue 27): `interlock status` counts followed
refunds and settlements by the rail's latest status and names every one that needs a person; the metrics exporter
carries the same as gauges, so an alert can fire on a refund the bank failed."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest

from ledger import lifecycle
from ledger.db import open_ledger, transaction
from ops.metrics import ShardSource, build_registry
from ops.status_cli import status_command
from tests.ledger.helpers import put_intent

M = "acc_DEMO000001"


def follow(conn: sqlite3.Connection, sik: str, tool: str, entity_id: str, *statuses: str, **amounts: int) -> None:
    put_intent(conn, sik, "APPLIED", amount=5000, tool=tool)
    for n, status in enumerate(statuses):
        with transaction(conn):
            lifecycle.observe(conn, merchant_id=M, sik=sik, tool=tool, entity_id=entity_id, status=status,
                              entity={"id": entity_id, "status": status, "amount": 5000, **amounts},
                              source=lifecycle.POLL, ref=None, now=10 + n, next_poll_at=None, actor="test")  # fmt: skip


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.sqlite3"
    conn = open_ledger(path)
    try:
        follow(conn, "A" * 32, "create_refund", "rfnd_A", "pending", "processed")
        follow(conn, "B" * 32, "create_refund", "rfnd_B", "pending")
        follow(conn, "C" * 32, "create_refund", "rfnd_C", "pending", "failed")
        follow(conn, "D" * 32, "create_instant_settlement", "setlod_D", "initiated", "reversed",
               amount_settled=0, amount_reversed=5000)  # fmt: skip
    finally:
        conn.close()
    return path


def status(ledger: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    for name in ("REDIS_URL", "INTERLOCK_REDIS_URL", "INTERLOCK_SHARDS"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(status_command, list(args), env={"INTERLOCK_LEDGER": str(ledger)})
    assert result.exit_code == 0, result.output
    return result.output


def test_status_counts_applied_money_by_rail_status_and_names_what_needs_a_person(ledger, monkeypatch) -> None:
    report = json.loads(status(ledger, monkeypatch, "--json"))
    assert report["rail_status"] == {"create_refund": {"pending": 1, "processed": 1, "failed": 1},
                                     "create_instant_settlement": {"reversed": 1}}  # fmt: skip
    assert sorted((r["entity_id"], r["attention"]) for r in report["needs_attention"]) == \
        [("rfnd_C", "REFUND_FAILED"), ("setlod_D", "SETTLEMENT_REVERSED")]  # fmt: skip
    text = status(ledger, monkeypatch)
    assert "at the rail, create_refund: failed=1, pending=1, processed=1" in text
    assert "NEEDS A PERSON: REFUND_FAILED create_refund rfnd_C of acc_DEMO000001 " + "C" * 32 in text


def test_metrics_carry_rail_status_and_an_attention_gauge_for_every_reason(ledger) -> None:
    exposition = generate_latest(build_registry([ShardSource("s1", ledger, None)])).decode()
    assert 'interlock_rail_status{shard="s1",status="failed",tool="create_refund"} 1.0' in exposition
    assert 'interlock_rail_attention{reason="REFUND_FAILED",shard="s1"} 1.0' in exposition
    assert 'interlock_rail_attention{reason="SETTLEMENT_REVERSED",shard="s1"} 1.0' in exposition
    assert 'interlock_rail_attention{reason="CONFLICTING_FINAL",shard="s1"} 0.0' in exposition  # present at 0


def test_a_ledger_whose_rail_worker_predates_the_lifecycle_reads_as_nothing_followed(tmp_path, monkeypatch) -> None:
    path = tmp_path / "ledger.sqlite3"
    conn = open_ledger(path)
    conn.executescript("DROP TABLE rail_status_history; DROP TABLE rail_status;")
    conn.close()
    report = json.loads(status(path, monkeypatch, "--json"))
    assert (report["rail_status"], report["needs_attention"]) == ({}, [])
