"""Applied money a person must look at (docs/webhooks.md): list it, and acknowledge one attention.

An attention is raised by the lifecycle (ledger/lifecycle.py): a refund the bank failed, a settlement reversed, a
payout failed, reversed, cancelled or rejected, a second final status that contradicts the first, another entity
carrying the intent's stamp. Acknowledging it says a named person has it in hand and what they are doing about it:
it covers the attention as it was raised, the status and amounts the person saw (a later observation that changes
the money at stake, such as a settlement reversed further, raises it afresh), and it stops counting as waiting for a
person (the `interlock_rail_attention` metric, `interlock status`'s NEEDS A
PERSON lines, the console's list), and nothing else changes — the intent stays APPLIED, its rail_status and history
stay as the rail said, no money moves, and the agent is still told that a person decides (`interlock_status`:
ESCALATE_TO_OPERATOR). A new refund after a failed one, or a new payout after one the payee did not get, is a new
business action, taken by the merchant, never by this command.

Who may acknowledge it: as for a hold or a quarantine, only an approver the intent's agent's mandate names
(ops.approvers.approver_problem); anyone else is refused, naming who may, with nothing written. The console passes
the person's authenticated approver credential and the record names it; the CLI's `--as NAME` is what the operator
typed (it too must be an approver the mandate names), and the record says so.
"""

from __future__ import annotations

import logging

from interlock.clock import now_ms
from interlock.errors import OperatorRefused
from ledger import lifecycle
from ledger.db import transaction
from ops.approvers import Approver, approver_problem
from ops.context import OpsContext
from ops.holds import find_intent

logger = logging.getLogger(__name__)


def waiting(ctx: OpsContext) -> list[lifecycle.RailStatus]:
    """Attentions nobody has acknowledged yet, the most recent first."""
    with ctx.ledger(readonly=True) as conn:
        return lifecycle.needs_attention(conn)


def acknowledged(ctx: OpsContext) -> list[tuple[lifecycle.RailStatus, lifecycle.Acknowledgement]]:
    with ctx.ledger(readonly=True) as conn:
        return lifecycle.acknowledged(conn)


def acknowledge(ctx: OpsContext, sik: str, *, attention: str, operator_id: str, note: str,
                merchant_id: str | None = None, authenticated: Approver | None = None,
                raised_seq: int | None = None) -> lifecycle.RailStatus:  # fmt: skip
    """*raised_seq*: the raising the person looked at (the console page's, `--raised` as listed); refused if the
    attention has been raised again since."""
    if authenticated is not None and (authenticated.approver_id != operator_id
                                      or not ctx.approvers().current(authenticated)):  # fmt: skip
        raise OperatorRefused(sik, f"the credential {authenticated.credential} is not current for {operator_id!r}")
    mandates = ctx.mandates()
    with ctx.ledger() as conn:
        with transaction(conn):
            intent = find_intent(conn, sik, merchant_id)
            problem = approver_problem(mandates, intent, operator_id)
            if problem is not None:
                raise OperatorRefused(sik, problem)  # rolls the transaction back: nothing was written
            row = lifecycle.acknowledge(conn, merchant_id=intent.merchant_id, sik=sik, attention=attention,
                                        operator=operator_id, note=note, now=now_ms(), raised_seq=raised_seq,
                                        credential=authenticated.credential if authenticated else None)  # fmt: skip
    logger.info("attention %s on %s (%s %s, %s) acknowledged by %s: %s", attention, sik, row.tool, row.entity_id,
                row.status, operator_id, note.strip())  # fmt: skip
    return row
