"""Audit bundles verify standalone, and name the first bad record when edited, deleted from or reordered."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from ledger import intents
from ledger.db import transaction
from ledger.states import Event
from ops.bundle import export_bundle, verify_bundle


def _refund(conn: sqlite3.Connection, n: int, *, applied: bool) -> None:
    sik, now = f"SIK{n:029d}", 1_700_000_000_000 + n
    with transaction(conn):
        intents.record_decision(conn, request_id=f"req{n}", merchant_id="acc_M", sik=sik, agent_id="agent_a",
                                mandate_hash="h" * 64, verdict="ALLOW", reason_code="OK", results=[], now=now)
        intents.insert_intent(conn, merchant_id="acc_M", sik=sik, tool="create_refund", subject_id=f"pay_{n}",
                              amount_minor=1000 * n, currency="INR", params={}, params_hash="p", agent_id="agent_a",
                              mandate_id="mnd", mandate_hash="h" * 64, operation_ref=None, distinct_reason=None,
                              now=now)  # fmt: skip
        intents.transition(conn, "acc_M", sik, Event.GATES_PASSED, now=now)
        intents.start_attempt(conn, "acc_M", sik, now=now, lease_owner="rail", lease_epoch=1,
                              lease_expires_at=now + 1000, request={"amount": 1000 * n})  # fmt: skip
    with transaction(conn):
        entity = f"rfnd_{n:014d}" if applied else None
        intents.finish_attempt(conn, "acc_M", sik, 1, now=now + 5, outcome="APPLIED" if applied else "UNKNOWN",
                               rail_entity_id=entity)  # fmt: skip
        event = Event.RAIL_APPLIED if applied else Event.RAIL_AMBIGUOUS
        intents.transition(conn, "acc_M", sik, event, now=now + 5,
                           set_fields={"rail_entity_id": entity} if applied else None)  # fmt: skip


@pytest.fixture
def bundle(ledger: sqlite3.Connection, tmp_path: Path) -> Path:
    for n in range(1, 4):
        _refund(ledger, n, applied=n != 2)
    out = tmp_path / "bundle"
    export_bundle(ledger, out)
    return out


def _lines(bundle: Path) -> list[str]:
    return (bundle / "audit_log.jsonl").read_text().splitlines(keepends=True)


def _write(bundle: Path, lines: list[str]) -> None:
    (bundle / "audit_log.jsonl").write_text("".join(lines))


def test_an_untouched_bundle_verifies(bundle: Path) -> None:
    report = verify_bundle(bundle)
    assert report.ok, report.problems
    assert report.records == len(_lines(bundle)) > 10


def test_an_edited_record_is_named(bundle: Path) -> None:
    lines = _lines(bundle)
    row = json.loads(lines[4])
    assert '"acc_M"' in row["payload_json"]
    row["payload_json"] = row["payload_json"].replace('"acc_M"', '"acc_X"')  # another merchant's money
    lines[4] = json.dumps(row, sort_keys=True, separators=(",", ":")) + "\n"
    _write(bundle, lines)
    report = verify_bundle(bundle)
    assert report.first_bad_seq == 5
    assert "audit chain broken at seq 5" in report.problems[0] and "edited" in report.problems[0]


def test_a_deleted_record_is_named(bundle: Path) -> None:
    lines = _lines(bundle)
    del lines[6]
    _write(bundle, lines)
    report = verify_bundle(bundle)
    assert report.first_bad_seq == 7 and "seq 7" in report.problems[0]


def test_reordered_records_are_named(bundle: Path) -> None:
    lines = _lines(bundle)
    lines[2], lines[3] = lines[3], lines[2]
    _write(bundle, lines)
    assert verify_bundle(bundle).first_bad_seq == 3


def test_a_cut_tail_is_caught_against_the_manifest_head(bundle: Path) -> None:
    lines = _lines(bundle)
    _write(bundle, lines[:-2])
    report = verify_bundle(bundle)
    assert report.first_bad_seq == len(lines) - 1


def test_a_row_that_disagrees_with_the_chain_is_named(bundle: Path) -> None:
    path = bundle / "intents.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[1]["state"] = "APPLIED"  # the UNKNOWN intent claimed as paid
    path.write_text("".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in rows))
    report = verify_bundle(bundle)
    assert report.first_bad_seq is None
    assert any(f'intent {rows[1]["sik"]}: row says state="APPLIED", the chain says "UNKNOWN"' in p
               for p in report.problems)  # fmt: skip
    assert any("intents.jsonl does not match the sha256" in p for p in report.problems)


def test_the_cli_exports_a_tar_and_verifies_it_without_ledger_or_redis(ledger: sqlite3.Connection,
                                                                       ledger_path: Path, tmp_path: Path) -> None:
    _refund(ledger, 1, applied=True)
    cli = [sys.executable, "-m", "interlock.cli", "audit"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_") and k != "REDIS_URL"}
    tar = tmp_path / "bundle.tar"
    out = subprocess.run([*cli, "export", "--out", str(tar), "--ledger", str(ledger_path)], env=env,
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert "exported" in out.stdout and tarfile.is_tarfile(tar)
    ledger.close()
    ledger_path.unlink()  # standalone: the ledger is gone
    ok = subprocess.run([*cli, "verify", "--bundle", str(tar)], env=env, capture_output=True, text=True)
    assert ok.returncode == 0 and "bundle ok" in ok.stdout, ok.stderr
    unpacked = tmp_path / "unpacked"
    shutil.unpack_archive(tar, unpacked)
    lines = _lines(unpacked)
    del lines[1]
    _write(unpacked, lines)
    bad = subprocess.run([*cli, "verify", "--bundle", str(unpacked)], env=env, capture_output=True, text=True)
    assert bad.returncode == 1 and "audit chain broken at seq 2" in bad.stderr
