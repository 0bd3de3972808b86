"""Quarantined intents: list them and resolve one with evidence (SPEC §6: operator only, with evidence).

`--not-applied` is refused unless the operator's own paging of the rail ran to the end without finding
our stamp, and no attempt was ever answered with an entity of ours (the rail's answer outranks a lagging list):
a person's belief never outranks the rail. `--applied ID` is refused unless that entity
carries our stamp. The rail is read first, outside the transaction (a QUARANTINED intent has no rail
worker calling for it); the write then re-reads the row and refuses if it moved meanwhile.

Who may resolve it: only an approver the intent's agent's mandate names (ops.approvers.approver_problem, as for a
hold); anyone else is refused, naming who may, before the rail is read and with nothing written. The console
passes the person's authenticated approver credential (ADR 0016) and the record names it; the CLI's `--as NAME`
is what the operator typed (it too must be an approver the mandate names), and the record says so ("credential":
"none: name as typed") — the rail check, not the name, is what makes a resolution safe.
"""

from __future__ import annotations

import logging

from interlock.clock import now_ms
from interlock.errors import OperatorRefused
from ledger import operator
from ledger.db import transaction
from ledger.intents import Intent
from ledger.states import State
from ops.approvers import Approver, approver_problem
from ops.context import OpsContext
from ops.holds import find_intent
from ops.rail_check import check_entity, page_for_stamp

logger = logging.getLogger(__name__)


def list_quarantined(ctx: OpsContext) -> list[Intent]:
    with ctx.ledger(readonly=True) as conn:
        return operator.intents_in_state(conn, State.QUARANTINED)


def resolve(
    ctx: OpsContext, sik: str, *, operator_id: str, applied_entity_id: str | None, not_applied: bool,
    evidence: str | None, merchant_id: str | None = None, authenticated: Approver | None = None,
) -> Intent:  # fmt: skip
    if (applied_entity_id is None) == (not not_applied):
        raise OperatorRefused(sik, "pass exactly one of --applied RAIL_ENTITY_ID or --not-applied")
    if not operator_id.strip():
        raise OperatorRefused(sik, "an operator resolution names the operator (--as OPERATOR)")
    if authenticated is not None and (authenticated.approver_id != operator_id
                                      or not ctx.approvers().current(authenticated)):  # fmt: skip
        raise OperatorRefused(sik, f"the credential {authenticated.credential} is not current for {operator_id!r}")
    if not_applied and not (evidence or "").strip():
        raise OperatorRefused(sik, "--not-applied needs --evidence TEXT (what you checked, and where)")
    with ctx.ledger(readonly=True) as conn:
        intent = find_intent(conn, sik, merchant_id)
    if intent.state is not State.QUARANTINED:
        raise OperatorRefused(sik, f"it is {intent.state.value}, not QUARANTINED")
    problem = approver_problem(ctx.mandates(), intent, operator_id)
    if problem is not None:
        raise OperatorRefused(sik, problem)
    rail = ctx.rail()
    try:
        if applied_entity_id is not None:
            check = check_entity(rail, intent, applied_entity_id)
            if not check.ok:
                raise OperatorRefused(sik, check.detail)
            text = f"{evidence.strip()} — {check.detail}" if evidence and evidence.strip() else check.detail
            pages, exhausted = 0, False
        else:
            result = page_for_stamp(rail, intent)
            if result.matched_entity_id is not None:
                raise OperatorRefused(sik, f"the rail has {result.matched_entity_id} carrying this intent's stamp, so "
                                      f"it was applied; resolve with --applied {result.matched_entity_id}")
            if not result.exhausted:
                raise OperatorRefused(sik, f"could not page the rail to the end ({result.pages_scanned} pages: "
                                      f"{result.error}); absence is proven only by an exhausted list — try again")
            text = f"{(evidence or '').strip()} — stamp absent after {result.pages_scanned} pages (list exhausted)"
            if result.passed_over:
                # Entities with our stamp on other terms (ADR 0016): not this intent applied; named for the record.
                text += f"; stamped on other terms, not this intent: {', '.join(result.passed_over)}"
            pages, exhausted = result.pages_scanned, True
    finally:
        rail.close()
    now = now_ms()
    with ctx.ledger() as conn:
        with transaction(conn):
            current = find_intent(conn, sik, intent.merchant_id)
            moved = current.state is not State.QUARANTINED or current.attempt_seq != intent.attempt_seq
            answered = operator.stamped_answers(conn, current.merchant_id, sik) if not_applied else []
            if not moved and not answered:
                current = operator.resolve_quarantine(
                    conn, current, operator=operator_id, evidence=text, applied=applied_entity_id is not None,
                    rail_entity_id=applied_entity_id, pages_scanned=pages, pagination_exhausted=exhausted, now=now,
                    credential=authenticated.credential if authenticated else None,
                )  # fmt: skip
    if moved:
        raise OperatorRefused(sik, f"it moved to {current.state.value} while the rail was being checked")
    if answered:
        # The rail's own answer outranks a list that does not show it (yet): lists lag, an answer does not.
        seq, outcome, entity = answered[-1]
        raise OperatorRefused(sik, f"the rail answered attempt {seq} with {entity}, which carries this intent's stamp "
                                   f"(recorded {outcome}): money moved under it, so it cannot be resolved as not "
                                   f"applied. Check {entity} on the rail; if it is this call on its terms, resolve "
                                   f"with --applied {entity}")  # fmt: skip
    logger.info("quarantine of %s resolved by %s: %s (%s)", sik, operator_id, current.state, text)
    return current
