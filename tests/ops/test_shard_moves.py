"""Changing the shard map (SPEC §15): a change that moves a merchant with anything not definite is refused,
and so is one that would leave a merchant's settled history behind; merchants with no intents move freely,
and `apply` replaces the map only after the check passes."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from interlock.shards import hashed_shard
from ledger.db import open_ledger
from ops.shards_cli import shards_group
from tests.ledger.helpers import put_intent

URL = "redis://127.0.0.1:6399/0"


def write_map(path: Path, shards: list[str], merchants: dict[str, str] | None = None) -> Path:
    lines = ["shards:"] + [f"  {s}: {{redis_url: '{URL}', ledger: {s}.sqlite3}}" for s in shards]
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
    assert current.read_text() == pinned_elsewhere.read_text()


def test_a_map_that_changes_a_shards_ledger_is_refused(tmp_path: Path, current: Path) -> None:
    new = tmp_path / "new.yaml"
    new.write_text(current.read_text().replace("ledger: b.sqlite3", "ledger: elsewhere.sqlite3"))
    result = run("check", str(new), "--current", str(current))
    assert result.exit_code == 1
    assert "shard b's ledger would change" in result.output
