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
from tests.mandates import EXAMPLE
from tests.ops.conftest import APPROVER

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


def ack(ledger: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    from interlock.cli import cli

    for name in ("REDIS_URL", "INTERLOCK_REDIS_URL", "INTERLOCK_SHARDS"):
        monkeypatch.delenv(name, raising=False)
    env = {"INTERLOCK_LEDGER": str(ledger), "INTERLOCK_MANDATE": str(EXAMPLE)}
    result = CliRunner().invoke(cli, ["attention", *args], env=env)
    return result.exit_code, result.output + str(result.exception or "")


def test_an_acknowledged_attention_stops_waiting_for_a_person_and_changes_nothing_else(ledger, monkeypatch) -> None:
    conn = open_ledger(ledger)
    before = (conn.execute("SELECT * FROM intents ORDER BY sik").fetchall(),
              conn.execute("SELECT * FROM rail_status ORDER BY sik").fetchall())  # fmt: skip
    conn.close()
    code, out = ack(ledger, monkeypatch, "ack", "C" * 32, "--attention", "REFUND_FAILED", "--as", APPROVER,
                    "--note", "customer told; refund re-issued by bank transfer, ticket T-12")  # fmt: skip
    assert code == 0, out
    assert "acknowledged: REFUND_FAILED on " + "C" * 32 in out
    report = json.loads(status(ledger, monkeypatch, "--json"))
    assert [r["entity_id"] for r in report["needs_attention"]] == ["setlod_D"]
    [taken] = report["acknowledged_attention"]
    assert (taken["entity_id"], taken["acknowledged"]["operator"], taken["acknowledged"]["credential"]) == \
        ("rfnd_C", APPROVER, "none: name as typed")  # fmt: skip
    text = status(ledger, monkeypatch)
    assert "NEEDS A PERSON: REFUND_FAILED" not in text and "NEEDS A PERSON: SETTLEMENT_REVERSED" in text
    assert "attention acknowledged by a person: 1" in text
    exposition = generate_latest(build_registry([ShardSource("s1", ledger, None)])).decode()
    assert 'interlock_rail_attention{reason="REFUND_FAILED",shard="s1"} 0.0' in exposition
    assert 'interlock_rail_attention_acknowledged{reason="REFUND_FAILED",shard="s1"} 1.0' in exposition
    assert 'interlock_rail_attention{reason="SETTLEMENT_REVERSED",shard="s1"} 1.0' in exposition
    conn = open_ledger(ledger)
    try:
        after = (conn.execute("SELECT * FROM intents ORDER BY sik").fetchall(),
                 conn.execute("SELECT * FROM rail_status ORDER BY sik").fetchall())  # fmt: skip
        assert after == before, "an acknowledgement changes no intent and no rail_status"
        [record] = [json.loads(r[0]) for r in conn.execute(
            "SELECT payload_json FROM audit_log WHERE kind = 'RAIL_ATTENTION_ACK'")]
        assert (record["sik"], record["attention"], record["operator"], record["rail_entity_id"]) == \
            ("C" * 32, "REFUND_FAILED", APPROVER, "rfnd_C")  # fmt: skip
        from ledger import audit

        assert audit.verify_chain(conn) is None
    finally:
        conn.close()
    code, out = ack(ledger, monkeypatch, "list", "--all")
    assert code == 0 and "1 waiting for a person" in out and f"acknowledged by {APPROVER}" in out, out


@pytest.mark.parametrize(("sik", "attention", "note", "why"), [
    ("C" * 32, "SETTLEMENT_REVERSED", "x", "its attention is REFUND_FAILED, not SETTLEMENT_REVERSED"),
    ("A" * 32, "REFUND_FAILED", "x", "there is no attention to acknowledge"),
    ("C" * 32, "REFUND_FAILED", "  ", "says what is being done about it"),
    ("E" * 32, "REFUND_FAILED", "x", "no intent with this SIK"),
])  # fmt: skip
def test_an_acknowledgement_of_something_else_is_refused_and_records_nothing(ledger, monkeypatch, sik, attention,
                                                                            note, why) -> None:  # fmt: skip
    code, out = ack(ledger, monkeypatch, "ack", sik, "--attention", attention, "--as", APPROVER, "--note", note)
    assert code != 0 and why in out, out
    conn = open_ledger(ledger)
    try:
        assert conn.execute("SELECT COUNT(*) FROM rail_attention_acks").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM audit_log WHERE kind = 'RAIL_ATTENTION_ACK'").fetchone()[0] == 0
    finally:
        conn.close()


def test_only_an_approver_the_mandate_names_may_acknowledge_an_attention(ledger, monkeypatch) -> None:
    """Issue 46 item 3: the same rule as for a hold. A name the intent's mandate does not list is refused, naming who
    may decide, and nothing is written; the named approver then acknowledges it."""
    code, out = ack(ledger, monkeypatch, "ack", "C" * 32, "--attention", "REFUND_FAILED", "--as", "asha",
                    "--note", "customer told")  # fmt: skip
    assert code != 0 and "'asha' is not an approver of mandate mnd_demo_support" in out, out
    assert f"only {APPROVER} may decide for merchant {M}" in out, out
    conn = open_ledger(ledger)
    try:
        assert conn.execute("SELECT COUNT(*) FROM rail_attention_acks").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM audit_log WHERE kind = 'RAIL_ATTENTION_ACK'").fetchone()[0] == 0
    finally:
        conn.close()
    code, out = ack(ledger, monkeypatch, "ack", "C" * 32, "--attention", "REFUND_FAILED", "--as", APPROVER,
                    "--note", "customer told")  # fmt: skip
    assert code == 0, out


def test_a_new_attention_on_an_acknowledged_intent_is_raised_again(ledger, monkeypatch) -> None:
    code, out = ack(ledger, monkeypatch, "ack", "C" * 32, "--attention", "REFUND_FAILED", "--as", APPROVER,
                    "--note", "customer told")  # fmt: skip
    assert code == 0, out
    code, out = ack(ledger, monkeypatch, "ack", "C" * 32, "--attention", "REFUND_FAILED", "--as", APPROVER,
                    "--note", "again")  # fmt: skip
    assert code != 0 and f"already acknowledged by {APPROVER}" in out, out
    conn = open_ledger(ledger)
    with transaction(conn):  # the bank's word changes after the acknowledgement: a second, contradicting final
        lifecycle.observe(conn, merchant_id=M, sik="C" * 32, tool="create_refund", entity_id="rfnd_C",
                          status="processed", entity={"id": "rfnd_C", "status": "processed", "amount": 5000},
                          source=lifecycle.WEBHOOK, ref="evt_late", now=99, next_poll_at=None,
                          actor="test")  # fmt: skip
    conn.close()
    report = json.loads(status(ledger, monkeypatch, "--json"))
    assert ("rfnd_C", "CONFLICTING_FINAL") in [(r["entity_id"], r["attention"]) for r in report["needs_attention"]]


def test_a_ledger_without_the_acknowledgements_table_yet_shows_every_attention_waiting(ledger, monkeypatch) -> None:
    conn = open_ledger(ledger)
    conn.execute("DROP TABLE rail_attention_acks")
    conn.close()
    conn = open_ledger(ledger, readonly=True)  # a reader of a ledger whose rail worker is not on this version yet
    try:
        assert len(lifecycle.needs_attention(conn)) == 2 and lifecycle.acknowledged(conn) == []
        assert dict(lifecycle.attention_counts(conn, acknowledged=True)) == {}
    finally:
        conn.close()


def test_a_reversed_payout_waits_for_a_person_until_acknowledged_and_the_agent_is_told_to_escalate(
        ledger, monkeypatch) -> None:  # fmt: skip
    from ingress.status import _lookup

    conn = open_ledger(ledger)
    try:
        follow(conn, "P" * 32, "create_payout", "pout_P", "processing", "processed", "reversed", fees=590, tax=90)
    finally:
        conn.close()
    report = json.loads(status(ledger, monkeypatch, "--json"))
    assert report["rail_status"]["create_payout"] == {"reversed": 1}
    assert ("pout_P", "PAYOUT_REVERSED") in [(r["entity_id"], r["attention"]) for r in report["needs_attention"]]
    exposition = generate_latest(build_registry([ShardSource("s1", ledger, None)])).decode()
    assert 'interlock_rail_attention{reason="PAYOUT_REVERSED",shard="s1"} 1.0' in exposition
    for reason in ("PAYOUT_FAILED", "PAYOUT_NOT_PAID"):
        assert f'interlock_rail_attention{{reason="{reason}",shard="s1"}} 0.0' in exposition  # present at 0
    answer = _lookup(ledger, M, "P" * 32, None)
    assert (answer["state"], answer["caller_action"], answer["rail_status"]["status"]) == \
        ("APPLIED", "ESCALATE_TO_OPERATOR", "reversed")  # fmt: skip
    assert answer["rail_status"]["amounts"] == {"amount": 5000, "fees": 590, "tax": 90}
    code, out = ack(ledger, monkeypatch, "ack", "P" * 32, "--attention", "PAYOUT_REVERSED", "--as", APPROVER,
                    "--note", "beneficiary bank returned it; vendor asked for new account details, ticket T-40")
    assert code == 0, out
    exposition = generate_latest(build_registry([ShardSource("s1", ledger, None)])).decode()
    assert 'interlock_rail_attention{reason="PAYOUT_REVERSED",shard="s1"} 0.0' in exposition
    assert 'interlock_rail_attention_acknowledged{reason="PAYOUT_REVERSED",shard="s1"} 1.0' in exposition
    assert _lookup(ledger, M, "P" * 32, None)["caller_action"] == "ESCALATE_TO_OPERATOR", \
        "what follows a reversed payout is the merchant's decision, not the agent's"  # fmt: skip


def test_an_acknowledged_partial_reversal_waits_for_a_person_again_when_more_is_reversed(ledger, monkeypatch) -> None:
    """An acknowledgement covers the observation it was given for, in every place that counts what waits for a
    person: `interlock status`, `interlock attention list`, the metrics. A larger reversal after it waits again, and
    an acknowledgement made from the earlier listing (`--raised` as listed then) is refused."""
    conn = open_ledger(ledger)
    try:
        follow(conn, "E" * 32, "create_instant_settlement", "setlod_E", "partially_processed", amount_settled=4000,
               amount_reversed=1000)  # fmt: skip
    finally:
        conn.close()
    code, listed = ack(ledger, monkeypatch, "list")
    [line] = [x for x in listed.splitlines() if x.startswith("E" * 32)]
    raised = line.rsplit("raised=", 1)[1]
    code, out = ack(ledger, monkeypatch, "ack", "E" * 32, "--attention", "SETTLEMENT_REVERSED", "--raised", raised,
                    "--as", APPROVER, "--note", "Rs 10 came back; re-settled by hand")  # fmt: skip
    assert code == 0, out
    assert "E" * 32 not in json.dumps(json.loads(status(ledger, monkeypatch, "--json"))["needs_attention"])
    conn = open_ledger(ledger)
    try:
        with transaction(conn):  # the bank reverses the rest
            lifecycle.observe(conn, merchant_id=M, sik="E" * 32, tool="create_instant_settlement",
                              entity_id="setlod_E", status="reversed",
                              entity={"id": "setlod_E", "status": "reversed", "amount_settled": 0,
                                      "amount_reversed": 5000}, source=lifecycle.POLL, ref=None, now=50,
                              next_poll_at=None, actor="test")  # fmt: skip
    finally:
        conn.close()
    report = json.loads(status(ledger, monkeypatch, "--json"))
    [again] = [r for r in report["needs_attention"] if r["sik"] == "E" * 32]
    assert (again["status"], again["amounts"]["amount_reversed"]) == ("reversed", 5000)
    assert "E" * 32 not in [r["sik"] for r in report["acknowledged_attention"]]
    assert "NEEDS A PERSON: SETTLEMENT_REVERSED create_instant_settlement setlod_E" in status(ledger, monkeypatch)
    exposition = generate_latest(build_registry([ShardSource("s1", ledger, None)])).decode()
    assert 'interlock_rail_attention{reason="SETTLEMENT_REVERSED",shard="s1"} 2.0' in exposition  # D's and E's
    assert 'interlock_rail_attention_acknowledged{reason="SETTLEMENT_REVERSED",shard="s1"} 0.0' in exposition
    code, out = ack(ledger, monkeypatch, "ack", "E" * 32, "--attention", "SETTLEMENT_REVERSED", "--raised", raised,
                    "--as", APPROVER, "--note", "as before")  # fmt: skip
    assert code != 0 and "raised again since" in out, out
    code, out = ack(ledger, monkeypatch, "list", "--all")
    assert code == 0 and "3 waiting for a person" in out and "0 acknowledged" in out, out  # C, D and E
