"""G4 exactly-once: the SIK names the operation; an existing intent means this call is a repeat.

G4 never blocks: a repeat is answered with the existing intent's state by the rail worker's
primary-key admit, whatever the other gates say about it as a new action (SPEC §10). A repeat of a
FAILED_TERMINAL or CONFIRMED_NOT_APPLIED intent that passes every gate may reopen it.
"""

from __future__ import annotations

from gate_workers.context import GateContext, ResolvedAction
from interlock.verdicts import GateResult, allow
from ledger.intents import get_intent

NAME = "G4"


def check(action: ResolvedAction, ctx: GateContext) -> GateResult:
    if action.sik is None:
        return allow("G4_NO_KEY")
    existing = get_intent(ctx.ledger, action.merchant_id, action.sik)
    if existing is not None:
        return allow("G4_DUPLICATE", sik=action.sik, existing_state=existing.state.value)
    return allow("G4_NEW", sik=action.sik)
