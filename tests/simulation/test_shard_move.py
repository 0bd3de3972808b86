"""A merchant moved between shards under the scheduler (simulation.shard_move): the move is made with `shards
apply`'s own code, the checker judges money across both shards, and a shard the merchant left admits nothing."""

from __future__ import annotations

import logging
import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import simulation.shard_move as shard_move
from interlock.queues import ADMIT_JOB, reconcile_hint_key
from simulation.checker import ShardEvidence, check, check_workload
from simulation.rail import JournalEntry
from simulation.redis import QueueFaults, SimRedis
from simulation.run import MOVE, quiet_logs, run_seed
from simulation.scheduler import Scheduler
from simulation.world import Shard
from tests.simulation.test_simulation import _Action, _Answer


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    quiet_logs()
    yield
    logging.disable(logging.NOTSET)


LIMITS = {"a": {"scope": {"grants": {"create_refund": {"value": {"min_amount_minor": 1, "max_amount_minor": 10**6}}}},
                "limits": {"windows": [], "fee_budgets": {}}}}  # fmt: skip


def _ledger(path: Path, rows: list[tuple[str, str, str, str, str, int, str | None]]) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE intents (merchant_id, sik, state, tool, subject_id, amount_minor, rail_entity_id)")
    conn.execute("CREATE TABLE audit_log (seq, ts, kind, payload_json, prev_hash, hash)")
    conn.execute("CREATE TABLE audit_head (id, seq, hash)")
    conn.execute("CREATE TABLE rail_status (sik, attention)")  # what RAISED reads (payouts)
    conn.execute("CREATE TRIGGER absorbing BEFORE UPDATE OF state ON intents WHEN OLD.state IN ('APPLIED', 'BLOCKED') "
                 "AND NEW.state IS NOT OLD.state BEGIN SELECT RAISE(ABORT, 'I4'); END")  # fmt: skip
    conn.executemany("INSERT INTO intents VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()
    return path


def _refund(entity: str, stamp: str, amount: int = 500) -> JournalEntry:
    return JournalEntry("refund", entity, "acct", "pay_1", amount, 0, stamp, 0, amount)


def test_one_action_paid_once_on_each_shard_is_paid_twice(tmp_path: Path) -> None:
    s0 = _ledger(tmp_path / "s0.sqlite3", [("M", "S1", "APPLIED", "create_refund", "pay_1", 500, "rfnd_a")])
    s1 = _ledger(tmp_path / "s1.sqlite3", [("M", "S1", "APPLIED", "create_refund", "pay_1", 500, "rfnd_b")])
    action = _Action("a", "s0", "create_refund", "pay_1", 500)
    told = _Answer(action, {"state": "APPLIED", "sik": "S1", "rail_entity_id": "rfnd_b", "caller_action": "DONE"},
                   "s1")  # fmt: skip
    shards = [ShardEvidence("s0", s0, [_refund("rfnd_a", "S1")], {"pay_1": 800}),
              ShardEvidence("s1", s1, [_refund("rfnd_b", "S1")], {"pay_1": 800})]  # fmt: skip
    found = check(shards, [action], [told], LIMITS, settled=False)
    # Each shard on its own is in order; across them one action was paid twice and the payment past its amount.
    assert sorted({v.kind for v in found}) == ["ONE_ENTITY_PER_ACTION", "OVER_REFUND"]
    assert any("s0:rfnd_a" in v.detail and "s1:rfnd_b" in v.detail for v in found)


def test_an_answer_is_judged_by_the_rail_of_the_shard_that_gave_it(tmp_path: Path) -> None:
    s0 = _ledger(tmp_path / "s0.sqlite3", [])
    s1 = _ledger(tmp_path / "s1.sqlite3", [("M", "S1", "APPLIED", "create_refund", "pay_1", 500, "rfnd_b")])
    action = _Action("a", "s0", "create_refund", "pay_1", 500)  # its merchant has moved from s0 to s1
    body: dict[str, object] = {"state": "APPLIED", "sik": "S1", "rail_entity_id": "rfnd_b", "caller_action": "DONE"}
    shards = [ShardEvidence("s0", s0, [], {"pay_1": 800}),
              ShardEvidence("s1", s1, [_refund("rfnd_b", "S1")], {"pay_1": 800})]  # fmt: skip
    assert check(shards, [action], [_Answer(action, body, "s1")], LIMITS, settled=True) == []
    # Told by s0 of s1's refund: a lie; and s1's money is then for an action none of whose calls reached s1.
    found = check(shards, [action], [_Answer(action, body, "s0")], LIMITS, settled=True)
    assert sorted(v.kind for v in found) == ["LIMIT", "TOLD_APPLIED"]


def test_an_intent_of_a_moved_merchant_in_the_shard_it_left_is_named(tmp_path: Path) -> None:
    s0 = _ledger(tmp_path / "s0.sqlite3", [
        ("acc_Mmv", "S1", "APPLIED", "create_refund", "pay_1", 500, "rfnd_a"),
        ("acc_other", "S2", "APPLIED", "create_refund", "pay_2", 600, "rfnd_c"),
    ])  # fmt: skip
    move = {"merchant": "acc_Mmv", "source": "s0", "target": "s1", "applied_mono_ms": 4_000}
    found = check_workload([ShardEvidence("s0", s0, [], {})], [], [], LIMITS, {"moves": [move]})
    assert [(v.kind, "S1" in v.detail) for v in found] == [("SHARD_MOVED", True)]
    # A move that was refused every time moved nothing: the merchant's intents are where they belong.
    refused = {**move, "applied_mono_ms": None}
    assert check_workload([ShardEvidence("s0", s0, [], {})], [], [], LIMITS, {"moves": [refused]}) == []


def test_what_a_shards_simulated_redis_holds_is_reported_per_merchant_as_shards_apply_reads_it(
    tmp_path: Path,
) -> None:
    sched = Scheduler(1, start_ms=0, max_steps=100)
    redis = SimRedis(sched, "s0", QueueFaults())
    redis.queue("rail:s0").jobs.append(_job('{"merchant_id": "acc_Mmv", "sik": "S1"}'))
    redis.queue("gates:s0").jobs.append(_job("{broken"))
    redis.lists[reconcile_hint_key("s0")] = ["acc_M00|S2|1"]
    shard = Shard("s0", None, redis, None, None, [], tmp_path / "l.sqlite3")  # type: ignore[arg-type]
    held = shard_move.held_for(shard)
    assert held["acc_Mmv"] == ["rail:s0 queued"]
    assert held["?"] == ["gates:s0 queued"]  # unreadable: it may be the moving merchant's, so it blocks a move
    assert held["acc_M00"] == ["reconcile hint"]


def _job(body: str) -> object:
    from simulation.redis import Job

    return Job(ADMIT_JOB, (body,), None, 0)


def test_seeds_that_move_a_merchant_find_no_violation_and_some_moves_are_refused() -> None:
    results = [run_seed(seed, focus=frozenset({MOVE})) for seed in range(1, 13)]
    assert [(r.seed, [str(v) for v in r.violations]) for r in results if not r.ok] == []
    done = sum((r.operator for r in results), Counter())
    # Most moves are made; some find the merchant's first intent already admitted and are refused.
    assert done["merchant moved"] >= 3 and done["move refused"] >= 1, done


def test_a_refund_the_rail_applied_on_smaller_terms_than_asked_is_not_out_of_the_grants_range(tmp_path: Path) -> None:
    """Seeds 1866, 4495 and 8463 of the 10,000-seed run: an action of Rs 1.10 (within the grant's Rs 1 minimum),
    applied by the rail as Rs 0.10 under our stamp (the other_terms fault), was named LIMIT although Interlock asked
    for an amount in range and QUARANTINED what the rail did."""
    ledger = _ledger(tmp_path / "s0.sqlite3", [("M", "S1", "QUARANTINED", "create_refund", "pay_1", 110, None)])
    limits = {"a": {"scope": {"grants": {"create_refund": {"value": {"min_amount_minor": 100,
                                                                     "max_amount_minor": 10_000}}}},
                    "limits": {"windows": [], "fee_budgets": {}}}}  # fmt: skip
    smaller = JournalEntry("refund", "rfnd_a", "acct", "pay_1", 10, 0, "S1", 0, 110)
    action = _Action("a", "s0", "create_refund", "pay_1", 110)
    assert check([ShardEvidence("s0", ledger, [smaller], {"pay_1": 800})], [action], [], limits, settled=False) == []
    asked_too_much = JournalEntry("refund", "rfnd_b", "acct", "pay_1", 20_000, 0, "S1", 0, 110)
    found = check([ShardEvidence("s0", ledger, [asked_too_much], {"pay_1": 90_000})], [action], [], limits,
                  settled=False)  # fmt: skip
    assert [v.kind for v in found] == ["LIMIT"]


def test_money_for_an_action_on_a_shard_its_calls_never_reached_is_no_ones(tmp_path: Path) -> None:
    s1 = _ledger(tmp_path / "s1.sqlite3", [("M", "S1", "APPLIED", "create_refund", "pay_1", 500, "rfnd_b")])
    action = _Action("a", "s0", "create_refund", "pay_1", 500)  # its merchant is on s0 and never moved
    shards = [ShardEvidence("s0", _ledger(tmp_path / "s0.sqlite3", []), [], {"pay_1": 800}),
              ShardEvidence("s1", s1, [_refund("rfnd_b", "S1")], {"pay_1": 800})]  # fmt: skip
    found = check(shards, [action], [], LIMITS, settled=False)
    assert [v.kind for v in found] == ["LIMIT"] and "no agent's action" in found[0].detail
    # Once an answer to it came from s1 (the merchant moved there), s1's money is the action's.
    body: dict[str, object] = {"state": "APPLIED", "sik": "S1", "rail_entity_id": "rfnd_b", "caller_action": "DONE"}
    assert check(shards, [action], [_Answer(action, body, "s1")], LIMITS, settled=False) == []
