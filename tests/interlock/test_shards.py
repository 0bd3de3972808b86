"""The shard map (SPEC §15): loading, routing, and a clear error for every malformed map."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from interlock.config import load_settings
from interlock.errors import ConfigError
from interlock.shards import hashed_shard, load_shard_map, parse_shard_map, shard_map_from_settings

MAP = """\
shards:
  s1: {redis_url: "redis://127.0.0.1:7001/0", ledger: s1/ledger.sqlite3}
  s0: {redis_url: "redis://127.0.0.1:7000/0", ledger: /abs/s0.sqlite3}
  s2: {redis_url: "redis://127.0.0.1:7002/0", ledger: s2/ledger.sqlite3}
merchants:
  acme: s2
"""


def test_an_assigned_merchant_goes_to_its_shard_and_the_rest_by_hash(tmp_path: Path) -> None:
    path = tmp_path / "shards.yaml"
    path.write_text(MAP)
    shard_map = load_shard_map(path)
    assert shard_map.names == ["s0", "s1", "s2"]
    assert shard_map.shard_of("acme") == "s2"
    assert shard_map.for_merchant("acme").redis_url == "redis://127.0.0.1:7002/0"
    assert shard_map.get("s1").ledger == tmp_path / "s1" / "ledger.sqlite3"  # relative to the map's directory
    assert shard_map.get("s0").ledger == Path("/abs/s0.sqlite3")
    landed = {shard_map.shard_of(f"merchant_{i}") for i in range(60)}
    assert landed == {"s0", "s1", "s2"}  # the hash spreads merchants over every shard


def test_the_hash_is_sha256_over_sorted_names_not_the_order_of_the_file() -> None:
    lines = MAP.splitlines(keepends=True)
    reordered = parse_shard_map("".join([lines[0], lines[3], lines[2], lines[1], *lines[4:]]))
    one = parse_shard_map(MAP)
    assert [one.shard_of(f"m{i}") for i in range(50)] == [reordered.shard_of(f"m{i}") for i in range(50)]
    # pinned to the formula: a change to the hash moves every merchant not assigned explicitly
    for merchant in ("acme", "globex", "initech", "umbrella"):
        index = int.from_bytes(hashlib.sha256(merchant.encode()).digest()[:8], "big") % 3
        assert hashed_shard(merchant, ["s2", "s0", "s1"]) == ["s0", "s1", "s2"][index]
    assert hashed_shard("globex", ["s0", "s1", "s2"]) == "s1"


def test_a_merchant_routed_by_hash_lands_on_the_same_shard_in_another_process() -> None:
    merchants = [f"merchant_{i}" for i in range(20)]
    here = [hashed_shard(m, ["a", "b", "c", "d"]) for m in merchants]
    code = ("from interlock.shards import hashed_shard; "
            f"print(','.join(hashed_shard(m, ['d', 'c', 'b', 'a']) for m in {merchants!r}))")
    for seed in ("1", "2"):  # Python's own hash() differs under each seed; ours must not
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed},
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out.split(",") == here


def test_without_a_map_there_is_one_shard_from_todays_settings(tmp_path: Path) -> None:
    settings = load_settings(ledger=tmp_path / "l.sqlite3", redis_url="redis://127.0.0.1:6379/0")
    shard_map = shard_map_from_settings(settings)
    assert shard_map.names == ["0"]
    assert shard_map.shard_of("anyone") == "0"
    assert shard_map.get("0").ledger == tmp_path / "l.sqlite3"


def test_the_map_round_trips_through_its_yaml(tmp_path: Path) -> None:
    path = tmp_path / "shards.yaml"
    path.write_text(MAP)
    shard_map = load_shard_map(path)
    again = parse_shard_map(shard_map.to_yaml())
    assert again.shards == shard_map.shards
    assert dict(again.merchants) == {"acme": "s2"}


@pytest.mark.parametrize(("text", "message"), [
    (MAP.replace("acme: s2", "acme: s9"), "merchant 'acme' is assigned to shard 's9', which the map does not define"),
    (MAP.replace('redis_url: "redis://127.0.0.1:7001/0", ', ""), "shard 's1' has no `redis_url:`"),
    (MAP + "  acme: s1\n", ":7: duplicate key 'acme' (first at line 6)"),
    (MAP.replace("s2/ledger.sqlite3", "s1/ledger.sqlite3"), "share the ledger"),
    (MAP.replace("redis://127.0.0.1:7002/0", "127.0.0.1:7002"), "is not a redis:// URL"),
    ("shards: {}\n", "must map at least one shard name"),
    ("merchants: {a: s0}\n", "with a `shards:` section"),
    (MAP + "extra: 1\n", "unknown section(s) extra"),
    ("shards: [\n", "not valid YAML"),
])  # fmt: skip
def test_a_malformed_map_is_refused_with_a_message_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_shard_map(text, source="shards.yaml")
    assert message in str(caught.value)
    assert str(caught.value).startswith("shards.yaml")
    assert caught.value.variable == "INTERLOCK_SHARDS"


def test_interlock_shards_pointing_at_a_missing_file_says_so(tmp_path: Path) -> None:
    settings = load_settings(shards=tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=r"INTERLOCK_SHARDS=.*nope.yaml: no such file"):
        shard_map_from_settings(settings)


def test_asking_for_a_shard_the_map_does_not_have_names_the_ones_it_has() -> None:
    with pytest.raises(ConfigError, match=r"no shard named 's7' \(the map has s0, s1, s2\)"):
        parse_shard_map(MAP).get("s7")


@pytest.mark.parametrize(("first", "second"), [
    ("redis://127.0.0.1:7000/0", "redis://127.0.0.1:7000/0"),
    ("redis://localhost:7000/0", "redis://127.0.0.1:7000/0"),
    ("redis://LOCALHOST:7000", "redis://[::1]:7000/0"),
    ("redis://127.0.0.1", "redis://127.0.0.1:6379/0"),
    ("redis://127.0.0.1:6379/", "redis://localhost:6379?db=0"),
    ("redis://:secret@10.0.0.5:6379/2", "rediss://10.0.0.5:6379/2"),
    ("redis://cache.internal:6379/0", "redis://CACHE.internal/0"),
    ("unix:///run/redis.sock", "unix:///run/../run/redis.sock?db=0"),
])  # fmt: skip
def test_two_shards_on_one_redis_are_refused_however_the_url_spells_it(first: str, second: str) -> None:
    text = (f"shards:\n  s0: {{redis_url: '{first}', ledger: s0.sqlite3}}\n"
            f"  s1: {{redis_url: '{second}', ledger: s1.sqlite3}}\n")
    with pytest.raises(ConfigError, match=r"shards 's0' and 's1' share one Redis"):
        parse_shard_map(text, source="shards.yaml")


@pytest.mark.parametrize(("first", "second"), [
    ("redis://127.0.0.1:7000/0", "redis://127.0.0.1:7001/0"),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/1"),
    ("redis://127.0.0.1", "redis://localhost/3"),
    ("redis://10.0.0.5:6379/0", "redis://10.0.0.6:6379/0"),
])  # fmt: skip
def test_shards_on_different_servers_or_databases_are_accepted(first: str, second: str) -> None:
    text = (f"shards:\n  s0: {{redis_url: '{first}', ledger: s0.sqlite3}}\n"
            f"  s1: {{redis_url: '{second}', ledger: s1.sqlite3}}\n")
    assert parse_shard_map(text).names == ["s0", "s1"]


def test_the_epoch_is_read_and_the_ownership_digest_ignores_where_shards_are_reached() -> None:
    assert parse_shard_map(MAP).epoch == 0
    here = parse_shard_map(MAP + "epoch: 4\n")
    elsewhere = parse_shard_map(MAP.replace("127.0.0.1", "10.1.1.1").replace("/abs/", "/mnt/") + "epoch: 4\n")
    assert here.epoch == 4 and here.ownership.digest == elsewhere.ownership.digest
    assert here.ownership.digest != parse_shard_map(MAP + "epoch: 5\n").ownership.digest
    assert here.ownership.digest != parse_shard_map(MAP.replace("acme: s2", "acme: s1") + "epoch: 4\n").ownership.digest
    again = type(here.ownership).from_json(here.ownership.to_json())
    assert again == here.ownership and again.shard_of("acme") == "s2"
    assert all(again.shard_of(f"m{i}") == here.shard_of(f"m{i}") for i in range(50))
    with pytest.raises(ConfigError, match="`epoch:` must be a whole number"):
        parse_shard_map(MAP + "epoch: -1\n")
