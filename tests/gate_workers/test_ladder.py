from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from gate_workers.context import GateContext, ResolvedAction
from gate_workers.ladder import LADDER, evaluate
from interlock.messages import Verdict
from interlock.verdicts import GateResult, allow, block, hold, meet
from tests.gate_workers.factories import context, refund_action

ROOT = Path(__file__).resolve().parents[2]


def test_meet_is_the_lattice_minimum() -> None:
    A, H, B = Verdict.ALLOW, Verdict.HOLD, Verdict.BLOCK
    assert meet([]) is A
    assert meet([A, A]) is A
    assert meet([A, H, A]) is H
    assert meet([H, B, A]) is B
    assert meet([B, H]) is B


def test_ladder_order_is_g1_to_g6() -> None:
    assert [name for name, _ in LADDER] == ["G1", "G2", "G3", "G4", "G5", "G6"]


def test_every_gate_runs_after_a_block_and_all_results_are_recorded(ledger: sqlite3.Connection) -> None:
    seen: list[str] = []

    def gate(name: str, result: GateResult):  # type: ignore[no-untyped-def]
        def check(action: ResolvedAction, ctx: GateContext) -> GateResult:
            seen.append(name)
            return result
        return check

    ladder = [("X1", gate("X1", block("X1_NO"))), ("X2", gate("X2", hold("X2_WAIT"))), ("X3", gate("X3", allow("OK")))]
    result = evaluate(refund_action(), context(ledger), ladder)
    assert seen == ["X1", "X2", "X3"]
    assert (result.verdict, result.reason_code) == (Verdict.BLOCK, "X1_NO")
    assert [r.reason_code for r in result.results] == ["X1_NO", "X2_WAIT", "OK"]


def test_real_ladder_on_an_injected_over_refund(ledger: sqlite3.Connection) -> None:
    result = evaluate(refund_action(4800000), context(ledger))
    assert result.verdict is Verdict.BLOCK
    assert result.reason_code == "G2_EXCEEDS_REFUNDABLE"
    assert {r.gate for r in result.results} == {"G1", "G2", "G3", "G4", "G5", "G6"}


def test_real_ladder_allows_a_benign_refund(ledger: sqlite3.Connection) -> None:
    result = evaluate(refund_action(50000), context(ledger))
    assert (result.verdict, result.reason_code) == (Verdict.ALLOW, "ALLOWED")


def test_a_type_checker_rejects_a_purpose_judge_that_returns_allow() -> None:
    """G5's verdict type admits only HOLD or BLOCK: mypy must refuse ALLOW (and accept HOLD)."""
    bad = ROOT / "tests" / "typing" / "g5_cannot_allow.py"
    good = ROOT / "tests" / "typing" / "g5_can_hold.py"
    refused = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", str(bad)],
                             capture_output=True, text=True, cwd=ROOT, timeout=300)  # fmt: skip
    assert refused.returncode == 1, refused.stdout
    assert "g5_cannot_allow.py:" in refused.stdout and "Verdict.ALLOW" in refused.stdout
    accepted = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", str(good)],
                              capture_output=True, text=True, cwd=ROOT, timeout=300)  # fmt: skip
    assert accepted.returncode == 0, accepted.stdout
