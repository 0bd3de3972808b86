"""A payout's X-Payout-Idempotency key (ADR 0028): the SIK, the same on every attempt of one generation, and a new
one after each attempt the rail refused — a first attempt's refusal or a retry's — because RazorpayX keeps the
first answer to a key, refusals too, and would answer a reopened payout with it for ever."""

from __future__ import annotations

import sqlite3

from ledger import intents
from ledger.db import transaction
from ledger.queries import PAYOUT_TOOL
from rail_worker.execute import rail_request
from tests.ledger.helpers import put_intent
from tests.mandates import MERCHANT

SIK = "K" * 32
PAYEE = "fa_K0000000000001"
PARAMS = {"amount": 48_000, "notes": {}, "account_number": "7878780080316316", "mode": "IMPS",
          "purpose": "vendor bill", "queue_if_low_balance": False}  # fmt: skip


def attempt(conn: sqlite3.Connection, seq: int, outcome: str) -> None:
    with transaction(conn):
        conn.execute(
            """INSERT INTO intent_attempts (merchant_id, sik, attempt_seq, lease_epoch, started_at, finished_at,
                                            outcome) VALUES (?, ?, ?, 1, ?, ?, ?)""",
            (MERCHANT, SIK, seq, seq * 10, seq * 10 + 1, outcome),
        )  # fmt: skip


def key(conn: sqlite3.Connection) -> str:
    intent = intents.require_intent(conn, MERCHANT, SIK)
    return str(rail_request(intent, refusals=intents.refused_attempts(conn, MERCHANT, SIK))["idempotency_key"])


def test_the_key_is_the_sik_until_the_rail_refuses_and_then_counts_every_refusal(ledger: sqlite3.Connection) -> None:
    put_intent(ledger, SIK, "AUTHORIZED", amount=48_000, tool=PAYOUT_TOOL, subject=PAYEE, params=PARAMS)
    assert key(ledger) == SIK
    attempt(ledger, 1, "AMBIGUOUS")  # an answer lost: the retry must carry the same key
    assert key(ledger) == SIK
    attempt(ledger, 2, "REJECTED_AFTER_RETRY")  # the retry refused (low balance): that key now holds the refusal
    assert key(ledger) == f"{SIK}-1"
    attempt(ledger, 3, "REJECTED")
    assert key(ledger) == f"{SIK}-2"
    request = rail_request(intents.require_intent(ledger, MERCHANT, SIK), refusals=2)
    # Whatever the key, the stamps stay the SIK: the reconciler finds an entity of any generation.
    assert request["reference_id"] == "ilk_" + SIK and request["notes"]["interlock_sik"] == SIK
    assert len(request["idempotency_key"]) <= 36  # RazorpayX's limit


def test_every_money_call_names_whose_it_is_except_the_retry_of_one_sent_before_owners_were_stamped(
    ledger: sqlite3.Connection,
) -> None:
    """ADR 0029: a restored shard serving several merchants records an entity its ledger lost under the merchant and
    agent the entity's notes name. A retry must send the body its first attempt sent (SPEC §14: the same key with
    another body is a 400), so an intent first sent without those notes keeps going without them."""
    put_intent(ledger, SIK, "AUTHORIZED", amount=48_000, tool=PAYOUT_TOOL, subject=PAYEE, params=PARAMS)
    assert not intents.sent_without_owner(ledger, MERCHANT, SIK)  # never sent: the first attempt names its owner
    first = rail_request(intents.require_intent(ledger, MERCHANT, SIK))
    assert first["notes"] == {"interlock_sik": SIK, "interlock_merchant": MERCHANT, "interlock_agent": "agent_demo"}
    with transaction(ledger):
        intents.start_attempt(ledger, MERCHANT, SIK, now=5, lease_owner="w", lease_epoch=1, lease_expires_at=9,
                              request=first)  # fmt: skip
    assert not intents.sent_without_owner(ledger, MERCHANT, SIK)

    older = "L" * 32
    put_intent(ledger, older, "AUTHORIZED", amount=48_000, tool=PAYOUT_TOOL, subject=PAYEE, params=PARAMS)
    unowned = rail_request(intents.require_intent(ledger, MERCHANT, older), owner=False)
    assert unowned["notes"] == {"interlock_sik": older}
    with transaction(ledger):
        intents.start_attempt(ledger, MERCHANT, older, now=5, lease_owner="w", lease_epoch=1, lease_expires_at=9,
                              request=unowned)  # fmt: skip
    assert intents.sent_without_owner(ledger, MERCHANT, older)
