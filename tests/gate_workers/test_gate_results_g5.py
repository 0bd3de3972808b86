"""G5's whole result and what it hands its judge: off without a mandate or by default, not applicable with no
amount, an objection (never a silent skip) when no judge was loaded, the judge's silence recorded with the threshold
it was asked to use, and the mandate's and the task's purposes passed to it by name. The judge here is a stand-in
(G5's contract is the PurposeJudge protocol); tests/gate_workers/test_g5_purpose.py covers the real model."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from gate_workers.context import ResolvedAction
from gate_workers.gates import g5_purpose
from gate_workers.gates.g5_purpose import AdvisoryVerdict, Objection
from interlock.messages import Verdict
from interlock.task import Task, VerifiedTask, new_task
from interlock.verdicts import GateResult
from tests.gate_workers.factories import NOW, context, refund_action
from tests.mandates import AGENT, MERCHANT, make_mandate

A, H, B = Verdict.ALLOW, Verdict.HOLD, Verdict.BLOCK
MANDATE_PURPOSE = "Demo: refund duplicate customer charges up to Rs 5,000 and settle the balance instantly"


@dataclass
class RecordingJudge:
    """Answers with *objection* (None: no objection) and records every question it was asked."""

    objection: Objection | None = None
    asked: list[tuple[ResolvedAction, dict[str, str], float, AdvisoryVerdict]] = field(default_factory=list)

    def judge(self, action: ResolvedAction, purposes: Mapping[str, str], min_similarity: float,
              verdict: AdvisoryVerdict) -> Objection | None:  # fmt: skip
        self.asked.append((action, dict(purposes), min_similarity, verdict))
        return self.objection


def on(mode: str = "hold", min_similarity: float = 0.5) -> Any:
    return make_mandate({"purpose_check": {"mode": mode, "min_similarity": min_similarity}})


def with_task(action: ResolvedAction, purpose: str | None) -> ResolvedAction:
    task = Task.model_validate(new_task("ticket-9", NOW + 3_600_000, "create_refund", merchant_id=MERCHANT,
                                        agent_ids=[AGENT], purpose=purpose))
    return replace(action, task=VerifiedTask(task=task, digest="d" * 64, signer="ticketing"))


def test_without_a_mandate_g5_is_disabled_and_asks_no_judge(ledger: sqlite3.Connection) -> None:
    judge = RecordingJudge(Objection(Verdict.BLOCK, "G5_OFF_PURPOSE"))
    ctx = replace(context(ledger, purpose_judge=judge), mandate=None)
    assert g5_purpose.check(refund_action(), ctx) == GateResult(A, "G5_DISABLED", {})
    assert judge.asked == []


def test_mode_off_is_disabled_and_asks_no_judge(ledger: sqlite3.Connection) -> None:
    judge = RecordingJudge(Objection(Verdict.BLOCK, "G5_OFF_PURPOSE"))
    assert g5_purpose.check(refund_action(), context(ledger, on("off"), purpose_judge=judge)) == GateResult(
        A, "G5_DISABLED", {}
    )
    assert judge.asked == []


def test_an_action_with_no_resolved_amount_is_not_applicable(ledger: sqlite3.Connection) -> None:
    judge = RecordingJudge(Objection(Verdict.BLOCK, "G5_OFF_PURPOSE"))
    action = replace(refund_action(), amount_minor=None)
    assert g5_purpose.check(action, context(ledger, on(), purpose_judge=judge)) == GateResult(
        A, "G5_NOT_APPLICABLE", {}
    )
    assert judge.asked == []


@pytest.mark.parametrize(("mode", "verdict"), [("hold", H), ("block", B)])
def test_asked_for_with_no_judge_loaded_it_objects_in_the_mandates_mode(
    ledger: sqlite3.Connection, mode: str, verdict: Verdict
) -> None:
    result = g5_purpose.check(refund_action(), context(ledger, on(mode)))
    assert result == GateResult(verdict, "G5_JUDGE_UNAVAILABLE", {"advisory": True, "mode": mode})


@pytest.mark.parametrize(("mode", "verdict"), [("hold", H), ("block", B)])
def test_the_judge_is_asked_about_the_action_with_the_mandate_purpose_threshold_and_verdict(
    ledger: sqlite3.Connection, mode: str, verdict: Verdict
) -> None:
    judge = RecordingJudge()
    action = refund_action()
    result = g5_purpose.check(action, context(ledger, on(mode, 0.61234), purpose_judge=judge))
    assert result == GateResult(A, "G5_NO_OBJECTION", {"min_similarity": "0.6123"})
    assert judge.asked == [(action, {"mandate": MANDATE_PURPOSE}, 0.61234, verdict)]


def test_a_task_with_a_purpose_is_judged_against_both_purposes(ledger: sqlite3.Connection) -> None:
    judge = RecordingJudge()
    action = with_task(refund_action(), "refund Asha's duplicate charge")
    g5_purpose.check(action, context(ledger, on(), purpose_judge=judge))
    assert judge.asked == [(action, {"mandate": MANDATE_PURPOSE, "task": "refund Asha's duplicate charge"}, 0.5, H)]


def test_a_task_without_a_purpose_adds_none(ledger: sqlite3.Connection) -> None:
    judge = RecordingJudge()
    action = with_task(refund_action(), None)
    g5_purpose.check(action, context(ledger, on(), purpose_judge=judge))
    assert judge.asked == [(action, {"mandate": MANDATE_PURPOSE}, 0.5, H)]


def test_an_objection_is_the_result_marked_advisory_with_the_judges_detail(ledger: sqlite3.Connection) -> None:
    judge = RecordingJudge(Objection(Verdict.HOLD, "G5_OFF_PURPOSE", {"similarity": "0.1000", "purpose": "mandate"}))
    result = g5_purpose.check(refund_action(), context(ledger, on(), purpose_judge=judge))
    assert result == GateResult(H, "G5_OFF_PURPOSE", {"advisory": True, "similarity": "0.1000", "purpose": "mandate"})
