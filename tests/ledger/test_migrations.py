"""A ledger file made by an earlier release opens on this one (ledger/db.py): what was added since is added, and
filled from what the file already holds, in the transaction that adds it."""

from __future__ import annotations

from pathlib import Path

from interlock.clock import now_ms
from ledger import lifecycle, sightings
from ledger.db import open_ledger, transaction
from ledger.queries import PAYOUT_TOOL
from tests.ledger.helpers import put_intent

M = "acc_DEMO000001"
SIK = "G" * 32


def test_a_ledger_from_before_sightings_were_marked_taken_marks_those_the_lifecycle_observed(tmp_path: Path) -> None:
    """A sighting whose event id is in the lifecycle's history was taken; any other is left for the follower to take
    (the reversal whose observation failed before this release among them)."""
    path = tmp_path / "ledger.sqlite3"
    conn = open_ledger(path)
    put_intent(conn, SIK, "APPLIED", amount=48_000, tool=PAYOUT_TOOL, subject="fa_G0000000001")
    with transaction(conn):
        for ref, status, at in (("evt_p", "processed", 100), ("evt_r", "reversed", 200)):
            sightings.record(conn, merchant_id=M, sik=SIK, source=sightings.WEBHOOK, ref=ref, event=f"payout.{status}",
                             entity_id="pout_G1", status=status, entity={"id": "pout_G1", "status": status},
                             now=at)  # fmt: skip
        lifecycle.observe(conn, merchant_id=M, sik=SIK, tool=PAYOUT_TOOL, entity_id="pout_G1", status="processed",
                          entity={"id": "pout_G1", "status": "processed"}, source=lifecycle.WEBHOOK, ref="evt_p",
                          now=100, next_poll_at=None, actor="test")  # fmt: skip
    conn.executescript("DROP INDEX rail_sightings_untaken; ALTER TABLE rail_sightings DROP COLUMN taken_at;")
    conn.close()

    conn = open_ledger(path)
    try:
        taken = dict(conn.execute("SELECT ref, taken_at FROM rail_sightings").fetchall())
        assert taken == {"evt_p": 100, "evt_r": None}
        assert [seen.ref for _, _, seen in sightings.untaken(conn)] == ["evt_r"]
        assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'rail_sightings_untaken'").fetchone()
    finally:
        conn.close()


def test_a_ledger_from_before_the_owed_list_owes_what_its_follower_would_have_looked_for_at_its_start(
        tmp_path: Path) -> None:  # fmt: skip
    """The APPLIED intents of the last 7 days that have no rail_status row are owed one; an older one (not followed
    at a start before this release either) and a followed one are not. Done once: a second open adds nothing."""
    path = tmp_path / "ledger.sqlite3"
    conn = open_ledger(path)
    day = 86_400_000
    recent, followed, old = "R" * 32, "F" * 32, "O" * 32
    put_intent(conn, recent, "APPLIED", amount=5000, now=now_ms() - day)
    put_intent(conn, followed, "APPLIED", amount=5000, now=now_ms() - day)
    put_intent(conn, old, "APPLIED", amount=5000, now=now_ms() - 8 * day)
    with transaction(conn):
        lifecycle.observe(conn, merchant_id=M, sik=followed, tool="create_refund", entity_id="rfnd_F1",
                          status="pending", entity={"id": "rfnd_F1", "status": "pending"}, source=lifecycle.ANSWER,
                          ref=None, now=now_ms(), next_poll_at=None, actor="test")  # fmt: skip
    conn.executescript("DROP TRIGGER intents_applied_owe_rail_status; DROP TABLE rail_status_owed; "
                       "PRAGMA user_version = 0;")  # fmt: skip
    conn.close()

    conn = open_ledger(path)
    try:
        assert [s for _, _, s in lifecycle.untracked(conn)] == [recent]
        with transaction(conn):
            lifecycle.drop_owed(conn, M, recent)
    finally:
        conn.close()
    conn = open_ledger(path)
    try:
        assert lifecycle.untracked(conn) == [], "filled once"
        put_intent(conn, "N" * 32, "APPLIED", amount=5000, now=1)
        assert [s for _, _, s in lifecycle.untracked(conn)] == ["N" * 32], "and owed by the trigger from then on"
    finally:
        conn.close()


def test_a_ledger_from_before_acknowledgements_named_their_observation_raises_again_what_changed_after_one(
        tmp_path: Path) -> None:  # fmt: skip
    """An acknowledgement given before this release covers the observation before it (its row's last change before
    the acknowledgement's audit record): an attention whose row changed after it waits for a person again, one whose
    row did not stays acknowledged. Until a writer on this release opens the file, a reader reads it as before."""
    path = tmp_path / "ledger.sqlite3"
    conn = open_ledger(path)
    grown, unchanged = "X" * 32, "Y" * 32

    def observe(sik: str, tool: str, entity_id: str, status: str, now: int, **amounts: int) -> None:
        with transaction(conn):
            lifecycle.observe(conn, merchant_id=M, sik=sik, tool=tool, entity_id=entity_id, status=status,
                              entity={"id": entity_id, "status": status, "amount": 5000, **amounts},
                              source=lifecycle.POLL, ref=None, now=now, next_poll_at=None, actor="test")  # fmt: skip

    def acknowledge(sik: str, attention: str, now: int) -> None:
        with transaction(conn):
            lifecycle.acknowledge(conn, merchant_id=M, sik=sik, attention=attention, operator="asha", note="seen",
                                  credential=None, now=now)  # fmt: skip

    put_intent(conn, grown, "APPLIED", amount=5000, tool="create_instant_settlement", subject="balance")
    put_intent(conn, unchanged, "APPLIED", amount=5000)
    observe(grown, "create_instant_settlement", "setlod_X", "partially_processed", 10, amount_settled=4000,
            amount_reversed=1000)  # fmt: skip
    observe(unchanged, "create_refund", "rfnd_Y", "failed", 11)
    acknowledge(grown, lifecycle.SETTLEMENT_REVERSED, 12)
    acknowledge(unchanged, lifecycle.REFUND_FAILED, 13)
    observe(grown, "create_instant_settlement", "setlod_X", "reversed", 14, amount_settled=0, amount_reversed=5000)
    conn.executescript("ALTER TABLE rail_status DROP COLUMN raised_seq; "
                       "ALTER TABLE rail_attention_acks DROP COLUMN raised_seq;")  # fmt: skip
    conn.close()

    conn = open_ledger(path, readonly=True)
    try:
        assert lifecycle.needs_attention(conn) == [], "read as before: an acknowledgement covered its attention"
        assert {r.sik for r, _ in lifecycle.acknowledged(conn)} == {grown, unchanged}
    finally:
        conn.close()
    conn = open_ledger(path)
    try:
        assert [(r.sik, r.status) for r in lifecycle.needs_attention(conn)] == [(grown, "reversed")]
        assert [r.sik for r, _ in lifecycle.acknowledged(conn)] == [unchanged]
        row = lifecycle.current(conn, M, grown)
        assert row is not None and row.raised_seq is not None
        kind = conn.execute("SELECT kind, payload_json FROM audit_log WHERE seq = ?", (row.raised_seq,)).fetchone()
        assert kind[0] == "RAIL_STATUS" and '"status":"reversed"' in kind[1]
    finally:
        conn.close()
