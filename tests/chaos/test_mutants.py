"""Each invariant mutant — one guarantee broken in a patched copy of the tree, with no hook in production
code — is caught by the chaos verdict or by the suite (issue 17, SPEC §5). Real processes and real tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.mutants import MUTANTS, ROOT, Edit, Mutant, build, check
from chaos.trial import run_mutant_cell

# Every mutant is checked by `make chaos` (`interlock chaos --mutants`, which writes RESULTS.md's mutant section), and
# the seeded simulation finds them again in tests/simulation. Here one mutant caught by a chaos cell's verdict and one
# caught by the suite keep both ways of catching honest, inside make test's time.
REPRESENTATIVE = ("blind_retry", "I6_chain_not_linked")


@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_the_mutant_is_caught(name: str, tmp_path: Path) -> None:
    result = check(MUTANTS[name], tmp_path, seed=4242, run_cell=run_mutant_cell)
    assert result.caught, result


def test_a_mutant_changes_only_its_copy(tmp_path: Path) -> None:
    mutant = MUTANTS["I6_chain_not_linked"]
    tree = build(mutant, tmp_path)
    [edit] = mutant.edits
    assert edit.replace in (tree / edit.path).read_text(encoding="utf-8")
    assert edit.replace not in (ROOT / edit.path).read_text(encoding="utf-8")
    assert edit.find in (ROOT / edit.path).read_text(encoding="utf-8")


def test_a_mutant_whose_text_moved_is_refused_not_silently_skipped(tmp_path: Path) -> None:
    stale = Mutant("stale", "nothing", (Edit("ledger/audit.py", "no such line in the audit code", "x"),),
                   tests=("tests/ledger",))  # fmt: skip
    with pytest.raises(ValueError, match="holds 0 copies"):
        build(stale, tmp_path)


def test_a_harmless_edit_is_reported_as_not_caught(tmp_path: Path) -> None:
    harmless = Mutant("harmless", "nothing", (Edit("ledger/audit.py", '"""', '"""\n# a comment\n'),),
                      tests=("tests/ledger/test_audit.py",))  # fmt: skip
    with pytest.raises(ValueError):  # '"""' is not unique: the same refusal guards against ambiguous edits
        build(harmless, tmp_path)
    comment = Mutant("comment", "nothing", (Edit("ledger/audit.py", "def append(", "# mutated\ndef append("),),
                     tests=("tests/ledger/test_audit.py::test_intact_chain_verifies",))  # fmt: skip
    result = check(comment, tmp_path)
    assert not result.caught and "did not fail" in result.by
