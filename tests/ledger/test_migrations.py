"""A ledger file made by an earlier release opens on this one (ledger/db.py): what was added since is added, and
filled from what the file already holds, in the transaction that adds it."""

from __future__ import annotations

from pathlib import Path

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
