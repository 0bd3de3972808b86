"""Ownership is fenced where money is admitted (SPEC §15, ADR 0014): the admit transaction refuses a Decision for a
merchant the map its ledger accepted gives another shard — moved while the Decision waited in this shard's Redis,
or routed here by a stale map — and a rail worker whose own map is not the ledger's admits nothing until it is.
Nothing is recorded as an intent for a refused Decision; the agent is told the same call is safe to repeat.
In-process over a real SQLite ledger (tests/engine/send_world.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock.messages import CallerAction, Decision, IntentTerms, Verdict
from interlock.shards import Ownership
from ledger import audit, ownership
from ledger.db import open_ledger, transaction
from rail_worker.admit import admit
from rail_worker.ownership import SHARD_MAP_STALE, SHARD_NOT_OWNER, OwnershipFence
from rail_worker.runtime import RailRuntime
from tests.engine.send_world import SETTLEMENT, World, make_world
from tests.mandates import AGENT, MERCHANT


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    made = make_world(tmp_path, monkeypatch)
    monkeypatch.setattr("rail_worker.admit.now_ms", made.clock)
    yield made
    made.close()


def decision(world: World, request_id: str, sik: str = "S" * 32) -> Decision:
    terms = IntentTerms(merchant_id=MERCHANT, tool=SETTLEMENT, subject="balance", amount_minor=50000, currency="INR")
    return Decision(request_id=request_id, agent_id=AGENT, merchant_id=MERCHANT, tool=SETTLEMENT, sik=sik,
                    terms=terms, params={"amount": 50000, "notes": {}}, params_hash="ph", verdict=Verdict.ALLOW,
                    reason_code="ALLOWED", results=[], mandate_id=world.mandate.mandate_id,
                    mandate_hash=world.mandate.mandate_hash, operation_ref=None, window=1,
                    decided_at_ms=world.clock())  # fmt: skip


def accept(world: World, shard: str, epoch: int, home: str) -> None:
    """What `interlock shards apply` writes into *shard*'s ledger: a map that puts MERCHANT on *home*."""
    conn = open_ledger(world.path)
    try:
        with transaction(conn):
            ownership.accept(conn, shard, Ownership(epoch, ("s0", "s1"), {MERCHANT: home}), now=world.clock())
    finally:
        conn.close()


def runtime(world: World, fence: OwnershipFence) -> RailRuntime:
    rt = world.runtime()
    rt.fence = fence
    return rt


def count(world: World, table: str) -> int:
    return int(open_ledger(world.path).execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def refused(world: World, rt: RailRuntime, request_id: str, reason: str) -> None:
    before = count(world, "intents")
    admission = admit(rt, decision(world, request_id))
    assert admission.execute is None and admission.outcome is not None
    assert (admission.outcome.state, admission.outcome.reason_code) == ("BLOCKED", reason)
    assert admission.outcome.caller_action is CallerAction.RETRY_SAME_CALL  # nothing recorded: the repeat is safe
    assert count(world, "intents") == before
    row = open_ledger(world.path).execute("SELECT verdict, reason_code FROM decisions WHERE request_id = ?",
                                          (request_id,)).fetchone()  # fmt: skip
    assert tuple(row) == ("BLOCK", reason)  # the refusal itself is on the record (and in the audit chain)


def test_a_decision_that_waited_while_its_merchant_moved_is_refused_with_nothing_recorded_as_an_intent(
    world: World,
) -> None:
    rt = runtime(world, OwnershipFence("s0"))  # a rail worker started without the map, as deploy/sharded.py does
    accept(world, "s0", 1, home="s1")  # `shards apply` moved the merchant to s1 while this Decision was queued on s0
    refused(world, rt, "req-queued-before-the-move", SHARD_NOT_OWNER)
    refused(world, rt, "req-queued-before-the-move", SHARD_NOT_OWNER)  # redelivered: refused again, recorded once
    accept(world, "s0", 2, home="s0")  # moved back: this shard owns it again
    admission = admit(rt, decision(world, "req-after-moving-back"))
    assert admission.execute is not None  # admitted and AUTHORIZED: the fence let the owner's call through
    assert audit.verify_chain(open_ledger(world.path)) is None


def test_a_rail_worker_whose_map_is_not_the_ledgers_admits_nothing_until_its_file_is_the_applied_one(
    world: World, tmp_path: Path,
) -> None:
    path = tmp_path / "shards.yaml"

    def write(epoch: int, home: str) -> None:
        path.write_text("shards:\n  s0: {redis_url: 'redis://127.0.0.1:7000/0', ledger: s0.sqlite3}\n"
                        "  s1: {redis_url: 'redis://127.0.0.1:7001/0', ledger: s1.sqlite3}\n"
                        f"merchants:\n  {MERCHANT}: {home}\nepoch: {epoch}\n")  # fmt: skip

    write(1, "s0")
    rt = runtime(world, OwnershipFence.load("s0", path))
    accept(world, "s0", 2, home="s0")  # the ledger accepted epoch 2; this process still holds epoch 1
    refused(world, rt, "req-stale-process", SHARD_MAP_STALE)  # even for a merchant both maps give this shard
    write(2, "s0")  # the applied map reaches the file: the worker re-reads it and agrees with its ledger
    assert admit(rt, decision(world, "req-after-reload")).execute is not None


def test_without_a_map_in_the_ledger_the_processs_own_map_decides_and_without_either_there_is_one_shard(
    world: World,
) -> None:
    other = OwnershipFence("s0", held=Ownership(0, ("s0", "s1"), {MERCHANT: "s1"}))
    refused(world, runtime(world, other), "req-routed-by-a-stale-ingress", SHARD_NOT_OWNER)
    assert admit(runtime(world, OwnershipFence("0")), decision(world, "req-one-shard")).execute is not None
