"""Invariant mutants: small patches to a temporary copy of the tree, each breaking one guarantee, and the
check that catches it — a chaos trial's verdict or a test of the suite (SPEC §5, §13).

Production code carries no hook for them: a mutant is applied by copying the packages (and the tests) to a
directory of their own and editing the copy there. The processes of a trial run the copy through
PYTHONPATH, with PYTHONSAFEPATH so the working directory cannot shadow it; a test runs with the copy as its
root. A mutant whose text no longer matches the code fails loudly: it would otherwise test nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("interlock", "ingress", "gate_workers", "rail_worker", "reconciler", "ledger", "rails", "sandbox",
            "chaos", "bench", "ops", "console", "deploy", "tests")  # fmt: skip
_building = threading.Lock()  # trials run in parallel threads: one copy per mutant, made once


@dataclass(frozen=True)
class Edit:
    path: str  # relative to the project root
    find: str  # must occur exactly once
    replace: str


@dataclass(frozen=True)
class Mutant:
    name: str
    breaks: str  # the guarantee, in words
    edits: tuple[Edit, ...]
    cell: str | None = None  # the chaos cell whose verdict must catch it, with ...
    violation: str | None = None  # ... this violation code
    tests: tuple[str, ...] = ()  # or the tests (pytest node ids) of which one must fail


@dataclass
class Caught:
    mutant: str
    caught: bool
    by: str  # what caught it, or why it was not
    seconds: float


MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    Mutant("I1_one_intent_per_sik", "I1: at most one intent per (merchant_id, sik)", (
        # A second proposal of the same operation starts the intent over instead of finding it: two creators.
        Edit("ledger/intents.py", "ON CONFLICT (merchant_id, sik) DO NOTHING",
             "ON CONFLICT (merchant_id, sik) DO UPDATE SET state = 'PROPOSED', updated_at = excluded.updated_at"),
    ), tests=("tests/ledger",)),
    Mutant("I2_commit_before_call", "I2: no money call before its IN_FLIGHT row is committed", (
        # The admitted intent's request sent from inside the admission's transaction, before its commit.
        Edit("rail_worker/execute.py",
             '    failpoint("rail.before_wal")\n    conn.execute("SAVEPOINT attempt_start")\n',
             '    failpoint("rail.before_wal")\n'
             "    call_rail(rt, intent, rail_request(intent))\n"
             '    conn.execute("SAVEPOINT attempt_start")\n'),
    ), tests=("tests/engine/test_concurrency.py::test_two_hundred_refunds_in_flight_together_each_commit_before_"
              "they_leave",)),
    Mutant("I2_commit_before_retry_call", "I2 on an execute job (a retry, a released hold): no money call before "
           "its IN_FLIGHT row is committed", (
        # The intent's request sent before begin_attempt's own transaction, while the row is still AUTHORIZED.
        Edit("rail_worker/execute.py", '    failpoint("rail.before_wal")\n    begun = rt.write(',
             '    failpoint("rail.before_wal")\n'
             "    _early = rt.write(lambda conn: intents.require_intent(conn, merchant_id, sik))\n"
             "    call_rail(rt, _early, rail_request(_early))\n"
             "    begun = rt.write("),
    ), tests=("tests/engine/test_concurrency.py::test_a_retried_refund_commits_in_flight_before_it_leaves",)),
    Mutant("I3_timeout_is_a_refusal", "I3: a timeout, reset or 5xx is UNKNOWN, never a definite answer", (
        Edit("rail_worker/classify.py",
             '    else:\n        reason = "RAIL_AMBIGUOUS"\n',
             "    else:\n"
             '        return Classified(Event.RAIL_REJECTED, "REJECTED", http_status=exc.http_status,'
             ' reason_code="RAIL_REJECTED")\n'),
    ), tests=("tests/engine/test_engine_happy_and_ambiguous.py::test_ambiguous_504_after_apply_is_reconciled_to_"
              "applied",)),
    Mutant("I4_applied_not_absorbing", "I4: APPLIED and BLOCKED are absorbing", (
        Edit("ledger/schema.sql", "WHEN OLD.state IN ('APPLIED', 'BLOCKED') AND NEW.state IS NOT OLD.state",
             "WHEN 0"),
    ), tests=("tests/ledger",)),
    Mutant("I5_attempt_seq_stands_still", "I5: attempt_seq strictly increases per intent", (
        Edit("ledger/intents.py", '        assignments += ", attempt_seq = attempt_seq + 1"',
             '        assignments += ", attempt_seq = attempt_seq"'),
    ), tests=("tests/ledger",)),
    Mutant("I6_chain_not_linked", "I6: a tamper-evident, gapless audit chain", (
        Edit("ledger/audit.py", "    digest = _record_hash_of(prev_hash, seq, ts, kind, payload_json)",
             "    digest = _record_hash_of(GENESIS_HASH, seq, ts, kind, payload_json)"),
    ), tests=("tests/ledger/test_audit.py::test_intact_chain_verifies",)),
    Mutant("record_replayed_id", "the rail worker records only an entity carrying its own stamp", (
        Edit("rail_worker/classify.py", "    if not entity.carries_stamp(sik):", "    if False:"),
    # Since ADR 0016 the terms check stands behind the stamp check: the replayed entity (another refund) is not
    # recorded APPLIED but quarantines an intent the reconciler should have settled — a person paged for nothing.
    ), cell="rail.after_commit_before_ack|dup_response", violation="NEVER_UNKNOWN"),
    Mutant("blind_retry", "no second send after an ambiguous answer (I3)", (
        Edit("rail_worker/execute.py", '    failpoint("rail.after_call_before_commit")\n',
             "    if result.event is Event.RAIL_AMBIGUOUS:\n"
             '        request = {**request, "idempotency_key": f"mut_{intent.attempt_seq}_{now_ms()}",'
             ' "receipt": None}\n'
             "        result = call_rail(rt, intent, request)\n"
             '    failpoint("rail.after_call_before_commit")\n'),
    ), cell="rail.after_commit_before_ack|ambiguous_504", violation="NEVER_TWO"),
)}  # fmt: skip


def build(mutant: Mutant, base: Path) -> Path:
    """A copy of the tree with *mutant* applied, under *base* (made once per mutant and base)."""
    with _building:
        return _build(mutant, base / f"mutant-{mutant.name}")


def _build(mutant: Mutant, tree: Path) -> Path:
    ready = tree / ".applied"
    if ready.exists():
        return tree
    shutil.rmtree(tree, ignore_errors=True)
    for relative in _tracked_files():
        target = tree / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, target)
    for edit in mutant.edits:
        target = tree / edit.path
        text = target.read_text(encoding="utf-8")
        found = text.count(edit.find)
        if found != 1:
            raise ValueError(f"mutant {mutant.name}: {edit.path} holds {found} copies of {edit.find!r}, "
                             "not one: the code moved, update chaos/mutants.py")  # fmt: skip
        target.write_text(text.replace(edit.find, edit.replace), encoding="utf-8")
    ready.touch()
    return tree


def _tracked_files() -> list[str]:
    """The project as committed (and as edited in the working tree): what the tests may read, from the packages
    to deploy/'s example mandate. Without git, every file under the packages."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, timeout=60)
    if listed.returncode == 0:
        return [name for name in listed.stdout.decode("utf-8").split("\0")
                if name and (ROOT / name).is_file() and "node_modules" not in name]  # fmt: skip
    return [str(path.relative_to(ROOT)) for top in PACKAGES for path in (ROOT / top).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts]  # fmt: skip


def env_for(tree: Path) -> dict[str, str]:
    """What a process needs to run the mutated copy instead of the installed tree."""
    return {"PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"}


def check(mutant: Mutant, base: Path, *, seed: int = 4242,
          run_cell: Callable[[str, Path, int], list[str]] | None = None) -> Caught:  # fmt: skip
    """Apply *mutant* and run what must catch it. *run_cell* (cell key, tree, seed) -> violations runs a chaos
    trial of that cell against the tree (chaos.trial, passed in by the caller)."""
    started = time.monotonic()
    tree = build(mutant, base)
    if mutant.cell is not None:
        assert run_cell is not None and mutant.violation is not None
        violations = run_cell(mutant.cell, tree, seed)
        hit = [v for v in violations if mutant.violation in v]
        by = (f"chaos cell {mutant.cell}: {hit[0][:160]}" if hit
              else f"chaos cell {mutant.cell} saw {violations or 'no violation'}")  # fmt: skip
        return Caught(mutant.name, bool(hit), by, round(time.monotonic() - started, 1))
    control = _control(mutant.tests, base)
    if control is not None:
        return Caught(mutant.name, False, f"the tests fail without the mutant too: {control}",
                      round(time.monotonic() - started, 1))  # fmt: skip
    proc = _pytest(mutant.tests, tree)
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED ")]
    # Exit status 1 is "tests failed"; anything else (2: collection error, 4: usage) proves nothing.
    caught = proc.returncode == 1 and bool(failed)
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-200:]
    by = f"{failed[0][7:][:160]}" if caught else f"the tests did not fail (exit {proc.returncode}: {summary})"
    return Caught(mutant.name, caught, by, round(time.monotonic() - started, 1))


_controls: dict[tuple[str, ...], str | None] = {}  # tests -> why they fail unmutated (None: they pass)


def _control(tests: tuple[str, ...], base: Path) -> str | None:
    """Run *tests* on an unmutated copy, once per process: a mutant is caught only by tests that pass without it."""
    if tests not in _controls:
        tree = build(Mutant("control", "nothing", ()), base)
        proc = _pytest(tests, tree)
        last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-200:]
        _controls[tests] = None if proc.returncode == 0 else f"exit {proc.returncode}: {last}"
    return _controls[tests]


def _pytest(tests: tuple[str, ...], tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests], cwd=tree,
                          env={**os.environ, **env_for(tree)}, capture_output=True, text=True, timeout=900)  # fmt: skip


def summarise(results: list[Caught], *, command: str, commit: str) -> str:
    caught = sum(r.caught for r in results)
    lines = [
        "## Invariant mutants (hook-free: patched copies of the tree)",
        "",
        f"Evidence: **real process** chaos trials and the project's own tests, run against a copy of the tree with "
        f"one guarantee broken (chaos/mutants.py). Commit `{commit}`. Reproduce: `{command}`.",
        "",
        f"invariant mutants: {caught}/{len(results)} caught",
        "",
        "| mutant | what it breaks | caught | by | seconds |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(f"| `{r.mutant}` | {MUTANTS[r.mutant].breaks} | {'yes' if r.caught else '**no**'} | "
                     f"{r.by.replace('|', '/')} | {r.seconds} |")  # fmt: skip
    return "\n".join(lines) + "\n"
