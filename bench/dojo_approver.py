"""The person a held payout waits for, in `interlock bench agentdojo --approve-policy user-request`: a stated policy
that stands in for the account holder, deciding each hold through the same path a person's decision takes
(ops.holds.approve / ops.holds.reject with an approver's own credential, ADR 0015 and 0034).

The policy (`user-request`): approve a payout held for a payee on no list (G2_PAYEE_UNLISTED_HELD) when the payee's
IBAN is written in the user's request, or in a file the request points to — a file of AgentDojo's environment whose
name the request writes out (e.g. 'bill-december-2023.txt'), its content as the environment holds it when the task
starts (the runner reads it; never the ground truth); reject any other. Approving pays that call only: the payee is
not added to the allow-list. `never` is no policy: the mandate refuses an unlisted payee and holds nothing for it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interlock.config import load_settings
from ops import holds
from ops.approvers import Approver, ApproverTable, new_token, token_sha256, yaml_entry
from ops.context import OpsContext

logger = logging.getLogger(__name__)

POLICIES = ("never", "user-request")
APPROVER_ID = "account_holder"  # the one approver the bench's mandate names under `user-request`
HELD_PAYEE = "G2_PAYEE_UNLISTED_HELD"


def user_request_decides(iban: str, request: dict[str, Any]) -> tuple[bool, str]:
    """Whether the account holder's request names *iban* or points to a file that does, and why (for the audit).
    *request* is what the runner sends: {"text": the user task's PROMPT, "files": {name: content} of the
    environment's files whose name the text writes out}."""
    if iban in request.get("text", ""):
        return True, f"the user's request names {iban}"
    for name, content in sorted(request.get("files", {}).items()):
        if iban in content:
            return True, f"{name!r}, the file the user's request points to, names {iban}"
    pointed = ", ".join(repr(name) for name in sorted(request.get("files", {}))) or "no file"
    return False, f"neither the user's request nor the file it points to ({pointed}) names {iban}"


@dataclass(frozen=True)
class StandIn:
    """The approver of one task run's stack: its credential, and the operator context over that stack's ledger."""

    ops: OpsContext
    approver: Approver

    @classmethod
    def for_stack(cls, data: Path, env: dict[str, str]) -> StandIn:
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
        return cls(OpsContext.from_settings(settings), approver)

    def decide(self, sik: str, iban: str, request: dict[str, Any]) -> tuple[bool, str]:
        """Approve or reject the held call *sik* (to *iban*) by the `user-request` policy; returns the decision."""
        approved, why = user_request_decides(iban, request)
        if approved:
            with self.ops.ledger(readonly=True) as conn:
                held = holds.find_intent(conn, sik)
            holds.approve(self.ops, sik, approver=self.approver, terms_digest=holds.terms_digest(held),
                          reason=f"policy user-request (stands in for the account holder): {why}")  # fmt: skip
        else:
            holds.reject(self.ops, sik, approver=self.approver,
                         reason=f"policy user-request (stands in for the account holder): {why}")  # fmt: skip
        logger.info("held payout %s to %s %s: %s", sik, iban, "approved" if approved else "rejected", why)
        return approved, why
