"""The pause trial's "no own write after waking" check reads audit records: the ones a fenced worker makes to keep
what the rail told it (FENCED_OUTCOME, the ATTEMPT_FINISHED of its fenced answer, EARLIER_ATTEMPT_APPLIED) are
evidence; a transition of its own is a write."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from chaos.pause import _writes_after
from ledger import audit, intents
from ledger.db import transaction
from ledger.states import Event
from tests.ledger.helpers import put_intent

SIK, M, OLD = "P" * 32, "acc_DEMO000001", "rail-old"
WOKE = 5_000


def _stack(path: Path) -> Any:
    return SimpleNamespace(ledger_path=path)  # all _writes_after reads of a stack


def _woken_worker_keeps_its_fenced_answer(conn: sqlite3.Connection) -> None:
    """What rail_worker.execute.record_fenced writes for a stamped answer, once the reconciler made it UNKNOWN."""
    put_intent(conn, SIK, "UNKNOWN", amount=100, now=1)
    with transaction(conn):
        intents.finish_attempt(conn, M, SIK, 1, now=WOKE + 1, outcome="FENCED_APPLIED", rail_entity_id="rfnd_1")
        audit.append(conn, "FENCED_OUTCOME", {"merchant_id": M, "sik": SIK, "attempt_seq": 1, "outcome": "APPLIED",
                                              "rail_entity_id": "rfnd_1", "worker": OLD}, WOKE + 1)  # fmt: skip
        intents.settle_from_evidence(conn, M, SIK, now=WOKE + 1, actor=OLD)


def test_keeping_a_fenced_answer_is_not_a_write_of_the_woken_worker(ledger: sqlite3.Connection,
                                                                    ledger_path: Path) -> None:  # fmt: skip
    _woken_worker_keeps_its_fenced_answer(ledger)
    kinds = [r[0] for r in ledger.execute("SELECT kind FROM audit_log WHERE ts > ? ORDER BY seq", (WOKE,))]
    assert kinds == ["ATTEMPT_FINISHED", "FENCED_OUTCOME", "TRANSITION"]
    assert _writes_after(_stack(ledger_path), OLD, WOKE) == []


def test_a_transition_of_the_woken_worker_is_a_write(ledger: sqlite3.Connection, ledger_path: Path) -> None:
    put_intent(ledger, SIK, "UNKNOWN", amount=100, now=1)
    with transaction(ledger):
        intents.transition(ledger, M, SIK, Event.QUARANTINE, now=WOKE + 1, actor=OLD)
    assert _writes_after(_stack(ledger_path), OLD, WOKE) == ["seq 5 TRANSITION QUARANTINE"]
