"""Changing the shard map (SPEC §15): a change that moves a merchant with anything not definite is refused,
and so is one that would leave a merchant's settled history behind, and one whose merchant still has work in a
shard's Redis; merchants with no intents move freely, and `apply` records the map in every ledger (under its
write lock, re-checked there) before it replaces the map file. `check` without a new map compares every ledger
with the current map. Real SQLite ledgers and a real redis-server (one database per shard)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result

from deploy.redis_server import EmbeddedRedis
from interlock.queues import ADMIT_JOB, rail_queue, rq_queue
from interlock.shards import Ownership, hashed_shard, load_shard_map
from ledger import ownership
from ledger.db import open_ledger
from ops.shard_apply import apply_ownership
from ops.shards_cli import shards_group
from tests.ledger.helpers import put_intent

DB = {"a": 1, "b": 2, "c": 3}  # each shard its own Redis database: a map refuses two shards on one
SERVER = {"url": "redis://127.0.0.1:6399"}


@pytest.fixture(autouse=True)
def redis_dbs(redis_server: EmbeddedRedis) -> Iterator[redis.Redis]:
    SERVER["url"] = redis_server.url.rsplit("/", 1)[0]
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield client
    client.close()


def write_map(path: Path, shards: list[str], merchants: dict[str, str] | None = None) -> Path:
    url = SERVER["url"]
    lines = ["shards:"] + [f"  {s}: {{redis_url: '{url}/{DB[s]}', ledger: {s}.sqlite3}}" for s in shards]
    if merchants:
        lines += ["merchants:"] + [f"  {m}: {s}" for m, s in merchants.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def put(tmp_path: Path, shard: str, merchant: str, *states: str) -> None:
    conn = open_ledger(tmp_path / f"{shard}.sqlite3")
    try:
        for i, state in enumerate(states):
            put_intent(conn, f"{merchant[:8]}{state[:4]}{i}".ljust(32, "A"), state, amount=100, merchant_id=merchant)
    finally:
        conn.close()


def run(*args: str) -> Result:
    return CliRunner().invoke(shards_group, list(args))


@pytest.fixture
def current(tmp_path: Path) -> Path:
    """Two shards; acme is pinned to a, globex to b."""
    return write_map(tmp_path / "shards.yaml", ["a", "b"], {"acme": "a", "globex": "b"})


@pytest.mark.parametrize("pending", ["UNKNOWN", "HELD", "IN_FLIGHT", "RECONCILING", "AUTHORIZED"])
def test_moving_a_merchant_with_an_intent_not_definite_is_refused(tmp_path: Path, current: Path, pending: str) -> None:
    put(tmp_path, "a", "acme", "APPLIED", pending)
    new = write_map(tmp_path / "new.yaml", ["a", "b"], {"acme": "b", "globex": "b"})
    result = run("check", str(new), "--current", str(current))
    assert result.exit_code == 1
    assert f"merchant acme would move a -> b but has intents not definite in a ({pending} 1)" in result.output
    before = current.read_text()
    assert run("apply", str(new), "--current", str(current)).exit_code == 1
    assert current.read_text() == before  # nothing applied


def test_moving_a_merchant_with_only_settled_history_is_refused_with_the_pin_to_add(tmp_path: Path,
                                                                                    current: Path) -> None:  # fmt: skip
    put(tmp_path, "a", "acme", "APPLIED", "FAILED_TERMINAL")
    new = write_map(tmp_path / "new.yaml", ["a", "b"], {"acme": "b"})
    result = run("check", str(new), "--current", str(current))
    assert result.exit_code == 1
    assert "merchant acme would move a -> b but has 2 settled intent(s) in a" in result.output
    assert "      acme: a" in result.output


def test_adding_a_shard_with_existing_merchants_pinned_is_allowed_and_apply_replaces_the_map(
    tmp_path: Path, current: Path
) -> None:
    put(tmp_path, "a", "acme", "APPLIED")
    put(tmp_path, "b", "globex", "UNKNOWN")  # not moving: pinned where it is
    fresh = next(f"new_merchant_{i}" for i in range(100)
                 if hashed_shard(f"new_merchant_{i}", ["a", "b"]) != hashed_shard(f"new_merchant_{i}", ["a", "b", "c"]))
    new = write_map(tmp_path / "new.yaml", ["a", "b", "c"], {"acme": "a", "globex": "b"})
    result = run("check", str(new), "--current", str(current))
    assert result.exit_code == 0, result.output
    assert "map change allowed: 0 merchant(s) move" in result.output  # fresh has no intents: it is not seen
    pinned_elsewhere = write_map(tmp_path / "new2.yaml", ["a", "b", "c"], {"acme": "a", "globex": "b", fresh: "c"})
    applied = run("apply", str(pinned_elsewhere), "--current", str(current))
    assert applied.exit_code == 0, applied.output
    assert current.read_text() == pinned_elsewhere.read_text() + "epoch: 1  # set by interlock shards apply\n"
    assert load_shard_map(current).ownership == Ownership(1, ("a", "b", "c"), {"acme": "a", "globex": "b", fresh: "c"})


def test_a_map_that_changes_a_shards_ledger_is_refused(tmp_path: Path, current: Path) -> None:
    new = tmp_path / "new.yaml"
    new.write_text(current.read_text().replace("ledger: b.sqlite3", "ledger: elsewhere.sqlite3"))
    result = run("check", str(new), "--current", str(current))
    assert result.exit_code == 1
    assert "shard b's ledger would change" in result.output


def queue_decision(shard: str, merchant: str) -> None:
    """A Decision waiting in *shard*'s rail queue, as a gate worker leaves it while the rail worker is down."""
    client = redis.Redis.from_url(f"{SERVER['url']}/{DB[shard]}")
    body = json.dumps({"request_id": "req-queued", "merchant_id": merchant})
    rq_queue(rail_queue(shard), client).enqueue(ADMIT_JOB, body, job_id="decision-req-queued")
    client.close()


def test_moving_a_merchant_whose_decision_waits_in_its_shards_rail_queue_is_refused_naming_the_queue(
    tmp_path: Path, current: Path,
) -> None:
    queue_decision("a", "acme")  # nothing in a's ledger yet: only the queue knows about the call
    new = write_map(tmp_path / "new.yaml", ["a", "b"], {"acme": "b", "globex": "b"})
    before = current.read_text()
    for command in ("check", "apply"):
        result = run(command, str(new), "--current", str(current))
        assert result.exit_code == 1, result.output
        assert "merchant acme would move a -> b but a shard's Redis still holds work for it (a: rail:a queued)" \
            in result.output
    assert current.read_text() == before
    assert not (tmp_path / "b.sqlite3").exists()  # no ledger was written either


def test_apply_records_the_map_in_every_ledger_and_check_then_finds_every_ledger_agrees(
    tmp_path: Path, current: Path,
) -> None:
    put(tmp_path, "a", "acme", "APPLIED")
    unapplied = run("check", "--current", str(current))
    assert unapplied.exit_code == 1
    assert "shard a: its ledger has accepted no shard map" in unapplied.output
    new = write_map(tmp_path / "new.yaml", ["a", "b"], {"acme": "a", "globex": "a", "initech": "b"})
    applied = run("apply", str(new), "--current", str(current))
    assert applied.exit_code == 0, applied.output
    assert "recorded in the ledgers of a, b" in applied.output and "restart now: every ingress" in applied.output
    digest = load_shard_map(current).ownership.digest
    for shard in ("a", "b"):
        accepted = ownership.accepted(open_ledger(tmp_path / f"{shard}.sqlite3"))
        assert accepted is not None and (accepted.shard, accepted.epoch, accepted.digest) == (shard, 1, digest)
    agreed = run("check", "--current", str(current))
    assert agreed.exit_code == 0, agreed.output
    assert "ledgers agree with the map" in agreed.output
    stale = write_map(tmp_path / "stale.yaml", ["a", "b"], {"acme": "a"})
    stale.write_text(stale.read_text() + "epoch: 1\n")
    refused = run("apply", str(stale), "--current", str(current))
    assert refused.exit_code == 1 and "the new map says epoch 1" in refused.output


def test_check_finds_a_merchant_whose_intents_are_in_a_ledger_the_map_does_not_give_it(
    tmp_path: Path, current: Path,
) -> None:
    assert run("apply", str(current), "--current", str(current)).exit_code == 0  # record the map as it is
    put(tmp_path, "b", "acme", "APPLIED")  # acme is a's: an intent in b's ledger is a split merchant
    result = run("check", "--current", str(current))
    assert result.exit_code == 1
    assert "merchant acme has 1 intent(s) in shard b's ledger but the map gives it shard a" in result.output


def test_a_merchant_admitted_between_the_check_and_the_ledgers_write_lock_is_not_moved(
    tmp_path: Path, current: Path,
) -> None:
    new_path = write_map(tmp_path / "new.yaml", ["a", "b"], {"acme": "b", "globex": "b"})
    put(tmp_path, "a", "acme", "AUTHORIZED")  # admitted after `check` passed, before apply took the locks
    new = load_shard_map(new_path)
    problems = apply_ownership(load_shard_map(current), replace(new, epoch=1), [("acme", "a")])
    assert problems and "merchant acme was admitted in a since the check (AUTHORIZED 1)" in problems[0]
    for shard in ("a", "b"):
        assert ownership.accepted(open_ledger(tmp_path / f"{shard}.sqlite3")) is None  # nothing written anywhere
