"""G1's bound on the text an agent sends with money (mandate `free_text`, issue 47 item 4).

The narration a payout carries is printed on the payee's bank statement; a settlement's description and the notes
are kept on the rail's entity. An agent told by an injected instruction to "include the user's phone model" sends
it that way to any payee the mandate allows, so a mandate may bound it: each text's length and shape, the one
narration a named payee gets, and no narration at all to a payee on no list. The call is refused, never rewritten:
what the rail would record is always what the agent asked for.
"""

from __future__ import annotations

from typing import Any

from gate_workers.context import GateContext, ResolvedAction
from interlock.verdicts import GateResult, block

FREE_TEXT_REFUSED = "G1_FREE_TEXT_REFUSED"


def texts_of(params: dict[str, Any]) -> dict[str, str]:
    """Every text of a call's parameters that goes out with the money, by where it goes: the narration (a payout),
    the description (a settlement), and each note of the agent's own (`notes.<key>`)."""
    texts = {name: value for name in ("narration", "description") if isinstance(value := params.get(name), str)}
    notes = params.get("notes")
    if isinstance(notes, dict):
        texts.update((f"notes.{key}", value) for key, value in notes.items() if isinstance(value, str))
    return texts


def free_text_refusal(action: ResolvedAction, ctx: GateContext, *, listed: bool | None) -> GateResult | None:
    """The call refused when its text breaks its grant's free_text, else None. *listed* says whether a payout's
    payee is on the grant's lists (None: not a payout)."""
    grant = ctx.mandate.grant(action.tool) if ctx.mandate is not None else None
    rule = grant.free_text if grant is not None else None
    if rule is None:
        return None
    texts = texts_of(action.params)
    broken = rule.problem(texts)
    if broken is not None:
        where, why = broken
        return block(FREE_TEXT_REFUSED, field=where, rule=why)
    narration = texts.get("narration")
    fund_account = action.fund_account
    if narration is None or fund_account is None:
        return None
    fixed = rule.fixed.get(fund_account.id) or rule.fixed.get(fund_account.contact_id or "")
    if fixed is not None and narration != fixed:
        return block(FREE_TEXT_REFUSED, field="narration",
                     rule=f"this payee gets only the narration {fixed!r} (or none)")  # fmt: skip
    if fixed is None and listed is False and rule.unlisted == "none":
        return block(FREE_TEXT_REFUSED, field="narration",
                     rule="a payee on no list of the mandate gets no narration")  # fmt: skip
    return None
