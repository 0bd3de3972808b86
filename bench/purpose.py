"""`interlock bench purpose`: G5's judge on its labelled set (bench/purpose_cases.yaml), for each candidate model.

For every model that is installed: load time, the cases' similarities, precision / recall / false-hold rate at the
threshold chosen from this set (the highest that holds no benign case of the set for drift), the same at the
mandate's default and at the highest threshold within a 10% false-hold budget, and
G5's added time per money call — the real gate ladder (gate_workers.ladder.evaluate, all six gates over a real
ledger file) with G5 on against the same ladder with G5 off, interleaved, the p50 of the difference.
"""

from __future__ import annotations

import sqlite3
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from gate_workers.context import GateContext, ResolvedAction
from gate_workers.ladder import evaluate
from gate_workers.purpose_model import MODELS, EmbeddingJudge, agent_text, instruction_hits
from interlock.mandate import Mandate
from interlock.mandate_model import DEFAULT_MIN_SIMILARITY
from interlock.messages import Verdict
from interlock.sik import compute_sik
from interlock.task import Task, VerifiedTask
from interlock.tools import current_pins
from rails.models import Balance, Payment

CASES = Path(__file__).resolve().parent / "purpose_cases.yaml"
FALSE_HOLD_BUDGET = 0.10
THRESHOLDS = [round(t / 100, 2) for t in range(0, 91)]
MERCHANT, AGENT = "acc_DEMO000001", "agent_demo"  # the example mandate's (deploy/mandate.example.yaml)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Case(_Strict):
    id: str
    label: Literal["benign", "drift", "injected"]
    purpose: str
    tool: Literal["create_refund", "create_instant_settlement"]
    amount: int = Field(gt=0)
    notes: dict[str, str] = Field(default_factory=dict)
    description: str | None = None
    reason: str | None = None
    task_purpose: str | None = None
    source: str | None = None

    @property
    def positive(self) -> bool:
        return self.label != "benign"


class CaseFile(_Strict):
    purposes: dict[str, str]
    cases: list[Case] = Field(min_length=40)


def load_cases(path: Path = CASES) -> CaseFile:
    data = CaseFile.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    unknown = sorted({c.purpose for c in data.cases} - set(data.purposes))
    if unknown:
        raise ValueError(f"{path}: cases name purposes that are not listed: {unknown}")
    return data


def action_of(case: Case) -> ResolvedAction:
    """The call as a gate worker would have resolved it: a captured payment, or a balance, that allows it."""
    args: dict[str, Any] = {"amount": case.amount}
    if case.notes:
        args["notes"] = dict(case.notes)
    if case.description is not None:
        args["description"] = case.description
    if case.reason is not None:
        args["interlock_distinct_reason"] = case.reason
    task = None
    if case.task_purpose is not None:
        task = VerifiedTask(Task(task_id=f"task-{case.id}", expires_at=2**62, purpose=case.task_purpose,
                                 audience={"merchant_id": MERCHANT, "agent_ids": [AGENT]},  # type: ignore[arg-type]
                                 grants={case.tool: {}}), digest="0" * 64, signer="bench")  # type: ignore[dict-item]  # fmt: skip
    if case.tool == "create_refund":
        pid = f"pay_{case.id}"
        raw = {"id": pid, "entity": "payment", "amount": case.amount * 2, "currency": "INR", "status": "captured",
               "amount_refunded": 0, "captured": True, "notes": []}  # fmt: skip
        payment = Payment.from_raw(raw)
        sik = compute_sik(merchant_id=MERCHANT, tool=case.tool, subject=pid, amount_minor=case.amount,
                          currency="INR", distinct=case.reason)  # fmt: skip
        return ResolvedAction(request_id=f"req_{case.id}", agent_id=AGENT, merchant_id=MERCHANT, tool=case.tool,
                              arguments={"payment_id": pid, **args}, subject=pid, amount_minor=case.amount,
                              currency="INR", requested_amount=case.amount, payment=payment, sik=sik,
                              distinct_reason=case.reason, task=task)  # fmt: skip
    sik = compute_sik(merchant_id=MERCHANT, tool=case.tool, subject="balance", amount_minor=case.amount,
                      currency="INR", window=1, distinct=case.reason)  # fmt: skip
    balance = Balance.from_raw({"balance": case.amount * 4, "currency": "INR"})
    return ResolvedAction(request_id=f"req_{case.id}", agent_id=AGENT, merchant_id=MERCHANT, tool=case.tool,
                          arguments=args, subject="balance", amount_minor=case.amount, currency="INR",
                          requested_amount=case.amount, balance=balance, sik=sik, window=1,
                          distinct_reason=case.reason, task=task)  # fmt: skip


@dataclass
class Scored:
    case: Case
    similarity: float  # the lowest over the call's purposes
    instructions: list[str]

    def objects(self, threshold: float, *, patterns: bool = True) -> bool:
        return (patterns and bool(self.instructions)) or self.similarity < threshold


@dataclass(frozen=True)
class Rates:
    tp: int
    fp: int
    fn: int
    tn: int

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    @property
    def false_hold(self) -> float | None:
        return self.fp / (self.fp + self.tn) if self.fp + self.tn else None


def rates(scored: list[Scored], threshold: float, *, patterns: bool = True,
          labels: tuple[str, ...] = ("benign", "drift", "injected")) -> Rates:  # fmt: skip
    picked = [s for s in scored if s.case.label in labels]
    flagged = [(s.case.positive, s.objects(threshold, patterns=patterns)) for s in picked]
    return Rates(tp=sum(p and f for p, f in flagged), fp=sum(not p and f for p, f in flagged),
                 fn=sum(p and not f for p, f in flagged), tn=sum(not p and not f for p, f in flagged))  # fmt: skip


def choose_threshold(scored: list[Scored]) -> float:
    """The highest threshold at which no benign case of the set is held for drift: its lowest benign similarity,
    rounded down to 0.01. A hold costs a person's time and the deterministic gates stand either way, so the
    similarity test is kept below everything benign the set has seen (ADR 0006 says why not `within_budget`)."""
    lowest = min((s.similarity for s in scored if not s.case.positive), default=0.0)
    return max((t for t in THRESHOLDS if t <= lowest), default=0.0)


def within_budget(scored: list[Scored]) -> float:
    """The highest threshold whose false-hold rate on the benign cases stays within FALSE_HOLD_BUDGET: the most
    recall the set allows for that review budget — in-sample, on a knife edge of the benign cases."""
    allowed = [t for t in THRESHOLDS if (rates(scored, t).false_hold or 0.0) <= FALSE_HOLD_BUDGET]
    return max(allowed, default=0.0)


@dataclass
class ModelReport:
    model: str
    name: str
    load_s: float
    scored: list[Scored]
    chosen: float
    judge_ms: list[float] = field(default_factory=list)
    judge_cpu_ms: list[float] = field(default_factory=list)  # the calling thread's CPU time: what contention hides
    added_ms: list[float] = field(default_factory=list)
    error: str | None = None


def evaluate_model(model: str, data: CaseFile, ledger: sqlite3.Connection, mandate: Mandate, *,
                   rounds: int = 10) -> ModelReport:  # fmt: skip
    started = time.perf_counter()
    try:
        embedder = MODELS[model]()
    except Exception as exc:  # noqa: BLE001 - a candidate that does not load is reported, not fatal
        return ModelReport(model, model, 0.0, [], 0.0, error=str(exc)[:300])
    load_s = time.perf_counter() - started
    judge = EmbeddingJudge(embedder)
    scored = []
    for case in data.cases:
        action = action_of(case)
        purposes = {"mandate": data.purposes[case.purpose]}
        if case.task_purpose is not None:
            purposes["task"] = case.task_purpose
        similarities = judge.similarities(action, purposes)
        scored.append(Scored(case, min(similarities.values()), instruction_hits(agent_text(action))))
    report = ModelReport(model, embedder.name, load_s, scored, choose_threshold(scored))
    report.judge_ms, report.judge_cpu_ms, report.added_ms = _latency(judge, data, ledger, mandate, rounds)
    return report


def _latency(judge: EmbeddingJudge, data: CaseFile, ledger: sqlite3.Connection, mandate: Mandate,
             rounds: int) -> tuple[list[float], list[float], list[float]]:  # fmt: skip
    """G5's own time per call (judge.judge), and the ladder's time with G5 on minus off, per call, interleaved."""
    on = mandate.model_copy(update={"purpose_check": mandate.purpose_check.model_copy(update={"mode": "hold"})})
    pins = current_pins()
    ctx_off = GateContext(mandate=mandate, now_ms=mandate.issued_at + 1, ledger=ledger, tool_hashes=pins)
    ctx_on = replace(ctx_off, mandate=on, purpose_judge=judge)
    actions = [action_of(c) for c in data.cases]
    for action in actions[:5]:  # warm: the purpose vectors are cached after their first use
        evaluate(action, ctx_on)
    judge_ms, cpu_ms, added_ms = [], [], []
    for _ in range(rounds):
        for action in actions:
            cpu = time.thread_time()
            judge_ms.append(_timed(partial(judge.judge, action, {"mandate": on.purpose}, 0.3, Verdict.HOLD)))
            cpu_ms.append((time.thread_time() - cpu) * 1000)
            off_ms = _timed(partial(evaluate, action, ctx_off))
            on_ms = _timed(partial(evaluate, action, ctx_on))
            added_ms.append(on_ms - off_ms)
    return judge_ms, cpu_ms, added_ms


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def iter_rows(report: ModelReport) -> Iterator[tuple[str, float, bool, Rates]]:
    for label, threshold in (("chosen here", report.chosen), ("mandate default", DEFAULT_MIN_SIMILARITY),
                             (f"false holds within {FALSE_HOLD_BUDGET:.0%}", within_budget(report.scored))):
        yield label, threshold, True, rates(report.scored, threshold)
    yield "similarity alone (no patterns), chosen", report.chosen, False, rates(report.scored, report.chosen,
                                                                                patterns=False)
