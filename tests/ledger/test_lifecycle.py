"""The lifecycle after APPLIED (ledger/lifecycle.py): observations arrive in any order and twice; a final status is
never overwritten by an earlier one, a second final one is raised for a person, and each change is audit-chained."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from interlock.errors import OperatorRefused
from ledger import audit, lifecycle
from ledger.db import open_ledger, transaction
from ledger.states import State
from tests.ledger.helpers import put_intent

M = "acc_DEMO000001"
SIK = "L" * 32
REFUND, SETTLEMENT = "create_refund", "create_instant_settlement"


@pytest.fixture
def ledger(tmp_path: Path) -> sqlite3.Connection:
    conn = open_ledger(tmp_path / "ledger.sqlite3")
    put_intent(conn, SIK, "APPLIED", amount=5000)
    return conn


def see(conn: sqlite3.Connection, status: str, *, tool: str = REFUND, entity_id: str = "rfnd_L1",
        source: str = lifecycle.WEBHOOK, ref: str | None = None, now: int = 100,
        **amounts: int) -> lifecycle.RailStatus | None:  # fmt: skip
    entity = {"id": entity_id, "status": status, "amount": 5000, **amounts}
    with transaction(conn):
        return lifecycle.observe(conn, merchant_id=M, sik=SIK, tool=tool, entity_id=entity_id, status=status,
                                 entity=entity, source=source, ref=ref, now=now, next_poll_at=now + 10,
                                 actor="test")  # fmt: skip


def statuses(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    return [(h["status"], h["taken"]) for h in lifecycle.history(conn, M, SIK)]


def test_a_refund_moves_pending_to_processed_and_is_not_fetched_again(ledger) -> None:
    first = see(ledger, "pending", source=lifecycle.ANSWER)
    assert first is not None and (first.status, first.final, first.next_poll_at) == ("pending", False, 110)
    done = see(ledger, "processed", ref="evt_2", now=200)
    assert done is not None and (done.status, done.final, done.next_poll_at, done.attention) == \
        ("processed", True, None, None)  # fmt: skip
    assert lifecycle.due(ledger, 10**9) == []
    assert statuses(ledger) == [("pending", "moved"), ("processed", "moved")]


def test_an_earlier_status_arriving_late_changes_nothing(ledger) -> None:
    see(ledger, "processed", now=100)
    assert see(ledger, "pending", now=200) is None
    row = lifecycle.current(ledger, M, SIK)
    assert row is not None and (row.status, row.updated_at) == ("processed", 100)
    assert statuses(ledger) == [("processed", "moved"), ("pending", "stale")]


def test_the_same_status_seen_again_adds_nothing(ledger) -> None:
    see(ledger, "pending")
    assert see(ledger, "pending", source=lifecycle.POLL, now=300) is None
    assert statuses(ledger) == [("pending", "moved")]


def test_a_failed_refund_is_raised_for_a_person_and_stays_applied(ledger) -> None:
    see(ledger, "pending")
    row = see(ledger, "failed", ref="evt_f", now=150)
    assert row is not None and (row.final, row.attention) == (True, lifecycle.REFUND_FAILED)
    assert [r.sik for r in lifecycle.needs_attention(ledger)] == [SIK]
    state = ledger.execute("SELECT state FROM intents WHERE sik = ?", (SIK,)).fetchone()[0]
    assert state == State.APPLIED.value, "the lifecycle is not a state of the money machine (I4)"


def test_a_second_final_status_is_kept_as_a_conflict_not_taken(ledger) -> None:
    see(ledger, "processed", now=100)
    row = see(ledger, "failed", now=200)
    assert row is not None and (row.status, row.attention) == ("processed", lifecycle.CONFLICTING_FINAL)
    assert statuses(ledger) == [("processed", "moved"), ("failed", "conflict")]


def test_a_settlement_partly_reversed_is_raised_and_more_progress_is_taken(ledger) -> None:
    see(ledger, "initiated", tool=SETTLEMENT, entity_id="setlod_1", amount_settled=0, amount_reversed=0)
    part = see(ledger, "partially_processed", tool=SETTLEMENT, entity_id="setlod_1", now=200, amount_settled=600,
               amount_pending=400, amount_reversed=0)  # fmt: skip
    assert part is not None and (part.final, part.attention) == (False, None)
    more = see(ledger, "partially_processed", tool=SETTLEMENT, entity_id="setlod_1", now=300, amount_settled=600,
               amount_pending=0, amount_reversed=400)  # fmt: skip
    assert more is not None and more.attention == lifecycle.SETTLEMENT_REVERSED
    assert more.amounts["amount_reversed"] == 400
    assert see(ledger, "partially_processed", tool=SETTLEMENT, entity_id="setlod_1", now=400, amount_settled=600,
               amount_pending=400, amount_reversed=0) is None, "less progress is an older reading"  # fmt: skip
    rev = see(ledger, "reversed", tool=SETTLEMENT, entity_id="setlod_1", now=500, amount_reversed=1000)
    assert rev is not None and (rev.final, rev.attention) == (True, lifecycle.SETTLEMENT_REVERSED)


def test_another_entity_carrying_the_stamp_is_raised_not_followed(ledger) -> None:
    see(ledger, "processed", entity_id="rfnd_L1")
    row = see(ledger, "processed", entity_id="rfnd_OTHER", ref="evt_x", now=200)
    assert row is not None and (row.entity_id, row.attention) == ("rfnd_L1", lifecycle.SECOND_ENTITY)
    payload = json.loads(ledger.execute(
        "SELECT payload_json FROM audit_log WHERE kind = 'RAIL_STATUS' ORDER BY seq DESC LIMIT 1").fetchone()[0])
    assert (payload["second_entity_id"], payload["rail_entity_id"]) == ("rfnd_OTHER", "rfnd_L1")


def test_every_change_is_on_the_audit_chain(ledger) -> None:
    see(ledger, "pending", source=lifecycle.ANSWER)
    see(ledger, "processed", ref="evt_p", now=200)
    records = [json.loads(r[0]) for r in ledger.execute(
        "SELECT payload_json FROM audit_log WHERE kind = 'RAIL_STATUS' ORDER BY seq")]
    assert [(r["status"], r["previous"], r["source"], r["ref"]) for r in records] == \
        [("pending", None, "answer", None), ("processed", "pending", "webhook", "evt_p")]  # fmt: skip
    assert audit.verify_chain(ledger) is None


def test_the_backfill_brings_every_fetch_not_final_forward(ledger) -> None:
    see(ledger, "pending", now=100)  # next fetch at 110
    with transaction(ledger):
        lifecycle.schedule(ledger, M, SIK, next_poll_at=10_000, polled=True)
    assert lifecycle.due(ledger, 5_000) == []
    with transaction(ledger):
        assert lifecycle.poll_soon(ledger, since=0, at=5_000) == 1
    assert [r.sik for r in lifecycle.due(ledger, 5_000)] == [SIK]


def test_an_applied_intent_not_followed_yet_is_found_once(ledger) -> None:
    ledger.execute("UPDATE intents SET rail_entity_id = 'rfnd_L1' WHERE sik = ?", (SIK,))
    assert [s for _, _, s in lifecycle.untracked(ledger)] == [SIK]
    see(ledger, "pending")
    assert lifecycle.untracked(ledger) == []


def test_intents_are_owed_a_rail_status_in_the_order_they_were_applied_whatever_their_stamps(ledger) -> None:
    """Owed from the transaction that makes the intent APPLIED (a trigger, whoever writes it), so a later commit
    with an earlier updated_at is found after the earlier commit, never lost behind it."""
    later, earlier = "M" * 32, "N" * 32
    put_intent(ledger, later, "APPLIED", amount=5000, now=5_000)
    put_intent(ledger, earlier, "APPLIED", amount=5000, now=3_500)
    put_intent(ledger, "O" * 32, "UNKNOWN", amount=5000, now=6_000)
    owed = lifecycle.untracked(ledger)
    assert [s for _, _, s in owed] == [SIK, later, earlier]
    assert [s for _, _, s in lifecycle.untracked(ledger, after=owed[1][0])] == [earlier]
    assert [s for _, _, s in lifecycle.untracked(ledger, limit=1)] == [SIK]


def _acknowledge(conn: sqlite3.Connection, attention: str, *, now: int, raised_seq: int | None = None) -> None:
    with transaction(conn):
        lifecycle.acknowledge(conn, merchant_id=M, sik=SIK, attention=attention, operator="asha", note="in hand",
                              credential=None, now=now, **({} if raised_seq is None else {"raised_seq": raised_seq}))


def test_an_acknowledged_small_settlement_reversal_does_not_silence_a_larger_one(ledger) -> None:
    """An acknowledgement covers the observation it was given for: a later one that changes the money at stake (a
    larger amount_reversed, another status) raises the attention afresh — waiting for a person, counted, and not
    listed as acknowledged — while one that does not (the settlement settling more of the rest) leaves it covered."""
    kw = {"tool": SETTLEMENT, "entity_id": "setlod_1", "amount_requested": 5_000_000}
    see(ledger, "initiated", amount_settled=0, amount_reversed=0, amount_pending=5_000_000, **kw)
    small = see(ledger, "partially_processed", now=200, amount_settled=2_000_000, amount_reversed=100_000,
                amount_pending=2_900_000, **kw)  # fmt: skip
    assert small is not None and small.attention == lifecycle.SETTLEMENT_REVERSED
    _acknowledge(ledger, lifecycle.SETTLEMENT_REVERSED, now=250)
    assert lifecycle.needs_attention(ledger) == []
    more = see(ledger, "partially_processed", now=300, amount_settled=4_000_000, amount_reversed=100_000,
               amount_pending=900_000, **kw)  # fmt: skip
    assert more is not None and lifecycle.needs_attention(ledger) == [], "settled more, reversed no more: covered"
    large = see(ledger, "reversed", now=400, amount_settled=0, amount_reversed=4_900_000, amount_pending=0, **kw)
    assert large is not None and large.attention == lifecycle.SETTLEMENT_REVERSED
    assert [r.amounts["amount_reversed"] for r in lifecycle.needs_attention(ledger)] == [4_900_000]
    assert more.raised_seq == small.raised_seq and large.raised_seq is not None and small.raised_seq is not None
    assert large.raised_seq > small.raised_seq
    assert dict(lifecycle.attention_counts(ledger)) == {lifecycle.SETTLEMENT_REVERSED: 1}
    assert lifecycle.attention_counts(ledger, acknowledged=True) == []
    assert lifecycle.acknowledged(ledger) == [] and lifecycle.acknowledgement(ledger, large) is None
    with pytest.raises(OperatorRefused, match="raised again since"):  # acting on what the person saw before
        _acknowledge(ledger, lifecycle.SETTLEMENT_REVERSED, now=450, raised_seq=small.raised_seq)
    _acknowledge(ledger, lifecycle.SETTLEMENT_REVERSED, now=500, raised_seq=large.raised_seq)
    assert lifecycle.needs_attention(ledger) == []
    [(row, ack)] = lifecycle.acknowledged(ledger)
    assert (row.amounts["amount_reversed"], ack.at) == (4_900_000, 500)
    records = [json.loads(r[0]) for r in ledger.execute(
        "SELECT payload_json FROM audit_log WHERE kind = 'RAIL_ATTENTION_ACK' ORDER BY seq")]
    assert [(r["status"], r["amounts"]["amount_reversed"], r["raised_seq"]) for r in records] == \
        [("partially_processed", 100_000, small.raised_seq), ("reversed", 4_900_000, large.raised_seq)], \
        "each acknowledgement names the observation it covers"  # fmt: skip
    raised = [json.loads(r[0]) for r in ledger.execute(
        "SELECT payload_json FROM audit_log WHERE seq IN (?, ?) ORDER BY seq", (small.raised_seq, large.raised_seq))]
    assert [(r["status"], r.get("raised")) for r in raised] == [("partially_processed", True), ("reversed", True)]
    assert audit.verify_chain(ledger) is None


def test_a_conflicting_final_status_seen_again_keeps_its_acknowledgement_and_another_raises_it_afresh(
        tmp_path: Path) -> None:  # fmt: skip
    conn = open_ledger(tmp_path / "ledger.sqlite3")
    put_intent(conn, SIK, "APPLIED", amount=48_000, tool="create_payout", subject="fa_L0000000001")
    kw = {"tool": "create_payout", "entity_id": "pout_L1"}
    see(conn, "processed", ref="evt_p", **kw)
    see(conn, "failed", ref="evt_f", now=200, **kw)
    _acknowledge(conn, lifecycle.CONFLICTING_FINAL, now=250)
    see(conn, "failed", ref="evt_f2", now=300, **kw)  # the same contradiction, replayed under another event id
    assert lifecycle.needs_attention(conn) == []
    see(conn, "cancelled", ref="evt_c", now=400, **kw)  # a contradiction not seen before
    assert [(r.status, r.attention) for r in lifecycle.needs_attention(conn)] == \
        [("processed", lifecycle.CONFLICTING_FINAL)]  # fmt: skip


def test_an_acknowledged_second_entity_stays_acknowledged_while_the_intents_own_entity_moves_on(ledger) -> None:
    see(ledger, "pending", entity_id="rfnd_L1")
    see(ledger, "processed", entity_id="rfnd_OTHER", ref="evt_x", now=200)
    _acknowledge(ledger, lifecycle.SECOND_ENTITY, now=250)
    row = see(ledger, "processed", entity_id="rfnd_L1", ref="evt_p", now=300)
    assert row is not None and (row.status, row.attention) == ("processed", lifecycle.SECOND_ENTITY)
    assert lifecycle.needs_attention(ledger) == [], "its own refund processed puts no other money at stake"
