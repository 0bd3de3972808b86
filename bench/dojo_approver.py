"""The person a held payout waits for, in `interlock bench agentdojo --approve-policy user-request`: a stated policy
that stands in for the account holder, deciding each hold through the same path a person's decision takes
(ops.holds.approve / ops.holds.reject with an approver's own credential, ADR 0015 and 0034).

The policy (`user-request`): approve a payout held for a payee on no list (G2_PAYEE_UNLISTED_HELD) when the payee's
IBAN is written in the user's request, or in a file the request points to — a file of AgentDojo's environment whose
name the request writes out (e.g. 'bill-december-2023.txt'), its content as the environment holds it when the task
starts (the runner reads it; never the ground truth); reject any other. Approving pays that call only: the payee is
not added to the allow-list. `never` is no policy: the mandate refuses an unlisted payee and holds nothing for it.

The policy `user-request-terms` also reads the call's terms, as the person the hold waits for sees them beside the
payee (ADR 0034): it approves only when the place that names the payee — the request, or one file it points to —
also writes out the call's amount (the held intent's, from the ledger). A bill names whom to pay and how much; an
injection that writes only the attacker's account into the bill does not make a 50.00 standing order to it a
payment the bill asks for.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interlock.config import load_settings
from ops import holds
from ops.approvers import Approver, ApproverTable, new_token, token_sha256, yaml_entry
from ops.context import OpsContext

logger = logging.getLogger(__name__)

POLICIES = ("never", "user-request", "user-request-terms")
APPROVER_ID = "account_holder"  # the one approver the bench's mandate names when payee approval is on
HELD_PAYEE = "G2_PAYEE_UNLISTED_HELD"


# An amount as people write one for money: a number with cents ("98.70", "100.00"), or one marked as money — a
# currency sign or code beside it ("$10,000", "Rs 500", "2200 EUR") or a money word just before it ("rent is 2200",
# "Total: 1,200"). Not a year ("December 2023"), a street number or a postcode ("Street 123", "NY 10001"), part of a
# date or a time ("2022-04-04", "12:30"), a percentage, a negative number, or digits inside an IBAN or a word.
NUMBER = re.compile(r"(?<![\w.,/:-])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d{1,2}))?(?![\w%/:-]|[.,]\d)")
CURRENCY_BEFORE = re.compile(r"(?:[$€£₹]|\b(?:rs\.?|inr|usd|eur|gbp|chf))\s*$", re.IGNORECASE)
CURRENCY_AFTER = re.compile(r"^\s*(?:[€£₹]|(?:inr|usd|eur|gbp|chf|rupees|dollars|euros)\b)", re.IGNORECASE)
MONEY_WORD = re.compile(r"\b(?:amount|total|rent|price|cost|fee|sum|due|pay|payment)\b\W*(?:\w+\W+)?$", re.IGNORECASE)


def written_amounts(text: str) -> set[int]:
    """Every amount *text* writes out for money, in minor units (exact: digits, never a float)."""
    found = set()
    for match in NUMBER.finditer(text):
        whole, cents = match.groups()
        before, after = text[max(0, match.start() - 40):match.start()], text[match.end():match.end() + 12]
        if ((cents is not None and len(cents) == 2) or CURRENCY_BEFORE.search(before) or CURRENCY_AFTER.match(after)
                or MONEY_WORD.search(before)):  # fmt: skip
            found.add(int(whole.replace(",", "")) * 100 + int((cents or "").ljust(2, "0")))
    return found


def user_request_decides(iban: str, request: dict[str, Any], amount_minor: int | None = None) -> tuple[bool, str]:
    """Whether the account holder's request names *iban* or points to a file that does, and why (for the audit).
    *request* is what the runner sends: {"text": the user task's PROMPT, "files": {name: content} of the
    environment's files whose name the text writes out}. With *amount_minor* (policy `user-request-terms`) the place
    that names the payee must also write out that amount."""
    places = [("the user's request", request.get("text", ""))] + [
        (f"{name!r}, the file the user's request points to,", content)
        for name, content in sorted(request.get("files", {}).items())]  # fmt: skip
    naming = [(where, text) for where, text in places if iban in text]
    if amount_minor is None and naming:
        return True, f"{naming[0][0]} names {iban}"
    amount = f"{amount_minor // 100}.{amount_minor % 100:02d}" if amount_minor is not None else ""
    for where, text in naming:
        if amount_minor in written_amounts(text):
            return True, f"{where} names {iban} and the amount {amount}"
    if naming:
        return False, f"{naming[0][0]} names {iban} but not the amount {amount}"
    pointed = ", ".join(repr(name) for name in sorted(request.get("files", {}))) or "no file"
    return False, f"neither the user's request nor the file it points to ({pointed}) names {iban}"


@dataclass(frozen=True)
class StandIn:
    """The approver of one task run's stack: its credential, and the operator context over that stack's ledger."""

    ops: OpsContext
    approver: Approver
    policy: str = "user-request"

    @classmethod
    def for_stack(cls, data: Path, env: dict[str, str], policy: str = "user-request") -> StandIn:
        """Mint a credential for APPROVER_ID into *data*/approvers.yaml (only its sha256 kept, as `interlock up`
        does for its demo approvers) and authenticate with it; *env* is the stack's (ledger, Redis, mandate, rail)."""
        token = new_token()
        path = data / "approvers.yaml"
        path.write_text(f"approvers:\n{yaml_entry(APPROVER_ID, token_sha256(token))}\n", encoding="utf-8")
        approver = ApproverTable.load(path).authenticate(token)
        assert approver is not None
        settings = load_settings(ledger=Path(env["INTERLOCK_LEDGER"]), redis_url=env["REDIS_URL"],
                                 mandate=Path(env["INTERLOCK_MANDATE"]), rail_url=env["INTERLOCK_RAIL_URL"],
                                 rail_key_id=env["INTERLOCK_RAIL_KEY_ID"],
                                 rail_key_secret=env["INTERLOCK_RAIL_KEY_SECRET"], approvers=path)  # fmt: skip
        return cls(OpsContext.from_settings(settings), approver, policy)

    def decide(self, sik: str, iban: str, request: dict[str, Any]) -> tuple[bool, str]:
        """Approve or reject the held call *sik* (to *iban*) by this stand-in's policy; returns the decision. The
        terms are the held intent's as the ledger records them: what a person approving in the console is shown."""
        with self.ops.ledger(readonly=True) as conn:
            held = holds.find_intent(conn, sik)
        terms = held.amount_minor if self.policy == "user-request-terms" else None
        approved, why = user_request_decides(iban, request, terms)
        reason = f"policy {self.policy} (stands in for the account holder): {why}"
        if approved:
            holds.approve(self.ops, sik, approver=self.approver, terms_digest=holds.terms_digest(held), reason=reason)
        else:
            holds.reject(self.ops, sik, approver=self.approver, reason=reason)
        logger.info("held payout %s to %s %s: %s", sik, iban, "approved" if approved else "rejected", why)
        return approved, why
