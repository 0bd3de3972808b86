"""The operator's own look at the rail, read-only: page the list for our stamp to the end (the same
pager the reconciler uses, so "absent" means the same thing everywhere), or fetch one named entity."""

from __future__ import annotations

from dataclasses import dataclass

from ledger.intents import Intent
from ledger.queries import PAYOUT_TOOL
from rails.pager import PageResult, find_stamped
from rails.razorpay import RailError, RazorpayClient

REFUND_TOOL = "create_refund"


def page_for_stamp(rail: RazorpayClient, intent: Intent) -> PageResult:
    """Page to the end for a stamped entity on the intent's terms; stamped ones on other terms are passed over
    and named (ADR 0016): they are not this intent applied, and a person resolving it needs to see them."""
    return find_stamped(rail, intent.tool, intent.subject_id, intent.sik,
                        accept=lambda raw: intent.mismatch(raw) is None,
                        account_number=intent.params.get("account_number"))  # fmt: skip


@dataclass(frozen=True, slots=True)
class EntityCheck:
    ok: bool
    detail: str


def check_entity(rail: RazorpayClient, intent: Intent, entity_id: str) -> EntityCheck:
    """Does *entity_id* exist on the rail, carry this intent's stamp, and match its subject and amount?"""
    try:
        if intent.tool == REFUND_TOOL:
            refund = rail.fetch_refund(entity_id)
            stamped, amount, raw = refund.carries_stamp(intent.sik), refund.amount, refund.raw
            subject_ok = refund.payment_id == intent.subject_id
        elif intent.tool == PAYOUT_TOOL:
            payout = rail.fetch_payout(entity_id)
            stamped, amount, raw = payout.carries_stamp(intent.sik), payout.amount, payout.raw
            subject_ok = payout.fund_account_id == intent.subject_id
        else:
            settlement = rail.fetch_instant_settlement(entity_id)
            stamped, amount, subject_ok = settlement.carries_stamp(intent.sik), settlement.amount_requested, True
            raw = settlement.raw
    except RailError as exc:
        return EntityCheck(False, f"the rail did not return {entity_id}: {exc}")
    if not stamped:
        return EntityCheck(False, f"{entity_id} does not carry the stamp of {intent.sik} (notes.interlock_sik/receipt)")
    if not subject_ok:
        return EntityCheck(False, f"{entity_id} belongs to another payment or payee than {intent.subject_id}")
    differs = intent.mismatch(raw)
    if differs is not None:  # the one rule of ADR 0016: amount (a full-balance settlement's within the balance read)
        return EntityCheck(False, f"{entity_id} is on other terms than the intent: {differs['entity_terms']} "
                                  f"against {differs['intent_terms']}")
    return EntityCheck(True, f"{entity_id} carries the stamp of {intent.sik} for {amount} (checked on the rail)")
