"""The payee of a held payout (ADR 0034): what the approver is shown, whether a release may pay it, and adding it to
the allow-list of the mandate the call was held under.

A payout to a payee on no list is held when its mandate says `payees: {unlisted: hold}`: releasing it is the
person's decision to pay that payee once. With the allow-list choice (`--allow-payee DIGEST`, the console's
checkbox), the release also adds the fund account — this one, not its contact's others — to the payees of that
mandate version for the agent's later calls, audited PAYEE_ALLOWED in the same transaction. The digest names the
fund account as the approver was shown it; the release compares it with the rail's answer now, so the payee added
is the one they saw.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from interlock.mandate import Mandate
from ledger import payee_amendments
from ledger.intents import Intent
from ledger.payee_amendments import MandateVersion
from ledger.queries import PAYOUT_TOOL
from ops.approvers import Approver
from rails.models import FundAccount


def version_of(intent: Intent) -> MandateVersion:
    return MandateVersion(intent.merchant_id, intent.agent_id, intent.mandate_hash)


def shown(conn: sqlite3.Connection, intent: Intent) -> dict[str, Any] | None:
    """The held payout's payee as the rail reported it to G2 (name, masked account or VPA, IFSC, contact) and the
    digest an approver names to add it; None for any other held call."""
    if intent.tool != PAYOUT_TOOL:
        return None
    return payee_amendments.shown_at_hold(conn, intent.merchant_id, intent.sik)


def listed(conn: sqlite3.Connection, intent: Intent, fund_account: FundAccount, mandate: Mandate | None) -> bool:
    """On the mandate's payees, or added to them under the mandate version the call was held under."""
    grant = mandate.grant(intent.tool) if mandate is not None else None
    payees = grant.payees if grant is not None else None
    if payees is not None and payees.allow(fund_account.id, fund_account.contact_id):
        return True
    return fund_account.id in payee_amendments.allowed_fund_accounts(conn, version_of(intent))


def holds_unlisted(mandate: Mandate | None, tool: str) -> bool:
    grant = mandate.grant(tool) if mandate is not None else None
    return grant is not None and grant.payees is not None and grant.payees.unlisted == "hold"


def payee_problem(conn: sqlite3.Connection, intent: Intent, fund_account: FundAccount,
                  mandate: Mandate | None) -> str | None:  # fmt: skip
    """G2's payee check again, on the rail's fund account now and the mandate now (ADR 0028). A payee on no list
    passes when the mandate holds unlisted payees for a person: approving this call is that person's decision."""
    if not listed(conn, intent, fund_account, mandate) and not holds_unlisted(mandate, intent.tool):
        return (f"G2_PAYEE_NOT_ALLOWED: payee {fund_account.id} (contact {fund_account.contact_id}) is not on the "
                "mandate's payees any more; reject it")  # fmt: skip
    if not fund_account.active:
        return f"G2_PAYEE_INACTIVE: payee {fund_account.id} is no longer active on the rail; reject it"
    return None


def allow_problem(intent: Intent, fund_account: FundAccount | None, mandate: Mandate | None,
                  digest: str) -> str | None:  # fmt: skip
    """Why the payee of this held call may not be added to its mandate's payees (None: it may)."""
    if intent.tool != PAYOUT_TOOL:
        return f"only a payout has a payee to add; this held call is {intent.tool} — approve it without --allow-payee"
    if not holds_unlisted(mandate, intent.tool):
        return ("this mandate refuses unlisted payees (payees.unlisted is block), so approvers do not amend its "
                "payees; list the payee in a new mandate, or approve without --allow-payee")  # fmt: skip
    if fund_account is None:
        return "the payee was not read from the rail; approve again once the rail answers"
    if digest.strip() != fund_account.digest:
        return (f"the payee digest {digest.strip()!r} is not the fund account the rail reports now "
                f"({fund_account.digest}: {fund_account.shown()}); look at the held call again before adding its "
                "payee")  # fmt: skip
    return None


def allow(conn: sqlite3.Connection, intent: Intent, fund_account: FundAccount, mandate: Mandate | None, *,
          approver: Approver, now: int) -> int | None:  # fmt: skip
    """Add the held call's payee to the payees of the mandate version it was held under (PAYEE_ALLOWED); None when an
    earlier release added it already, or the mandate lists it itself."""
    if listed(conn, intent, fund_account, mandate):
        return None
    return payee_amendments.allow_payee(
        conn, version_of(intent), fund_account_id=fund_account.id, contact_id=fund_account.contact_id,
        payee=fund_account.shown(), payee_digest=fund_account.digest, approver=approver.approver_id,
        credential=approver.credential, sik=intent.sik, now=now,
    )  # fmt: skip
