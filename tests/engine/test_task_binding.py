"""Task binding end to end (SPEC §10), real processes: a swapped payment, another customer's payment and a
settlement staged before a refund are BLOCKED with their reason codes and never reach the rail while the task's
own refund completes; and four in-limit refunds split from one, racing through two gate workers, cannot pass
the task's ceiling together — the rail worker re-asserts it inside the admitting transaction."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from interlock.clock import now_ms
from interlock.messages import Outcome, Proposal
from interlock.queues import GATE_JOB, gates_queue, rq_queue
from interlock.task import TASK_META_KEY, TASK_SIG_META_KEY, new_task, public_key_b64, sign_task
from tests.engine.conftest import Engine
from tests.mandates import AGENT, MERCHANT, write_mandate

KEY = Ed25519PrivateKey.generate()
ROOMY = {"limits.windows": [], "limits.fee_budgets": {}, "task_binding": "required",
         "task_signers": {"ticketing": public_key_b64(KEY)}}  # fmt: skip
_ids = itertools.count(1)


def _engine(engine_factory: Callable[..., Engine], tmp_path: Path, **changes: Any) -> Engine:
    path = write_mandate(tmp_path / "mandate.yaml", {**ROOMY, **changes})
    return engine_factory(gate_workers=2, env={"INTERLOCK_MANDATE": str(path), "INTERLOCK_RAIL_CONCURRENCY": "16"})


def task_meta(tool: str = "create_refund", **grant: Any) -> dict[str, Any]:
    task = new_task(f"ticket-{next(_ids)}x{now_ms()}", now_ms() + 3_600_000, tool, merchant_id=MERCHANT,
                    agent_ids=[AGENT], **grant)
    return sign_task(task, KEY, "ticketing")


def propose(engine: Engine, arguments: dict[str, Any], meta: dict[str, Any] | None, *,
            tool: str = "create_refund") -> str:  # fmt: skip
    """What the ingress enqueues for a call whose `_meta` carries *meta* (the harness's task)."""
    request_id = f"treq{next(_ids)}x{now_ms()}"
    meta = meta or {}
    proposal = Proposal(request_id=request_id, agent_id=AGENT, merchant_id=MERCHANT, tool=tool, arguments=arguments,
                        task=meta.get(TASK_META_KEY), task_sig=meta.get(TASK_SIG_META_KEY),
                        received_at_ms=now_ms())  # fmt: skip
    rq_queue(gates_queue(), engine.redis).enqueue(GATE_JOB, proposal.to_json(), job_id=f"proposal-{request_id}")
    return request_id


def refunds_of(engine: Engine, pid: str) -> list[int]:
    return [e["entity"]["amount"] for e in engine.rail.entities("refund") if e["entity"]["payment_id"] == pid]


def test_injected_referents_are_blocked_and_the_tasks_own_refund_completes(
    engine_factory: Callable[..., Engine], tmp_path: Path
) -> None:
    engine = _engine(engine_factory, tmp_path)
    engine.rail.set_balance(10_000_000)
    mine = engine.payment(500_000, customer_id="cust_Asha", order_id="order_1002")
    other = engine.payment(900_000, customer_id="cust_Vikram", order_id="order_2002")
    ticket = task_meta(subjects=[mine], customer_id="cust_Asha", max_amount_minor=350_000)
    by_customer = task_meta(customer_id="cust_Asha", max_amount_minor=350_000)  # the ticket names no payment id
    before = len(engine.rail.entities("settlement"))
    requests = {
        "A4 swapped payment id": propose(engine, {"payment_id": other, "amount": 189_900}, ticket),
        # Above the hold threshold: without the task a person would be asked; with it, it is plainly refused.
        "A5 another customer's payment": propose(engine, {"payment_id": other, "amount": 350_000}, by_customer),
        "A-14 settlement staged first": propose(engine, {"amount": 4_000_000, "description": "precondition"}, ticket,
                                                tool="create_instant_settlement"),
        "no task at all": propose(engine, {"payment_id": mine, "amount": 1_000}, None),
    }  # fmt: skip
    answers = {name: engine.outcome(r, timeout_s=60) for name, r in requests.items()}
    legit = engine.outcome(propose(engine, {"payment_id": mine, "amount": 250_000}, ticket), timeout_s=60)

    got = {name: (o.state, o.reason_code) for name, o in answers.items()}
    assert got == {
        "A4 swapped payment id": ("BLOCKED", "G2_SUBJECT_NOT_IN_TASK"),
        "A5 another customer's payment": ("BLOCKED", "G2_CUSTOMER_MISMATCH"),
        "A-14 settlement staged first": ("BLOCKED", "G1_TOOL_NOT_IN_TASK"),
        "no task at all": ("BLOCKED", "G1_TASK_REQUIRED"),
    }, got
    assert refunds_of(engine, other) == []  # nothing reached the rail for another customer
    assert len(engine.rail.entities("settlement")) == before
    assert (legit.state, legit.reason_code) == ("APPLIED", None), (legit, engine.logs())
    assert refunds_of(engine, mine) == [250_000]
    conn = engine.ledger()
    intents = conn.execute("SELECT subject_id, task_id FROM intents").fetchall()
    assert [tuple(r) for r in intents] == [(mine, ticket[TASK_META_KEY]["task_id"])]  # refusals record no intent


def test_four_in_limit_refunds_racing_through_two_gate_workers_cannot_pass_the_task_ceiling(
    engine_factory: Callable[..., Engine], tmp_path: Path
) -> None:
    engine = _engine(engine_factory, tmp_path)
    pid = engine.payment(1_000_000, customer_id="cust_Asha")
    ticket = task_meta(subjects=[pid], max_amount_minor=200_000)  # "refund Rs 2,000"
    # Structuring (seed A-10): the same refund split into four calls of Rs 600, each inside every mandate limit,
    # all proposed before any is admitted, so both gate workers see an empty task and allow each one.
    requests = [propose(engine, {"payment_id": pid, "amount": 60_000 + i, "interlock_distinct_reason": f"part {i}"},
                        ticket) for i in range(4)]  # fmt: skip
    outcomes: list[Outcome] = [engine.outcome(r, timeout_s=90) for r in requests]
    states = Counter((o.state, o.reason_code) for o in outcomes)
    assert states[("APPLIED", None)] == 3, states
    assert states[("BLOCKED", "G2_EXCEEDS_TASK_CEILING")] == 1, states
    assert sum(refunds_of(engine, pid)) <= 200_000
    assert len(refunds_of(engine, pid)) == 3
