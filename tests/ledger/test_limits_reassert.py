"""ledger.limits.reassert: what an intent re-entering AUTHORIZED is judged against now — the mandate (G1), the
grant's range and currency (G2), G3's windows and fee budget and the task ceiling — and the exact result each
refusal returns, in the order they are checked."""

from __future__ import annotations

import sqlite3
from typing import Any

from interlock.fees import FeeRate
from interlock.task import EXCEEDS_TASK_CEILING, TASK_WRONG_AUDIENCE
from interlock.verdicts import allow, block
from ledger.db import transaction
from ledger.intents import Intent, finish_attempt
from ledger.limits import reassert
from tests.ledger.helpers import put_intent
from tests.mandates import AGENT, make_mandate

DAY = 86_400_000
NOW = 1_800_000_000_000
ISSUED, EXPIRES = 1_700_000_000_000, 2_000_000_000_000  # the example mandate's
SIK = "H" * 32
RATE = FeeRate(fee_per_mille=10, tax_percent=0)  # a fee is amount / 100, rounded up
NO_LIMITS: dict[str, Any] = {"limits.windows": [], "limits.fee_budgets": {}}


def held(conn: sqlite3.Connection, amount: int = 1000, **kw: Any) -> Intent:
    """The intent a person is about to release: HELD, so it already counts against G3 windows."""
    return put_intent(conn, SIK, "HELD", amount=amount, now=NOW - 10, **kw)


def test_an_intent_inside_everything_is_reasserted_under_the_current_mandate(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate()
    assert reassert(ledger, held(ledger), mandate, now_ms=NOW, rate=RATE) == allow(
        "REASSERTED", mandate_hash=mandate.mandate_hash, now_ms=NOW
    )


def test_no_mandate_or_one_for_another_agent_or_merchant_is_no_mandate(ledger: sqlite3.Connection) -> None:
    intent = held(ledger)
    refused = block("G1_NO_MANDATE", agent_id=AGENT)
    assert reassert(ledger, intent, None, now_ms=NOW, rate=RATE) == refused
    assert reassert(ledger, intent, make_mandate({"agent_id": "agent_other"}), now_ms=NOW, rate=RATE) == refused
    assert reassert(ledger, intent, make_mandate({"merchant_id": "acc_OTHER00001"}), now_ms=NOW, rate=RATE) == refused


def test_a_mandate_outside_its_validity_is_expired_at_both_ends(ledger: sqlite3.Connection) -> None:
    intent, mandate = held(ledger), make_mandate()
    for now in (EXPIRES, ISSUED - 1):
        assert reassert(ledger, intent, mandate, now_ms=now, rate=RATE) == block(
            "G1_MANDATE_EXPIRED", issued_at=ISSUED, expires_at=EXPIRES, now_ms=now
        )
    assert reassert(ledger, intent, mandate, now_ms=ISSUED, rate=RATE).reason_code == "REASSERTED"


def test_a_tool_no_longer_granted_or_granted_without_a_value_is_not_granted(ledger: sqlite3.Connection) -> None:
    intent = held(ledger)
    revoked = make_mandate(drop=("scope.grants.create_refund",))
    assert reassert(ledger, intent, revoked, now_ms=NOW, rate=RATE) == block("G1_TOOL_NOT_GRANTED",
                                                                             tool="create_refund")  # fmt: skip
    read_only = put_intent(ledger, "F" * 32, "HELD", amount=1000, tool="fetch_payment", now=NOW - 10)
    assert reassert(ledger, read_only, make_mandate(), now_ms=NOW, rate=RATE) == block(
        "G1_TOOL_NOT_GRANTED", tool="fetch_payment")


def test_a_currency_the_grant_no_longer_allows_is_a_mismatch(ledger: sqlite3.Connection) -> None:
    intent = held(ledger, currency="USD")
    assert reassert(ledger, intent, make_mandate(), now_ms=NOW, rate=RATE) == block(
        "G2_CURRENCY_MISMATCH", currency="USD", allowed=["INR"]
    )


def test_the_grant_range_is_inclusive_at_both_ends(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate(NO_LIMITS)  # create_refund: 100 .. 500000
    for sik, amount in (("L" * 32, 99), ("U" * 32, 500_001)):
        intent = put_intent(ledger, sik, "HELD", amount=amount, now=NOW - 10)
        assert reassert(ledger, intent, mandate, now_ms=NOW, rate=RATE) == block(
            "G2_OUTSIDE_RANGE", amount_minor=amount, min_amount_minor=100, max_amount_minor=500_000
        )
    for sik, amount in (("l" * 32, 100), ("u" * 32, 500_000)):
        intent = put_intent(ledger, sik, "HELD", amount=amount, now=NOW - 10)
        assert reassert(ledger, intent, mandate, now_ms=NOW, rate=RATE).reason_code == "REASSERTED"


def test_a_full_window_refuses_the_release_and_the_intent_itself_is_not_counted(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate({"limits.windows": [{"window_ms": DAY, "max_calls": 2, "max_amount_minor": 3000,
                                                "currency": "INR"}], "limits.fee_budgets": {}})  # fmt: skip
    intent = held(ledger, amount=1000)
    put_intent(ledger, "A" * 32, "APPLIED", amount=2000, now=NOW - 5)
    assert reassert(ledger, intent, mandate, now_ms=NOW, rate=RATE).reason_code == "REASSERTED"  # 2 calls, 3000
    put_intent(ledger, "B" * 32, "AUTHORIZED", amount=1, now=NOW - 5)
    assert reassert(ledger, intent, mandate, now_ms=NOW, rate=RATE) == block(
        "G3_WINDOW_CALLS", window=0, window_ms=DAY, calls=2, max_calls=2
    )


def test_a_window_amount_filled_since_the_hold_refuses_the_release(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate({"limits.windows": [{"window_ms": DAY, "max_amount_minor": 3000, "currency": "INR"}],
                            "limits.fee_budgets": {}})  # fmt: skip
    intent = held(ledger, amount=1000)
    put_intent(ledger, "A" * 32, "APPLIED", amount=2001, now=NOW - 5)
    assert reassert(ledger, intent, mandate, now_ms=NOW, rate=RATE) == block(
        "G3_WINDOW_AMOUNT", window=0, window_ms=DAY, counted_minor=2001, amount_minor=1000, max_amount_minor=3000
    )


def test_a_settlement_is_refused_when_the_fee_budget_filled_since(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate({"limits.windows": [], "limits.fee_budgets": {"INR": {"window_ms": DAY,
                                                                                 "max_fee_minor": 500}}})  # fmt: skip
    intent = held(ledger, amount=20_000, tool="create_instant_settlement", subject="balance")  # projected 200
    other = put_intent(ledger, "A" * 32, "APPLIED", amount=10_000, tool="create_instant_settlement",
                       subject="balance", now=NOW - 5)  # fmt: skip
    with transaction(ledger):
        finish_attempt(ledger, other.merchant_id, other.sik, 1, now=NOW - 4, outcome="APPLIED", fee_minor=300)
    assert reassert(ledger, intent, mandate, now_ms=NOW, rate=RATE).reason_code == "REASSERTED"  # 300 + 200
    put_intent(ledger, "B" * 32, "UNKNOWN", amount=1, tool="create_instant_settlement", subject="balance",
               now=NOW - 3)  # fmt: skip
    assert reassert(ledger, intent, mandate, now_ms=NOW, rate=RATE) == block(
        "G3_FEE_BUDGET", counted_fee_minor=301, projected_fee_minor=200, max_fee_minor=500, window_ms=DAY
    )


def test_a_task_ceiling_filled_since_refuses_the_release(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate(NO_LIMITS)
    intent = held(ledger, amount=1000, task_id="task_1", task_ceiling_minor=3000)
    put_intent(ledger, "A" * 32, "APPLIED", amount=2000, task_id="task_1", task_ceiling_minor=3000)
    assert reassert(ledger, intent, mandate, now_ms=NOW, rate=RATE) == allow(
        "REASSERTED", mandate_hash=mandate.mandate_hash, now_ms=NOW
    )
    put_intent(ledger, "B" * 32, "AUTHORIZED", amount=1, task_id="task_1", task_ceiling_minor=3000)
    assert reassert(ledger, intent, mandate, now_ms=NOW, rate=RATE) == block(
        EXCEEDS_TASK_CEILING, task_id="task_1", counted_minor=2001, amount_minor=1000, max_amount_minor=3000
    )


def test_a_task_without_a_ceiling_for_the_tool_caps_nothing(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate(NO_LIMITS)
    intent = held(ledger, amount=1000, task_id="task_1")
    put_intent(ledger, "A" * 32, "APPLIED", amount=400_000, task_id="task_1")
    assert reassert(ledger, intent, mandate, now_ms=NOW, rate=RATE).reason_code == "REASSERTED"


def test_an_intent_held_under_a_v1_task_is_refused_at_release(ledger: sqlite3.Connection) -> None:
    # Admitted before task v2 (no audience, no signer recorded): released now, today's rule refuses it.
    mandate = make_mandate(NO_LIMITS)
    intent = held(ledger, amount=1000, task_id="task_1", task_signer=None)
    check = reassert(ledger, intent, mandate, now_ms=NOW, rate=RATE)
    assert check.reason_code == TASK_WRONG_AUDIENCE and "re-sign it as v2" in check.detail["error"]


def test_a_ceiling_without_a_task_caps_nothing(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate(NO_LIMITS)
    intent = held(ledger, amount=1000, task_ceiling_minor=1)
    assert reassert(ledger, intent, mandate, now_ms=NOW, rate=RATE).reason_code == "REASSERTED"
