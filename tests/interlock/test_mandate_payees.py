"""A create_payout grant's `payees.unlisted` (ADR 0034): `block` (the default) or `hold`; a mandate that does not
say it keeps the hash it had before the option existed, and holding unlisted payees needs someone to decide them."""

from __future__ import annotations

import pytest

from interlock.errors import MandateError
from interlock.mandate import parse_mandate

PAYOUT_MANDATE = """\
v: 1
mandate_id: mnd_payees
merchant_id: acc_PAYEES00001
agent_id: agent_payer
issued_at: 1700000000000
expires_at: 2000000000000
purpose: "Pay the two vendors named here"
scope:
  grants:
    create_payout:
      reversibility: irreversible
      value: {min_amount_minor: 100, max_amount_minor: 500000, currencies: [INR]}
      payees: {fund_account_ids: [fa_VENDORPAYEE001], contact_ids: [cont_VENDORCONTACT1]}
idempotency:
  create_payout: {window_ms: 86400000}
approval: {approvers: [ops_lead@example.com]}
rail: {account_number: "7878780080316316"}
"""
# Its hash as computed before `unlisted` existed (the commit before it): pinned, so the option can never silently
# re-hash — and so invalidate the signature of — a mandate that does not use it.
HASH_BEFORE_UNLISTED = "772fa5188e7dc6d651a20c1ca103a50d48b07d5c5abd5174db072ff8f15a0c37"
PAYEES_LINE = "payees: {fund_account_ids: [fa_VENDORPAYEE001], contact_ids: [cont_VENDORCONTACT1]}"


def with_payees(payees: str, text: str = PAYOUT_MANDATE) -> str:
    assert PAYEES_LINE in text
    return text.replace(PAYEES_LINE, f"payees: {payees}")


def refused(text: str) -> str:
    with pytest.raises(MandateError) as info:
        parse_mandate(text, source="m.yaml")
    return str(info.value)


def test_a_mandate_without_the_option_keeps_its_hash_and_block_is_its_default() -> None:
    before = parse_mandate(PAYOUT_MANDATE)
    assert before.mandate_hash == HASH_BEFORE_UNLISTED
    payees = before.grant("create_payout").payees  # type: ignore[union-attr]
    assert payees is not None and payees.unlisted == "block"
    explicit = parse_mandate(with_payees("{fund_account_ids: [fa_VENDORPAYEE001], contact_ids: [cont_VENDORCONTACT1], "
                                         "unlisted: block}"))  # fmt: skip
    assert explicit.mandate_hash == HASH_BEFORE_UNLISTED


def test_unlisted_hold_is_accepted_hashed_and_may_stand_without_lists() -> None:
    held = parse_mandate(with_payees("{fund_account_ids: [fa_VENDORPAYEE001], unlisted: hold}"))
    assert held.grant("create_payout").payees.unlisted == "hold"  # type: ignore[union-attr]
    assert held.mandate_hash != parse_mandate(with_payees("{fund_account_ids: [fa_VENDORPAYEE001]}")).mandate_hash
    only_hold = parse_mandate(with_payees("{unlisted: hold}"))
    assert only_hold.grant("create_payout").payees.fund_account_ids == []  # type: ignore[union-attr]
    # Without the option an empty list still pays nobody, and is refused as before.
    assert "payees must name at least one fund account or contact" in refused(with_payees("{}"))


def test_holding_unlisted_payees_needs_an_approver_and_only_block_or_hold_exist() -> None:
    nobody = with_payees("{unlisted: hold}").replace("approval: {approvers: [ops_lead@example.com]}\n", "")
    message = refused(nobody)
    assert "create_payout holds unlisted payees, so someone must be listed to decide them" in message
    assert "approval.approvers" in message
    assert "unlisted" in refused(with_payees("{fund_account_ids: [fa_VENDORPAYEE001], unlisted: ask}"))
