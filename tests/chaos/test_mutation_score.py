"""The mutation report (chaos/mutation_score.py): how mutmut's verdicts become a score per module, and how every
survivor is accounted for. Pure unit tests over mutmut's on-disk format; `make mutation` runs the real thing."""

from __future__ import annotations

import json
from pathlib import Path

from chaos.mutation_score import Equivalent, Verdict, account, outcome_of, package_score, read_verdicts, report, score


def _meta(root: Path, module: str, codes: dict[str, int | None]) -> None:
    path = root / (module + ".meta")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"exit_code_by_key": codes}), encoding="utf-8")


def test_exit_codes_fold_into_killed_survived_and_no_tests() -> None:
    assert [outcome_of(c) for c in (1, 3, 36, 37, 0, 5, 33, None, 99)] == [
        "killed", "killed", "killed", "killed", "survived", "no tests", "no tests", "not run", "survived"]  # fmt: skip


def test_verdicts_are_read_per_module_in_mutant_order(tmp_path: Path) -> None:
    _meta(tmp_path, "ledger/limits.py", {"ledger.limits.x_f__mutmut_10": 0, "ledger.limits.x_f__mutmut_2": 1})
    _meta(tmp_path, "rail_worker/admit.py", {"rail_worker.admit.x_g__mutmut_1": 33})
    got = read_verdicts(tmp_path)
    assert got == [
        Verdict("ledger/limits.py", "ledger.limits.x_f__mutmut_2", "killed"),
        Verdict("ledger/limits.py", "ledger.limits.x_f__mutmut_10", "survived"),
        Verdict("rail_worker/admit.py", "rail_worker.admit.x_g__mutmut_1", "no tests"),
    ]


def test_an_equivalent_survivor_is_set_aside_only_while_it_writes_the_line_it_was_judged_on() -> None:
    verdicts = [Verdict("ledger/a.py", "m1", "survived"), Verdict("ledger/a.py", "m2", "survived"),
                Verdict("ledger/a.py", "m3", "killed"), Verdict("ledger/a.py", "m4", "no tests")]  # fmt: skip
    lines = {"m1": "x = 1", "m2": "y = None", "m4": "z = 2"}
    equivalents = {"m1": Equivalent("m1", "x = 1", "same value"), "m2": Equivalent("m2", "y = 0", "moved"),
                   "m9": Equivalent("m9", "gone", "the mutant is gone")}  # fmt: skip
    books = account(verdicts, equivalents, lambda v: lines[v.mutant])
    assert [e.mutant for e, _ in books.kept] == ["m1"]
    assert [(v.mutant, line) for v, line in books.gaps] == [("m2", "y = None"), ("m4", "z = 2")]
    assert sorted(e.mutant for e in books.stale) == ["m2", "m9"], "a changed line or a vanished mutant is stale"


def test_the_score_sets_equivalents_aside_and_counts_no_tests_against_the_module() -> None:
    verdicts = [Verdict("ledger/a.py", f"k{i}", "killed") for i in range(8)]
    verdicts += [Verdict("ledger/a.py", "s1", "survived"), Verdict("ledger/a.py", "n1", "no tests"),
                 Verdict("rail_worker/b.py", "k9", "killed")]  # fmt: skip
    scores = score(verdicts, {"s1"})
    ledger = package_score(scores, "ledger")
    assert (ledger.total, ledger.equivalent, ledger.counts["no tests"]) == (10, 1, 1)
    assert ledger.score == 8 / 9
    assert package_score(scores, "rail_worker").score == 1.0
    text = report(scores, [(verdicts[-2], "n = None")], [], [])
    assert ("`ledger/`: 8 killed of 10 mutants, 1 equivalent set aside = **88.9%** (goal 90%: NOT met); "
            "counting the equivalent ones as survivors: 80.0%") in text
    assert "`rail_worker/`: 1 killed of 1 mutants, 0 equivalent set aside = **100.0%** (goal 90%: met)" in text
    assert "- `n1` (no tests): `n = None`" in text
