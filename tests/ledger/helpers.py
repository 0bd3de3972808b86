from __future__ import annotations

import sqlite3

from ledger import intents
from ledger.db import transaction


def propose(conn: sqlite3.Connection, sik: str = "A" * 32, *, merchant_id: str = "acc_TEST", amount: int = 1000,
            now: int = 1) -> intents.Intent:
    with transaction(conn):
        intent = intents.insert_intent(
            conn, merchant_id=merchant_id, sik=sik, tool="create_refund", subject_id="pay_TEST0001",
            amount_minor=amount, currency="INR", params={"speed": "normal"}, params_hash="ph", agent_id="agent_t",
            mandate_id="mnd_t", mandate_hash="mh", operation_ref=None, distinct_reason=None, now=now,
        )  # fmt: skip
    assert intent is not None
    return intent
