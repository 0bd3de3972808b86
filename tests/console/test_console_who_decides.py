"""In the console, as in the CLI, an approver decides only for the merchants whose mandates name them (issue 46
item 3; ops.approvers.approver_problem): one with a credential whom the intent's mandate does not name cannot
resolve its quarantine or acknowledge its attention — refused, naming who may, with nothing written — and the
named one can."""

from __future__ import annotations

import re
from urllib.parse import unquote

from ledger import lifecycle
from ledger.db import open_ledger, transaction
from ledger.intents import transition
from ledger.states import Event
from ops.context import OpsContext
from tests.console.conftest import APPROVER, APPROVER_TOKEN, OTHER, OTHER_TOKEN, in_process
from tests.ledger.helpers import put_intent
from tests.mandates import MERCHANT

QUARANTINED, ATTENDED = "Q" * 32, "C" * 32


def _intents(ops: OpsContext) -> None:
    """A quarantined refund, and an applied one the bank then failed (REFUND_FAILED), of the example's agent."""
    conn = open_ledger(ops.ledger_path)
    try:
        put_intent(conn, QUARANTINED, "UNKNOWN", amount=20_000)
        with transaction(conn):
            transition(conn, MERCHANT, QUARANTINED, Event.QUARANTINE, now=2)
        put_intent(conn, ATTENDED, "APPLIED", amount=5_000)
        for n, status in enumerate(("pending", "failed")):
            with transaction(conn):
                lifecycle.observe(conn, merchant_id=MERCHANT, sik=ATTENDED, tool="create_refund", entity_id="rfnd_C",
                                  status=status, entity={"id": "rfnd_C", "status": status, "amount": 5_000},
                                  source=lifecycle.POLL, ref=None, now=10 + n, next_poll_at=None,
                                  actor="test")  # fmt: skip
    finally:
        conn.close()


def _written(ops: OpsContext) -> tuple[int, int, int]:
    conn = open_ledger(ops.ledger_path, readonly=True)
    try:
        return (conn.execute("SELECT COUNT(*) FROM audit_log").fetchone()[0],
                conn.execute("SELECT COUNT(*) FROM rail_attention_acks").fetchone()[0],
                conn.execute("SELECT COUNT(*) FROM recon_findings").fetchone()[0])  # fmt: skip
    finally:
        conn.close()


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None, page
    return found.group(1)


def test_an_approver_the_mandate_does_not_name_resolves_and_acknowledges_nothing(ledger_ops: OpsContext) -> None:
    _intents(ledger_ops)
    before = _written(ledger_ops)
    named = f"only {APPROVER} may decide for merchant {MERCHANT}"
    with in_process(ledger_ops) as http:
        http.post("/login", data={"token": OTHER_TOKEN, "next": "/quarantine"})
        page = http.get("/quarantine").text
        assert f"approvers: {APPROVER}" in page, "the page says who may resolve it"
        resolved = http.post(f"/quarantine/{MERCHANT}/{QUARANTINED}/resolve",
                             data={"csrf": _csrf(page), "outcome": "not_applied", "evidence": "checked"})  # fmt: skip
        where = unquote(resolved.headers["location"])
        assert resolved.status_code == 303 and f"{OTHER!r} is not an approver of mandate" in where and named in where
        page = http.get(f"/intents/{MERCHANT}/{ATTENDED}").text
        assert f'<span id="approvers">{APPROVER}</span>' in page
        acked = http.post(f"/intents/{MERCHANT}/{ATTENDED}/acknowledge",
                          data={"csrf": _csrf(page), "attention": "REFUND_FAILED", "note": "on it"})  # fmt: skip
        where = unquote(acked.headers["location"])
        assert acked.status_code == 303 and f"{OTHER!r} is not an approver of mandate" in where and named in where
    assert _written(ledger_ops) == before, "a refusal writes nothing"
    with in_process(ledger_ops) as http:
        http.post("/login", data={"token": APPROVER_TOKEN, "next": "/"})
        page = http.get(f"/intents/{MERCHANT}/{ATTENDED}").text
        acked = http.post(f"/intents/{MERCHANT}/{ATTENDED}/acknowledge",
                          data={"csrf": _csrf(page), "attention": "REFUND_FAILED", "note": "told them"})  # fmt: skip
        assert acked.status_code == 303 and f"acknowledged by {APPROVER}" in unquote(acked.headers["location"])
    assert _written(ledger_ops)[1] == 1
