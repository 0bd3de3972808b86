"""Must type-check: HOLD and BLOCK are what a purpose judge may say."""

from __future__ import annotations

from gate_workers.gates.g5_purpose import Objection
from interlock.messages import Verdict


def hold() -> Objection:
    return Objection(Verdict.HOLD, "G5_OFF_PURPOSE")


def block() -> Objection:
    return Objection(Verdict.BLOCK, "G5_OFF_PURPOSE")
