"""Fail when any gate module exceeds its line budget (STYLE.md: each gate is one module under 120 lines).

Safety logic that grows past the budget must be split into helpers with their own tests, so the
gate spine stays small enough to audit by reading.
"""

from __future__ import annotations

import sys
from pathlib import Path

BUDGET = 120
GATES = Path(__file__).resolve().parent.parent / "gate_workers" / "gates"


def main() -> int:
    over = []
    for module in sorted(GATES.glob("g[0-9]_*.py")):
        lines = len(module.read_text(encoding="utf-8").splitlines())
        if lines > BUDGET:
            over.append(f"{module.relative_to(GATES.parent.parent)}: {lines} lines (budget {BUDGET})")
    for line in over:
        print(line, file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
