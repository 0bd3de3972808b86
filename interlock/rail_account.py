"""Which rail account a mandate's money moves on, and which merchants share it (issue 25, item 8; ADR 0021).

A shard's rail worker and gate workers hold ONE set of rail credentials, and Razorpay's payment entity does not
say whose account it belongs to: whatever account the key reaches, every merchant served with that key acts on
it. So a mandate names its account (`rail: {account_id: acc_...}`), the deployment says which account its key
reaches (INTERLOCK_RAIL_ACCOUNT_ID, from the Razorpay dashboard, beside INTERLOCK_RAIL_KEY_ID), and:

* a money call whose mandate names another account than the credentials reach is refused
  (G1_RAIL_ACCOUNT_MISMATCH, BLOCK) by the gate and again by the rail worker's admit;
* G2's money in motion on a payment or on the balance is counted over every merchant whose mandate names the
  same account — two merchants on one account share one refundable amount and one balance.

A mandate without `rail.account_id` is on "the account the credentials reach": allowed while the deployment
names no account (today's deployments), refused at load once it does (MandateStore.from_settings).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from interlock.mandate_model import Mandate

RAIL_ACCOUNT_MISMATCH = "G1_RAIL_ACCOUNT_MISMATCH"
ACCOUNT_ENV = "INTERLOCK_RAIL_ACCOUNT_ID"


def effective_account(mandate: Mandate, configured: str | None) -> str | None:
    """The account *mandate*'s money moves on: the one it names, else the one these credentials reach (None when
    neither is named — still one account, the credentials', shared by every such mandate)."""
    return mandate.rail.account_id if mandate.rail.account_id is not None else configured


def account_problem(mandate: Mandate, configured: str | None) -> dict[str, Any] | None:
    """Why money may not move for *mandate* with credentials that reach *configured*, or None."""
    named = mandate.rail.account_id
    if named is None and configured is None:
        return None  # nothing named anywhere: the credentials' one account (ADR 0021, backward compatibility)
    if named is None:
        return {"mandate_id": mandate.mandate_id, "rail_account_id": configured,
                "error": f"the mandate names no rail.account_id, and these credentials reach {configured}"}  # fmt: skip
    if configured is None:
        return {"mandate_id": mandate.mandate_id, "mandate_account_id": named,
                "error": f"the mandate names rail account {named}, but {ACCOUNT_ENV} does not say which account "
                         "these credentials reach, so it cannot be checked"}  # fmt: skip
    if named != configured:
        return {"mandate_id": mandate.mandate_id, "mandate_account_id": named, "rail_account_id": configured}
    return None


def merchants_on_account(mandates: Iterable[Mandate], mandate: Mandate, configured: str | None) -> tuple[str, ...]:
    """Every merchant whose mandate moves money on *mandate*'s account (itself included), sorted: whose intents
    G2 counts together."""
    account = effective_account(mandate, configured)
    merchants = {m.merchant_id for m in mandates if effective_account(m, configured) == account}
    return tuple(sorted(merchants | {mandate.merchant_id}))
