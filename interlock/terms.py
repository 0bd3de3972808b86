"""Is a stamped rail entity what we asked for? (ADR 0016)

Our stamp (notes.interlock_sik, a refund's receipt) says an entity was created for a SIK; it does not say the rail
did what the intent asked. An entity counts as the intent's APPLIED only when its terms equal the intent's: a
refund's payment_id, amount and currency; a payout's fund_account_id, amount and currency; a settlement's requested
amount and currency (its subject is the balance, which the entity does not name). For a settle-full-balance intent
the amount the rail reports is what was settled: it must be positive and no more than the balance read the intent
was admitted with (its amount_minor). Any other stamped entity is a finding for a person (QUARANTINED), with both
sets of terms on the audit record.

Pure functions over the entity's raw dict, so the rail worker (its own answer, a fenced answer), the reconciler
(a list match) and the ledger (an attempt row's kept answer) judge by one rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from interlock.tools import PAYOUT_TOOL

REFUND_TOOL = "create_refund"
SETTLEMENT_SUBJECT = "balance"


def entity_terms(tool: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """The terms a rail entity states, in the shape of Intent.terms()' subject, amount and currency."""
    if tool == REFUND_TOOL:
        return {"subject": raw.get("payment_id"), "amount_minor": raw.get("amount"), "currency": raw.get("currency")}
    if tool == PAYOUT_TOOL:
        return {"subject": raw.get("fund_account_id"), "amount_minor": raw.get("amount"),
                "currency": raw.get("currency")}  # fmt: skip
    return {"subject": SETTLEMENT_SUBJECT, "amount_minor": raw.get("amount_requested"), "currency": raw.get("currency")}


def terms_mismatch(tool: str, intent_terms: Mapping[str, Any], raw: Mapping[str, Any], *,
                   full_balance: bool = False) -> dict[str, Any] | None:  # fmt: skip
    """None when the entity's terms are the intent's; otherwise both sets of terms and the fields that differ."""
    stated = entity_terms(tool, raw)
    amount = stated["amount_minor"]
    # A bool is an int to Python; an amount the rail states as one is not an amount.
    is_amount = isinstance(amount, int) and not isinstance(amount, bool)
    wanted = int(intent_terms["amount_minor"])
    if full_balance:
        amount_ok = is_amount and 0 < amount <= wanted
    else:
        amount_ok = is_amount and amount == wanted
    differ = [name for name, ok in (
        ("subject", stated["subject"] == intent_terms["subject"]),
        ("amount_minor", amount_ok),
        ("currency", stated["currency"] == intent_terms["currency"]),
    ) if not ok]  # fmt: skip
    if not differ:
        return None
    ours = {key: intent_terms[key] for key in ("subject", "amount_minor", "currency")}
    # The entity's terms go on the audit record, which holds no float: a float the rail stated is kept as its text.
    shown = {key: repr(value) if isinstance(value, float) else value for key, value in stated.items()}
    return {"intent_terms": {**ours, "full_balance": full_balance}, "entity_terms": shown, "differ": differ}
