"""An intent as the agent sees it: the SPEC §10 result contract, built from a ledger row."""

from __future__ import annotations

from interlock.messages import IntentTerms, Outcome, caller_action_for
from ledger.intents import Intent


def outcome_from_intent(
    intent: Intent, *, request_id: str | None, replayed: bool, reason_code: str | None = None
) -> Outcome:
    return Outcome(
        request_id=request_id,
        state=intent.state.value,
        sik=intent.sik,
        intent=IntentTerms(**intent.terms()),
        rail_entity_id=intent.rail_entity_id,
        reason_code=reason_code if reason_code is not None else intent.reason_code,
        caller_action=caller_action_for(intent.state.value),
        replayed=replayed,
    )
