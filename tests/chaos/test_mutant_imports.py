"""A mutant run imports the copy it patched, never the installed tree (chaos/mutants.py, simulation/mutants.py).

The copy is put first on PYTHONPATH (chaos.mutants.env_for), but that alone is not enough under pytest: with
`--import-mode=importlib` and tests/ not a package, a test directory holding an `__init__.py` is imported under its
own name. tests/webhooks/__init__.py made tests/webhooks the module `webhooks`; `webhooks.receiver`, then missing
from that package, was found by the editable install's finder (__editable___interlock_0_1_0_finder.py) in the
checkout the venv was installed from. So a defect planted in webhooks/ ran the tests against unpatched code, and
passed. Each test below plants a module that raises on import in a copy and asks the runner to import it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.mutants import ROOT, Edit, Mutant, _pytest, build
from simulation.mutants import _first_failing

FUTURE = "from __future__ import annotations\n"
MARK = "the patched copy was imported"


def _raising(path: str) -> Mutant:
    """A copy whose *path* raises on import, naming the file it was imported from."""
    raises = f'{FUTURE}\nraise RuntimeError(f"{MARK}: {{__file__}}")\n'
    return Mutant(f"raises-{Path(path).stem}", "nothing: a marker", (Edit(path, FUTURE, raises),))


@pytest.mark.parametrize(("module", "tests"), [
    ("webhooks/signature.py", "tests/webhooks/test_receiver.py"),  # the package the report named
    ("reconciler/inbox.py", "tests/reconciler/test_inbox_reader.py"),  # another, with a test directory of its name
])  # fmt: skip
def test_a_test_run_on_a_mutant_imports_the_copy_s_module(tmp_path: Path, module: str, tests: str) -> None:
    tree = build(_raising(module), tmp_path)
    proc = _pytest(("--collect-only", tests), tree)  # what chaos.mutants.check runs for a mutant's tests
    patched = str(tree / module)
    assert proc.returncode == 2 and f"{MARK}: {patched}" in proc.stdout, (
        f"{tests} imported {module} from elsewhere than the copy {patched} (exit {proc.returncode}):\n"
        f"{proc.stdout[-1500:]}{proc.stderr[-500:]}")  # fmt: skip
    assert MARK not in (ROOT / module).read_text(encoding="utf-8")


def test_a_simulation_run_on_a_mutant_imports_the_copy_s_module(tmp_path: Path) -> None:
    tree = build(_raising("reconciler/inbox.py"), tmp_path)
    seed, why = _first_failing(tree, range(1, 2), [])  # the simulator's subprocess, as simulation.mutants.find runs it
    assert seed is None and f"{MARK}: {tree / 'reconciler' / 'inbox.py'}" in why, why


def test_no_directory_of_tests_is_a_package() -> None:
    """Under importlib mode a test directory with an `__init__.py` is imported by its own name — tests/webhooks as
    `webhooks`, shadowing the package it tests, or tests/engine as `engine`, its conftest a second module beside
    the tests.engine.conftest its tests import — so tests/ holds none: every test module is tests.<directory>.<file>."""
    packages = [str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("__init__.py")
                if "node_modules" not in path.parts]  # fmt: skip
    assert packages == []
