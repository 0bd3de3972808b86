"""The messages that travel on the queues (SPEC §2). Pydantic models: validated at every process
boundary, serialised as JSON, never pickled (a queue message is a delivery, not an object graph).
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Verdict(StrEnum):
    BLOCK = "BLOCK"
    HOLD = "HOLD"
    ALLOW = "ALLOW"


class CallerAction(StrEnum):
    DONE = "DONE"
    RETRY_SAME_CALL = "RETRY_SAME_CALL"
    WAIT_FOR_APPROVAL = "WAIT_FOR_APPROVAL"
    DO_NOT_RETRY = "DO_NOT_RETRY"
    ESCALATE_TO_OPERATOR = "ESCALATE_TO_OPERATOR"


# Per-hop timestamps (epoch microseconds, time.time_ns() // 1000) carried through the messages of one call, for
# the performance bench's breakdown: ingress_received, enqueued, gate_dequeued, rail_read_done,
# decision_enqueued, rail_dequeued, admission_started, admitted, request_sent, answer_received, recorded (and
# ingress_answered at the ingress).
Trace = dict[str, int]


def trace_now() -> int:
    return time.time_ns() // 1000


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, data: str | bytes) -> Any:
        return cls.model_validate_json(data)


class Proposal(_Message):
    """What the ingress enqueues on "gates": one validated tool call plus the trusted identity."""

    request_id: str
    agent_id: str
    merchant_id: str
    tool: str
    arguments: dict[str, Any]
    operation_ref: str | None = None
    # The harness's task binding from `_meta` (SPEC §10), carried unverified: the gate worker checks the signature.
    # Never from `arguments` — the model writes those.
    task: dict[str, Any] | None = None
    task_sig: dict[str, Any] | None = None
    received_at_ms: int
    trace: Trace = Field(default_factory=dict)


class GateResultModel(_Message):
    gate: str
    verdict: Verdict
    reason_code: str
    detail: dict[str, Any] = Field(default_factory=dict)


class IntentTerms(_Message):
    merchant_id: str
    tool: str
    subject: str
    amount_minor: int
    currency: str


class Decision(_Message):
    """What a gate worker enqueues on the rail queue: the ladder's verdict on one resolved action."""

    request_id: str
    agent_id: str
    merchant_id: str
    tool: str
    # None when the referent could not be resolved on the rail: nothing to key, nothing to record
    # but the decision itself (e.g. an injected payment id that does not exist).
    sik: str | None
    terms: IntentTerms | None
    params: dict[str, Any]
    params_hash: str
    verdict: Verdict
    reason_code: str
    results: list[GateResultModel]
    mandate_id: str | None
    mandate_hash: str | None
    operation_ref: str | None = None
    distinct_reason: str | None = None
    window: int | None = None
    # ADR 0009: SIKs of this same call that are its intent whenever `sik` has none — the next window's (a first
    # call whose gate worker or queue stalled past the boundary behind its own repeat). The rail worker lands on
    # the first of these that exists. (A Decision from before previous_sik existed also lists the previous
    # window's SIK here while the call was within the grace.)
    grace_siks: list[str] = Field(default_factory=list)
    # ADR 0009: this call's SIK in the window before the one it was received in (None in window 0). The rail
    # worker lands on that intent when the call was received within the grace after the boundary (any state),
    # or while that intent was unsettled or not yet admitted — judged at admission against received_at_ms.
    previous_sik: str | None = None
    # When the ingress received the call (Proposal.received_at_ms, the ingress's clock): what the grace rule and
    # the Decision's maximum age (INTERLOCK_DECISION_MAX_AGE_MS) are measured from. None only from older gates.
    received_at_ms: int | None = None
    # What the gate read on the rail for G2: refundable (captured - refunded) or the balance, and when. The rail
    # worker re-checks G2 against it inside the admitting transaction (SPEC §8 step 6).
    rail_basis_minor: int | None = None
    rail_read_at_ms: int | None = None
    # The ledger's position in the order intents became APPLIED (ledger.queries.applied_mark), read before that
    # rail read: the admission counts every intent applied after it (finding F9). None from older gates, or a
    # ledger without the order yet: then money applied since the read is judged by rail_read_at_ms, less the skew.
    applied_mark: int | None = None
    # The verified task this call is bound to (SPEC §10): recorded on the decision and the intent; the rail worker
    # re-asserts its audience (v2: the merchant and agents it names), its expiry and its ceiling on the sum moved or
    # in motion under (task_signer, task_id) inside the admit transaction. A Decision with a task_id and no
    # audience (a gate worker from before v2) is refused there.
    task_id: str | None = None
    task_digest: str | None = None
    task_ceiling_minor: int | None = None
    task_expires_at: int | None = None
    task_signer: str | None = None
    task_merchant_id: str | None = None
    task_agent_ids: list[str] | None = None
    decided_at_ms: int
    trace: Trace = Field(default_factory=dict)


class Outcome(_Message):
    """The answer the ingress gives the agent (SPEC §10 result contract), published per request id."""

    request_id: str | None = None
    state: str
    sik: str | None
    intent: IntentTerms | None
    rail_entity_id: str | None = None
    reason_code: str | None = None
    caller_action: CallerAction
    replayed: bool = False
    trace: Trace = Field(default_factory=dict)

    def structured(self) -> dict[str, Any]:
        body = self.model_dump(mode="json", exclude={"request_id", "trace"})
        return body


def caller_action_for(state: str) -> CallerAction:
    """What the agent should do next, given the state of the money (SPEC §10)."""
    return _CALLER_ACTIONS.get(state, CallerAction.RETRY_SAME_CALL)


_CALLER_ACTIONS: dict[str, CallerAction] = {
    "APPLIED": CallerAction.DONE,
    "BLOCKED": CallerAction.DO_NOT_RETRY,
    "FAILED_TERMINAL": CallerAction.DO_NOT_RETRY,
    "HELD": CallerAction.WAIT_FOR_APPROVAL,
    "QUARANTINED": CallerAction.ESCALATE_TO_OPERATOR,
    # Everything else (PROPOSED, AUTHORIZED, IN_FLIGHT, UNKNOWN, RECONCILING, CONFIRMED_NOT_APPLIED,
    # IN_PROGRESS) is not yet known: repeating the same call is safe and cannot pay twice.
}
