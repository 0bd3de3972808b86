"""Operator commands over a shard map (SPEC §15): `interlock status` per shard and in total, `interlock audit
verify` over every shard's chain naming the shard and seq of a tampered record, metrics with a shard label."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest

from interlock.clock import now_ms
from interlock.config import load_settings
from interlock.ports import free_port
from ledger.db import open_ledger
from ops.metrics import build_registry, shard_sources
from ops.status_cli import status_command
from tests.ledger.helpers import put_intent
from tests.ledger.test_audit import tamper


@pytest.fixture
def shard_map(tmp_path: Path) -> Path:
    """Two shards, a (2 APPLIED) and b (1 APPLIED, 1 UNKNOWN); their Redis servers are not running."""
    down = f"redis://127.0.0.1:{free_port()}"  # two databases of one server: two Redis (a map refuses one for both)
    path = tmp_path / "shards.yaml"
    path.write_text(f"shards:\n  a: {{redis_url: '{down}/0', ledger: a.sqlite3}}\n"
                    f"  b: {{redis_url: '{down}/1', ledger: b.sqlite3}}\n")  # fmt: skip
    for name, states in (("a", ["APPLIED", "APPLIED"]), ("b", ["APPLIED", "UNKNOWN"])):
        conn = open_ledger(tmp_path / f"{name}.sqlite3")
        try:
            for i, state in enumerate(states):
                put_intent(conn, f"{name.upper()}{i}".ljust(32, "A"), state, amount=100 + i)
        finally:
            conn.close()
    return path


def cli(shard_map: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "INTERLOCK_SHARDS": str(shard_map)}
    return subprocess.run([sys.executable, "-m", "interlock.cli", *args], capture_output=True, text=True, env=env,
                          timeout=60)  # fmt: skip


def test_status_reports_each_shard_and_the_total(shard_map: Path) -> None:
    result = CliRunner().invoke(status_command, ["--json"], env={"INTERLOCK_SHARDS": str(shard_map),
                                                                  "REDIS_URL": "", "INTERLOCK_LEDGER": ""})
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["shards"]["a"]["intents_by_state"] == {"APPLIED": 2}
    assert report["shards"]["b"]["intents_by_state"] == {"APPLIED": 1, "UNKNOWN": 1}
    assert report["total"]["intents_by_state"] == {"APPLIED": 3, "UNKNOWN": 1}
    assert "unreachable" in report["shards"]["a"]["queues"]["error"]  # a down Redis is reported, not fatal
    text = CliRunner().invoke(status_command, [], env={"INTERLOCK_SHARDS": str(shard_map)}).output
    assert text.index("shard a") < text.index("shard b") < text.index("total")


def test_status_reports_a_shard_whose_ledger_is_missing_and_still_the_others(shard_map: Path) -> None:
    (shard_map.parent / "b.sqlite3").unlink()
    result = CliRunner().invoke(status_command, ["--json"], env={"INTERLOCK_SHARDS": str(shard_map)})
    report = json.loads(result.output)
    assert "error" in report["shards"]["b"]
    assert report["total"]["intents_by_state"] == {"APPLIED": 2}


def test_audit_verify_checks_every_shard_and_names_the_shard_and_seq_of_a_tampered_record(shard_map: Path) -> None:
    ok = cli(shard_map, "audit", "verify")
    assert ok.returncode == 0, ok.stderr
    assert [line.split(":")[0] for line in ok.stdout.splitlines()] == ["shard a", "shard b"]
    tamper(shard_map.parent / "b.sqlite3", "UPDATE audit_log SET payload_json = '{\"x\": 1}' WHERE seq = 3")
    bad = cli(shard_map, "audit", "verify")
    assert bad.returncode == 1
    assert "shard b: chain broken at seq 3" in bad.stderr
    assert "shard a: chain ok" in bad.stdout  # the other shard is still verified and reported


def test_every_metric_carries_the_shard_it_came_from(shard_map: Path) -> None:
    settings = load_settings(shards=shard_map)
    exposition = generate_latest(build_registry(shard_sources(settings, None))).decode()
    assert 'interlock_intents{shard="a",state="APPLIED"} 2.0' in exposition
    assert 'interlock_intents{shard="b",state="UNKNOWN"} 1.0' in exposition
    assert 'interlock_ledger_up{shard="a"} 1.0' in exposition and 'interlock_ledger_up{shard="b"} 1.0' in exposition
    assert exposition.count("# TYPE interlock_intents gauge") == 1  # one family, both shards' samples


def test_holds_and_quarantine_list_every_shard_and_an_action_needs_the_merchant_to_find_its_shard(
    shard_map: Path,
) -> None:
    mandate = str(Path(__file__).resolve().parents[2] / "deploy" / "mandate.example.yaml")
    env = {"PATH": "/usr/bin:/bin", "INTERLOCK_SHARDS": str(shard_map), "INTERLOCK_MANDATE": mandate}
    conn = open_ledger(shard_map.parent / "b.sqlite3")
    try:
        put_intent(conn, "HELDINB".ljust(32, "A"), "HELD", amount=400000, now=now_ms())
    finally:
        conn.close()
    listed = subprocess.run([sys.executable, "-m", "interlock.cli", "holds", "list"], capture_output=True, text=True,
                            env=env, timeout=60)  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert "HELDINB" in listed.stdout and listed.stdout.strip().endswith("1 held")  # found on shard b
    refused = subprocess.run([sys.executable, "-m", "interlock.cli", "holds", "reject", "A0".ljust(32, "A"), "--as",
                              "ops_lead@example.com", "--reason", "no"], capture_output=True, text=True, env=env,
                             timeout=60)  # fmt: skip
    assert refused.returncode != 0
    assert "pass --merchant, so the action goes to that merchant's shard" in refused.stderr
