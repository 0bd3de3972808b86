"""`make mutation`'s report: mutmut's verdict on every mutant of the money-path core, scored per module.

mutmut (pinned in the `mutation` extra, configured under [tool.mutmut] in pyproject.toml) copies the tree to
./mutants, rewrites each function of the modules it mutates into many variants, and runs the fast in-process
tests against each variant. This module reads its per-file verdicts, scores each module, and accounts for
every mutant that no test killed: it is either listed in chaos/mutation_equivalent.yaml with the line it
writes and a one-line reason it cannot change behaviour, or it is reported as a gap. An equivalence entry
whose mutant no longer writes that line (the code changed) is reported as stale, never silently applied.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from interlock.results import commit_id, write_section

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENT = Path(__file__).with_name("mutation_equivalent.yaml")
GOAL = 0.90  # of the mutants in ledger/ and in rail_worker/, killed (equivalent ones set aside)
GOAL_PACKAGES = ("ledger", "rail_worker")

# mutmut's exit codes (mutmut.stats.status_by_exit_code), folded into the four outcomes that matter here.
_KILLED = {1, 3, 24, 36, 152, 255, -24, 37}  # a test failed, pytest errored, the mutant hung, or mypy caught it
_SURVIVED = {0}
_NO_TESTS = {5, 33}  # no selected test reaches the function: a survivor by another name


@dataclass(frozen=True)
class Verdict:
    module: str  # e.g. ledger/intents.py
    mutant: str  # e.g. ledger.intents.x_apply__mutmut_12
    outcome: str  # killed | survived | no tests | not run


@dataclass(frozen=True)
class Equivalent:
    mutant: str
    line: str  # the line the mutant writes, stripped
    why: str


def outcome_of(exit_code: int | None) -> str:
    if exit_code is None:
        return "not run"
    if exit_code in _KILLED:
        return "killed"
    if exit_code in _SURVIVED:
        return "survived"
    if exit_code in _NO_TESTS:
        return "no tests"
    return "survived"  # suspicious, segfault, skipped: not a kill, so counted against the score


def read_verdicts(mutants_dir: Path) -> list[Verdict]:
    verdicts = []
    for meta in sorted(mutants_dir.rglob("*.py.meta")):
        module = meta.relative_to(mutants_dir).as_posix().removesuffix(".meta")
        codes = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
        verdicts += [Verdict(module, name, outcome_of(code)) for name, code in sorted(codes.items(), key=_natural)]
    return verdicts


def _natural(item: tuple[str, object]) -> tuple[str, int]:
    head, _, number = item[0].rpartition("__mutmut_")
    return head, int(number) if number.isdigit() else 0


def mutated_line(mutant: str, module: str) -> str:
    """The first line the mutant writes (mutmut's own diff of the function), stripped."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    diff = get_diff_for_mutant(mutant, path=module)
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return added[0] if added else "(a line removed)"


def read_equivalents(path: Path = EQUIVALENT) -> dict[str, Equivalent]:
    if not path.exists():
        return {}
    entries = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    return {e["mutant"]: Equivalent(e["mutant"], str(e["line"]).strip(), e["why"]) for e in entries}


@dataclass
class ModuleScore:
    module: str
    counts: Counter[str]
    equivalent: int

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def score(self) -> float:
        """Killed, of the mutants that could have been killed (equivalent ones set aside)."""
        judged = self.total - self.equivalent - self.counts["not run"]
        return self.counts["killed"] / judged if judged else 1.0


def score(verdicts: list[Verdict], equivalent: set[str]) -> list[ModuleScore]:
    modules: dict[str, ModuleScore] = {}
    for v in verdicts:
        entry = modules.setdefault(v.module, ModuleScore(v.module, Counter(), 0))
        entry.counts[v.outcome] += 1
        entry.equivalent += v.outcome != "killed" and v.mutant in equivalent
    return list(modules.values())


def package_score(scores: list[ModuleScore], package: str) -> ModuleScore:
    counts: Counter[str] = Counter()
    equivalent = 0
    for s in scores:
        if s.module.startswith(package + "/"):
            counts += s.counts
            equivalent += s.equivalent
    return ModuleScore(package + "/", counts, equivalent)


def report(scores: list[ModuleScore], gaps: list[tuple[Verdict, str]], kept: list[tuple[Equivalent, str]],
           stale: list[Equivalent]) -> str:  # fmt: skip
    lines = [
        "## Mutation testing (mutmut, money-path core)",
        "",
        f"Command: `make mutation` at {commit_id()}. Evidence: **in-process unit tests** (tests/ledger, "
        "tests/rail_worker, tests/reconciler, tests/engine/test_send_side_fences.py and the gate tests) against "
        "every mutant mutmut makes of the modules below (pyproject.toml `[tool.mutmut]`). Log-message lines are "
        "not mutated. Score = killed / (mutants - equivalent); a mutant no selected test reaches counts as a "
        "survivor.",
        "",
        "| module | mutants | killed | survived | no tests | equivalent | score |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in sorted(scores, key=lambda s: s.module):
        c = s.counts
        lines.append(f"| {s.module} | {s.total} | {c['killed']} | {c['survived']} | {c['no tests']} | "
                     f"{s.equivalent} | {s.score:.1%} |")  # fmt: skip
    lines.append("")
    for package in GOAL_PACKAGES:
        p = package_score(scores, package)
        met = "met" if p.score >= GOAL else "NOT met"
        raw = p.counts["killed"] / p.total if p.total else 1.0
        lines.append(f"- `{package}/`: {p.counts['killed']} killed of {p.total} mutants, {p.equivalent} equivalent set "
                     f"aside = **{p.score:.1%}** (goal {GOAL:.0%}: {met}); counting the equivalent ones as survivors: "
                     f"{raw:.1%}")  # fmt: skip
    everything = ModuleScore("all", sum((s.counts for s in scores), Counter()), sum(s.equivalent for s in scores))
    lines.append(f"- all modules: {everything.counts['killed']} killed of {everything.total} mutants, "
                 f"{everything.equivalent} equivalent set aside = {everything.score:.1%}")  # fmt: skip
    lines += ["", f"Survivors with no test yet ({len(gaps)}):", ""]
    lines += [f"- `{v.mutant}` ({v.outcome}): `{line}`" for v, line in gaps] or ["- none"]
    lines += ["", f"Equivalent survivors ({len(kept)}), from chaos/mutation_equivalent.yaml:", ""]
    lines += [f"- `{e.mutant}`: `{line}` — {e.why}" for e, line in kept] or ["- none"]
    if stale:
        lines += ["", f"Stale equivalence entries ({len(stale)}; the mutant no longer writes that line):", ""]
        lines += [f"- `{e.mutant}`: expected `{e.line}`" for e in stale]
    return "\n".join(lines)


@dataclass
class Accounting:
    gaps: list[tuple[Verdict, str]]  # survivors no test kills and no entry explains, with the line each writes
    kept: list[tuple[Equivalent, str]]  # survivors explained as equivalent
    stale: list[Equivalent]  # entries whose mutant now writes another line, or is killed, or is gone


def account(verdicts: list[Verdict], equivalents: dict[str, Equivalent],
            line_of: Callable[[Verdict], str]) -> Accounting:  # fmt: skip
    result = Accounting([], [], [])
    seen = set()
    for v in verdicts:
        if v.outcome == "killed":
            continue
        line = line_of(v)
        entry = equivalents.get(v.mutant)
        if entry is not None and entry.line == line:
            result.kept.append((entry, line))
            seen.add(v.mutant)
        else:
            result.gaps.append((v, line))
    result.stale = [e for name, e in equivalents.items() if name not in seen]
    return result


def main() -> int:
    os.chdir(ROOT)  # mutmut reads its copies by paths relative to the project root
    mutants_dir = ROOT / "mutants"
    if not mutants_dir.is_dir():
        print("no ./mutants directory: run `make mutation` (it runs mutmut first)", file=sys.stderr)
        return 2
    verdicts = read_verdicts(mutants_dir)
    books = account(verdicts, read_equivalents(), lambda v: mutated_line(v.mutant, v.module))
    scores = score(verdicts, {e.mutant for e, _ in books.kept})
    body = report(scores, books.gaps, books.kept, books.stale)
    write_section("mutation", body)
    print(body.split("Survivors with no test yet")[0])
    missed = [p for p in GOAL_PACKAGES if package_score(scores, p).score < GOAL]
    return 1 if missed or books.stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
