"""The sandbox's lifecycle after the call (sandbox/lifecycle.py, SPEC §17): with --lifecycle-ms a refund is answered
pending and a settlement created, and each reaches its final status later — processed, or failed / reversed under the
lifecycle faults — with the payment or the balance given back where the money never arrived. The schedule is in the
journal, so a sandbox restarted in between carries on. Real sandbox processes; without the flag nothing changes."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandbox.faults import FaultSet, parse_fault
from sandbox.journal import Journal
from sandbox.lifecycle import Lifecycle
from sandbox.testing import SandboxProcess, start_sandbox, wait_for

LIFECYCLE_MS = 300


@pytest.fixture(scope="module")
def rail(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    with start_sandbox(tmp_path_factory.mktemp("lifecycle"),
                       env={"INTERLOCK_SANDBOX_LIFECYCLE_MS": str(LIFECYCLE_MS)}) as sandbox:  # fmt: skip
        yield sandbox


@pytest.fixture
def http(rail: SandboxProcess) -> Iterator[httpx.Client]:
    rail.clear_faults()
    with httpx.Client(base_url=rail.url, auth=(rail.key_id, rail.key_secret), timeout=10.0) as client:
        yield client


def refund(rail: SandboxProcess, http: httpx.Client, payment_id: str, amount: int) -> dict[str, Any]:
    rail.add_payment(payment_id, 100_000)
    answer = http.post(f"/v1/payments/{payment_id}/refund", json={"amount": amount, "notes": {"interlock_sik": "X"}})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def final(http: httpx.Client, path: str, statuses: tuple[str, ...]) -> dict[str, Any]:
    """The entity at *path* once its status is one of *statuses* (waits: the machine may be busy)."""
    return dict(wait_for(lambda: (e := http.get(path).json())["status"] in statuses and e, timeout=30))


def test_a_refund_is_answered_pending_and_is_processed_later(rail, http) -> None:
    created = refund(rail, http, "pay_LC_OK", 40_000)
    assert created["status"] == "pending"
    done = final(http, f"/v1/refunds/{created['id']}", ("processed", "failed"))
    assert done["status"] == "processed" and done["amount"] == 40_000
    assert http.get("/v1/payments/pay_LC_OK").json()["amount_refunded"] == 40_000
    changes = [e for e in rail.journal()["events"] if e["kind"] == "entity_status_changed"
               and e["detail"]["id"] == created["id"]]  # fmt: skip
    assert [(c["detail"]["was"], c["detail"]["now"]) for c in changes] == [("pending", "processed")]


def test_a_refund_the_bank_fails_gives_the_payment_its_amount_back(rail, http) -> None:
    rail.set_faults([{"name": "refund_bank_failure", "rate": 1.0}])
    with rail.lifecycle_held():  # still pending when looked at, however busy the machine
        created = refund(rail, http, "pay_LC_FAIL", 25_000)
        assert http.get("/v1/payments/pay_LC_FAIL").json()["amount_refunded"] == 25_000  # held while pending
    assert final(http, f"/v1/refunds/{created['id']}", ("processed", "failed"))["status"] == "failed"
    assert http.get("/v1/payments/pay_LC_FAIL").json()["amount_refunded"] == 0


def test_a_held_lifecycle_moves_nothing_until_released_and_then_at_once_what_fell_due(rail, http) -> None:
    with rail.lifecycle_held():
        created = refund(rail, http, "pay_LC_HELD", 10_000)
        overdue = time.time() + 2 * LIFECYCLE_MS / 1000
        wait_for(lambda: time.time() > overdue, timeout=60)
        assert http.get(f"/v1/refunds/{created['id']}").json()["status"] == "pending"
    # The release applies what fell due before it answers: nothing to wait for here.
    assert http.get(f"/v1/refunds/{created['id']}").json()["status"] == "processed"


def test_a_settlement_goes_created_initiated_processed(rail, http) -> None:
    rail.set_balance(1_000_000)
    created = http.post("/v1/settlements/ondemand", json={"amount": 100_000}).json()
    assert (created["status"], created["amount_settled"], created["amount_pending"]) == ("created", 0, 99_646)
    done = final(http, f"/v1/settlements/ondemand/{created['id']}", ("processed", "reversed"))
    assert (done["status"], done["amount_settled"], done["amount_pending"]) == ("processed", 99_646, 0)
    assert http.get("/v1/balance").json()["balance"] == 900_000


def test_a_reversed_settlement_credits_back_what_was_settled(rail, http) -> None:
    rail.set_balance(1_000_000)
    rail.set_faults([{"name": "settlement_reversed", "rate": 1.0}])
    created = http.post("/v1/settlements/ondemand", json={"amount": 100_000}).json()
    done = final(http, f"/v1/settlements/ondemand/{created['id']}", ("processed", "reversed"))
    assert (done["status"], done["amount_settled"], done["amount_reversed"]) == ("reversed", 0, 99_646)
    assert http.get("/v1/balance").json()["balance"] == 900_000 + 99_646  # the fees are not returned


def test_the_schedule_survives_a_sandbox_restart(tmp_path: Path) -> None:
    env = {"INTERLOCK_SANDBOX_LIFECYCLE_MS": "1500"}
    with start_sandbox(tmp_path, env=env) as first:
        first.hold_lifecycle()  # however slow the machine, the first process moves nothing before it is killed
        with httpx.Client(base_url=first.url, auth=(first.key_id, first.key_secret), timeout=10.0) as http:
            created = refund(first, http, "pay_LC_RESTART", 10_000)
            assert http.get(f"/v1/refunds/{created['id']}").json()["status"] == "pending"
        os.kill(first.pid, signal.SIGKILL)  # the process that planned it is gone
        first.proc.wait(10)
    with start_sandbox(tmp_path, env=env) as second:
        with httpx.Client(base_url=second.url, auth=(second.key_id, second.key_secret), timeout=10.0) as http:
            assert final(http, f"/v1/refunds/{created['id']}", ("processed", "failed"))["status"] == "processed"


def test_the_schedule_of_each_outcome(tmp_path: Path) -> None:
    """In-process, on a real journal, with the clock given: which status is due when."""
    journal = Journal(tmp_path / "journal.sqlite3")
    cases = {"": ("settlement", [(50, "initiated"), (100, "processed")]),
             "settlement_partial": ("settlement", [(50, "initiated"), (100, "partially_processed"),
                                                   (200, "processed")]),
             "settlement_reversed": ("settlement", [(50, "initiated"), (100, "reversed")]),
             "refund_bank_failure": ("refund", [(100, "failed")]),
             "refund_pending_long": ("refund", [(5000, "processed")])}  # fmt: skip
    for fault, (kind, expected) in cases.items():
        faults = FaultSet([parse_fault({"name": fault, "rate": 1.0, "params": {"hold_ms": 5000}}
                                       if fault == "refund_pending_long" else {"name": fault, "rate": 1.0})]
                          if fault else [])  # fmt: skip
        life = Lifecycle(journal, faults, lifecycle_ms=100)
        entity_id = f"ent_{fault or 'plain'}"
        with journal.transaction() as conn:
            life.plan(conn, kind, entity_id, created_ms=1000)
        rows = journal.conn.execute("SELECT due_ms - 1000, status FROM lifecycle WHERE entity_id = ? ORDER BY due_ms",
                                    (entity_id,)).fetchall()  # fmt: skip
        assert [tuple(r) for r in rows] == expected, fault
    journal.close()
