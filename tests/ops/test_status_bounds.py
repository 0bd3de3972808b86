"""`interlock status` shows the timing bounds the settlement path's residual risk depends on (ADR 0010),
as configured, each with what it bounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger.db import open_ledger
from ops.status_cli import status_command

CONFIGURED = {
    "INTERLOCK_RAIL_TIMEOUT_MS": "7000",
    "INTERLOCK_RECONCILE_MIN_DELAY_MS": "2500",
    "INTERLOCK_LEASE_TTL_MS": "20000",
    "INTERLOCK_SETTLEMENT_WINDOW_GRACE_MS": "600000",
    "INTERLOCK_DECISION_MAX_AGE_MS": "3600000",
    "INTERLOCK_CLOCK_SKEW_MS": "2000",
}


def run_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    ledger = tmp_path / "ledger.sqlite3"
    open_ledger(ledger).close()
    for name in ("REDIS_URL", "INTERLOCK_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)  # queue depths are not what this test is about
    result = CliRunner().invoke(status_command, list(args), env={"INTERLOCK_LEDGER": str(ledger), **CONFIGURED})
    assert result.exit_code == 0, result.output
    return result.output


def test_status_prints_each_bound_with_its_value_and_meaning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = run_status(tmp_path, monkeypatch).splitlines()
    bounds = {line.split("=")[0].strip(): line for line in lines[lines.index("timing bounds:") + 1:]}
    assert set(bounds) == set(CONFIGURED)
    timeout, delay = bounds["INTERLOCK_RAIL_TIMEOUT_MS"], bounds["INTERLOCK_RECONCILE_MIN_DELAY_MS"]
    assert timeout.startswith("  INTERLOCK_RAIL_TIMEOUT_MS=7000 ms: a money call is given up")
    assert "paid twice (ADR 0010)" in timeout
    assert "=2500 ms: " in delay and "lists lag" in delay
    assert "=20000 ms: " in bounds["INTERLOCK_LEASE_TTL_MS"] and "abandoned" in bounds["INTERLOCK_LEASE_TTL_MS"]
    assert "=600000 ms: " in bounds["INTERLOCK_SETTLEMENT_WINDOW_GRACE_MS"]
    assert "=3600000 ms: " in bounds["INTERLOCK_DECISION_MAX_AGE_MS"]
    assert "DECISION_EXPIRED" in bounds["INTERLOCK_DECISION_MAX_AGE_MS"]
    assert "=2000 ms: " in bounds["INTERLOCK_CLOCK_SKEW_MS"] and "ADR 0032" in bounds["INTERLOCK_CLOCK_SKEW_MS"]


def test_status_json_carries_the_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = json.loads(run_status(tmp_path, monkeypatch, "--json"))
    assert {k: v["ms"] for k, v in report["timing_bounds"].items()} == {k: int(v) for k, v in CONFIGURED.items()}
    assert all(v["bounds"] for v in report["timing_bounds"].values())
