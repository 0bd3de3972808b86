"""Must NOT type-check: a purpose judge cannot express ALLOW (tests/gate_workers/test_ladder.py)."""

from __future__ import annotations

from gate_workers.gates.g5_purpose import Objection
from interlock.messages import Verdict


def upgrade() -> Objection:
    return Objection(Verdict.ALLOW, "MODEL_SAYS_FINE")
