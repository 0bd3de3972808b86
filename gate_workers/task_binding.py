"""Task binding in the gate ladder (SPEC §10): verify the harness's task, then narrow G1 and G2 to it.

The mandate says what the agent may ever do; the task says what this person asked for now. With the
mandate's `task_binding: off` a task is ignored; `optional` enforces one when present; `required` refuses
a money call without one. A task names its audience (v2): another merchant's or agent's call cannot use it.
Every check here only narrows: a task can never allow what the mandate refuses.
"""

from __future__ import annotations

from dataclasses import replace

from gate_workers.context import GateContext, ResolvedAction
from interlock.mandate import Mandate
from interlock.messages import Proposal, Verdict
from interlock.task import (
    CUSTOMER_MISMATCH,
    ORDER_MISMATCH,
    SUBJECT_NOT_IN_TASK,
    TASK_REQUIRED,
    TOOL_NOT_IN_TASK,
    TaskProblem,
    verify_task,
)
from interlock.verdicts import GateResult, block
from ledger.limits import check_task_ceiling


def bind_task(action: ResolvedAction, proposal: Proposal, mandate: Mandate | None, now_ms: int) -> ResolvedAction:
    """*action* with the proposal's task verified (or the problem found with it), when the mandate uses tasks."""
    if mandate is None or mandate.task_binding == "off" or (proposal.task is None and proposal.task_sig is None):
        return action
    checked = verify_task(proposal.task, proposal.task_sig, mandate.task_signers, now_ms)
    if isinstance(checked, TaskProblem):
        return replace(action, task_problem=checked)
    # The audience (SPEC §10 v2): the trusted identity the ingress stamped, never anything the call says.
    wrong = checked.audience_problem(proposal.merchant_id, proposal.agent_id)
    if wrong is not None:
        return replace(action, task_problem=wrong)
    return replace(action, task=checked)


def task_scope(action: ResolvedAction, mandate: Mandate) -> GateResult | None:
    """G1's part: a task that cannot be trusted, a missing task the mandate requires, a tool it does not grant."""
    if mandate.task_binding == "off":
        return None
    if action.task_problem is not None:
        return block(action.task_problem.reason_code, **action.task_problem.detail)
    if action.task is None:
        if mandate.task_binding == "required":
            return block(TASK_REQUIRED, tool=action.tool, task_binding="required")
        return None
    if action.task.grant(action.tool) is None:
        return block(TOOL_NOT_IN_TASK, tool=action.tool, task_id=action.task.task_id,
                     granted=sorted(action.task.task.grants))  # fmt: skip
    return None


def task_value(action: ResolvedAction, ctx: GateContext) -> GateResult | None:
    """G2's part: the resolved subject, the payment's order and customer, and the task's ceiling on the sum."""
    task = action.task
    grant = task.grant(action.tool) if task is not None else None
    if task is None or grant is None or action.subject is None or action.sik is None or action.amount_minor is None:
        return None  # no task, or G1 already refused the tool
    payment, task_id = action.payment, task.task_id
    if grant.subjects is not None and action.subject not in grant.subjects:
        return block(SUBJECT_NOT_IN_TASK, subject=action.subject, task_subjects=list(grant.subjects), task_id=task_id)
    if grant.order_id is not None and (payment is None or payment.order_id != grant.order_id):
        return block(ORDER_MISMATCH, task_order_id=grant.order_id, task_id=task_id,
                     payment_order_id=payment.order_id if payment is not None else None)  # fmt: skip
    if grant.customer_id is not None and (payment is None or payment.customer_id != grant.customer_id):
        return block(CUSTOMER_MISMATCH, task_customer_id=grant.customer_id, task_id=task_id,
                     payment_customer_id=payment.customer_id if payment is not None else None)  # fmt: skip
    if grant.max_amount_minor is not None:
        ceiling = check_task_ceiling(ctx.ledger, signer=task.signer, task_id=task_id, sik=action.sik,
                                     amount_minor=action.amount_minor, ceiling_minor=grant.max_amount_minor,
                                     recovered_for=(action.merchant_id, (action.agent_id,)))  # fmt: skip
        if ceiling.verdict is not Verdict.ALLOW:
            return ceiling
    return None
