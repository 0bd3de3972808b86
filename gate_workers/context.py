"""What every gate sees: the proposed action already resolved on the rail, and the gate context."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from interlock.config import DEFAULT_CLOCK_SKEW_MS
from interlock.fees import DEFAULT_FEE_RATE, FeeRate
from interlock.mandate import Mandate
from interlock.messages import Verdict
from interlock.task import TaskProblem, VerifiedTask
from rails.models import Balance, BankingBalance, FundAccount, Payment


@dataclass(frozen=True, slots=True)
class ResolvedAction:
    """A money call after Interlock resolved its referent on the rail itself.

    `subject` is the rail's own id for the entity (never the model's text), `amount_minor` the
    concrete amount (a full refund or full-balance settlement resolved to a number). When the
    referent could not be resolved, `resolution_error` carries the reason code and `sik` is None.
    """

    request_id: str
    agent_id: str
    merchant_id: str
    tool: str
    arguments: dict[str, Any]
    subject: str | None = None
    amount_minor: int | None = None
    currency: str | None = None
    requested_amount: int | None = None
    payment: Payment | None = None
    balance: Balance | None = None
    # create_payout: the payee as the rail knows it, the RazorpayX balance, and the payouts on it not yet debited.
    fund_account: FundAccount | None = None
    banking_balance: BankingBalance | None = None
    payouts_waiting_minor: int = 0
    resolution_error: str | None = None
    resolution_detail: dict[str, Any] = field(default_factory=dict)
    sik: str | None = None
    window: int | None = None
    # The same call's SIKs in the adjacent windows (ADR 0009; Decision.grace_siks and previous_sik).
    grace_siks: tuple[str, ...] = ()
    previous_sik: str | None = None
    # When the ingress received the call (Proposal.received_at_ms): the grace rule and the Decision's age count from it.
    received_at_ms: int | None = None
    distinct_reason: str | None = None
    operation_ref: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    # The harness's task (SPEC §10), verified against the mandate's task_signers — or why it could not be.
    task: VerifiedTask | None = None
    task_problem: TaskProblem | None = None


# G5's judge (gate_workers.gates.g5_purpose, ADR 0006), defined here beside the action it judges: its verdict type
# admits only HOLD or BLOCK, so no judge can say ALLOW (tests/typing/g5_cannot_allow.py must fail to type-check).
AdvisoryVerdict = Literal[Verdict.HOLD, Verdict.BLOCK]


@dataclass(frozen=True, slots=True)
class Objection:
    verdict: AdvisoryVerdict
    reason_code: str
    detail: Mapping[str, Any] = field(default_factory=dict)


class PurposeJudge(Protocol):
    def judge(self, action: ResolvedAction, purposes: Mapping[str, str], min_similarity: float,
              verdict: AdvisoryVerdict) -> Objection | None:  # fmt: skip
        """An objection, or None for no objection. There is no way to say ALLOW."""
        ...


@dataclass(frozen=True, slots=True)
class GateContext:
    mandate: Mandate | None
    now_ms: int
    ledger: sqlite3.Connection
    tool_hashes: Mapping[str, str]
    upstream_tools: frozenset[str] = frozenset()
    fee_rate: FeeRate = DEFAULT_FEE_RATE
    clock_skew_ms: int = DEFAULT_CLOCK_SKEW_MS  # INTERLOCK_CLOCK_SKEW_MS: G3 counts its windows this much further back
    # The rail account these credentials reach (INTERLOCK_RAIL_ACCOUNT_ID) and the merchants whose mandates name the
    # mandate's account: G1 refuses a mandate for another account, G2 counts their money in motion together
    # (ADR 0021). Empty: this merchant alone.
    rail_account_id: str | None = None
    account_merchants: tuple[str, ...] = ()
    # G5's judge, built once per gate worker when a mandate turns purpose_check on (gate_workers.purpose_model).
    purpose_judge: PurposeJudge | None = None
