"""The shard map (SPEC §15): which shard — which Redis, which ledger — a merchant's calls go to.

A shard is a full stack for a set of merchants: its own Redis, gate workers, one rail worker holding that
shard's lease, its ledger, its reconciler. The map (`INTERLOCK_SHARDS`, a YAML file) names the shards and
assigns merchants explicitly; every merchant not listed goes to a shard chosen by sha256 of its merchant_id
over the sorted shard names — the same answer in every process and across restarts, whatever order the
file lists the shards in. Without a map there is one shard (INTERLOCK_SHARD, REDIS_URL, INTERLOCK_LEDGER).

    shards:
      s0: {redis_url: "redis://10.0.0.5:6379/0", ledger: s0/ledger.sqlite3}
      s1: {redis_url: "redis://10.0.0.6:6379/0", ledger: /var/lib/interlock/s1.sqlite3}
    merchants:            # optional explicit assignments: merchant_id -> shard
      acme_retail: s1
    epoch: 3              # written by `interlock shards apply`; absent means 0

A relative ledger path is relative to the map file's directory. Changing where a merchant lands (an
assignment, or adding a shard, which moves hashed merchants) is checked by `interlock shards check` and made by
`interlock shards apply`, which records the map's ownership (epoch, digest, shards, assignments) in every
shard's ledger: the rail worker admits a merchant's money only where that record says it lives (ADR 0014).
Two shards never share a Redis: the same server spelled two ways (`localhost` and `127.0.0.1`, a default
port or db written out or not) is refused.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import yaml

from interlock import strict_yaml
from interlock.errors import ConfigError

if TYPE_CHECKING:
    from interlock.config import Settings

SHARDS_ENV = "INTERLOCK_SHARDS"
SHARD_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")  # the same rule as INTERLOCK_SHARD (it names queues)


@dataclass(frozen=True)
class Shard:
    name: str
    redis_url: str
    ledger: Path


@dataclass(frozen=True)
class Ownership:
    """Which shard owns which merchant, and nothing else: what a shard's ledger records of a map (the Redis
    URLs and ledger paths are where to reach a shard, and may be spelled differently on each host)."""

    epoch: int
    names: tuple[str, ...]  # sorted
    merchants: Mapping[str, str] = field(default_factory=dict)

    def shard_of(self, merchant_id: str) -> str:
        assigned = self.merchants.get(merchant_id)
        return assigned if assigned is not None else hashed_shard(merchant_id, self.names)

    def to_json(self) -> str:
        body = {"epoch": self.epoch, "shards": list(self.names), "merchants": dict(sorted(self.merchants.items()))}
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()

    @classmethod
    def from_json(cls, text: str) -> Ownership:
        body = json.loads(text)
        return cls(int(body["epoch"]), tuple(sorted(body["shards"])), dict(body["merchants"]))


@dataclass(frozen=True)
class ShardMap:
    shards: tuple[Shard, ...]  # sorted by name: the order the hash indexes
    merchants: Mapping[str, str] = field(default_factory=dict)
    source: str = "<shard map>"
    epoch: int = 0  # raised by every `interlock shards apply`; the ledgers record the one they accepted

    @property
    def ownership(self) -> Ownership:
        return Ownership(self.epoch, tuple(self.names), dict(self.merchants))

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.shards]

    def shard_of(self, merchant_id: str) -> str:
        """The one shard whose ledger holds *merchant_id*'s intents: its assignment, else its hash."""
        assigned = self.merchants.get(merchant_id)
        return assigned if assigned is not None else hashed_shard(merchant_id, self.names)

    def get(self, name: str) -> Shard:
        for shard in self.shards:
            if shard.name == name:
                return shard
        raise ConfigError(f"{self.source}: no shard named {name!r} (the map has {', '.join(self.names)})",
                          variable=SHARDS_ENV)  # fmt: skip

    def for_merchant(self, merchant_id: str) -> Shard:
        return self.get(self.shard_of(merchant_id))

    def to_yaml(self) -> str:
        body: dict[str, Any] = {"shards": {s.name: {"redis_url": s.redis_url, "ledger": str(s.ledger)}
                                           for s in self.shards}}  # fmt: skip
        if self.merchants:
            body["merchants"] = dict(sorted(self.merchants.items()))
        if self.epoch:
            body["epoch"] = self.epoch
        return yaml.safe_dump(body, sort_keys=False, width=1000)


def hashed_shard(merchant_id: str, names: Sequence[str]) -> str:
    """Stable routing of a merchant not assigned explicitly (sha256, not Python's salted hash())."""
    if not names:
        raise ConfigError("a shard map needs at least one shard", variable=SHARDS_ENV)
    ordered = sorted(names)
    digest = hashlib.sha256(merchant_id.encode("utf-8")).digest()
    return ordered[int.from_bytes(digest[:8], "big") % len(ordered)]


def single_shard(settings: Settings) -> ShardMap:
    """Today's deployment, as a map: one shard from INTERLOCK_SHARD, REDIS_URL and INTERLOCK_LEDGER."""
    ledger = settings.require("ledger")
    return ShardMap((Shard(settings.shard, settings.require("redis_url"), Path(ledger)),), {}, "<one shard>")


def shard_map_from_settings(settings: Settings) -> ShardMap:
    """The configured map (INTERLOCK_SHARDS), or the single shard of today's settings without one."""
    if settings.shards is None:
        return single_shard(settings)
    return load_shard_map(settings.shards)


def load_shard_map(path: Path) -> ShardMap:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{SHARDS_ENV}={path}: no such file (the shard map; unset {SHARDS_ENV} for one shard)",
                          variable=SHARDS_ENV) from None  # fmt: skip
    except OSError as exc:
        raise ConfigError(f"{SHARDS_ENV}={path}: cannot read the shard map: {exc}", variable=SHARDS_ENV) from None
    return parse_shard_map(text, source=str(path), base_dir=path.resolve().parent)


def parse_shard_map(text: str, *, source: str = "<shard map>", base_dir: Path | None = None) -> ShardMap:
    """Validate shard map YAML; each problem names the file, the line where it can, and what to change."""
    data = _load_yaml(text, source)
    if not isinstance(data, dict) or "shards" not in data:
        raise ConfigError(f"{source}: a shard map is a YAML mapping with a `shards:` section", variable=SHARDS_ENV)
    unknown = sorted(set(data) - {"shards", "merchants", "epoch"})
    if unknown:
        raise ConfigError(f"{source}: unknown section(s) {', '.join(map(str, unknown))} "
                          "(a shard map has `shards:`, `merchants:` and `epoch:`)", variable=SHARDS_ENV)  # fmt: skip
    epoch = data.get("epoch", 0)
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ConfigError(f"{source}: `epoch:` must be a whole number >= 0 (interlock shards apply raises it)",
                          variable=SHARDS_ENV)  # fmt: skip
    raw_shards = data["shards"]
    if not isinstance(raw_shards, dict) or not raw_shards:
        raise ConfigError(f"{source}: `shards:` must map at least one shard name to its redis_url and ledger",
                          variable=SHARDS_ENV)  # fmt: skip
    shards = [_shard(str(name), spec, source, base_dir) for name, spec in raw_shards.items()]
    seen_ledgers: dict[Path, str] = {}
    for shard in shards:
        other = seen_ledgers.setdefault(shard.ledger, shard.name)
        if other != shard.name:
            raise ConfigError(f"{source}: shards {other!r} and {shard.name!r} share the ledger {shard.ledger}; "
                              "each shard's intents live in its own ledger", variable=SHARDS_ENV)  # fmt: skip
    seen_redis: dict[tuple[str, ...], str] = {}
    for shard in shards:
        other = seen_redis.setdefault(redis_identity(shard.redis_url), shard.name)
        if other != shard.name:
            # One Redis would hold both shards' queues: either shard's workers could take the other's calls.
            raise ConfigError(f"{source}: shards {other!r} and {shard.name!r} share one Redis ({shard.redis_url}); "
                              "each shard has its own Redis (SPEC §15)", variable=SHARDS_ENV)  # fmt: skip
    names = {s.name for s in shards}
    raw_merchants = data.get("merchants") or {}
    if not isinstance(raw_merchants, dict):
        raise ConfigError(f"{source}: `merchants:` must map merchant_id to a shard name", variable=SHARDS_ENV)
    merchants: dict[str, str] = {}
    for merchant, shard_name in raw_merchants.items():
        if str(shard_name) not in names:
            raise ConfigError(f"{source}: merchant {merchant!r} is assigned to shard {shard_name!r}, which the map "
                              f"does not define (shards: {', '.join(sorted(names))})", variable=SHARDS_ENV)  # fmt: skip
        merchants[str(merchant)] = str(shard_name)
    return ShardMap(tuple(sorted(shards, key=lambda s: s.name)), merchants, source, epoch)


_LOOPBACK = "loopback"


def redis_identity(url: str) -> tuple[str, ...]:
    """The server and database a redis URL reaches, so that two spellings of one compare equal: host
    case-folded, every loopback address (`localhost`, 127.0.0.1, ::1) one host, port 6379 and db 0 when
    left out, the db read from the path or `?db=`. A unix socket is its path and db."""
    parts = urlsplit(url)
    query = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)
    if parts.scheme == "unix":
        return ("unix", str(Path(unquote(parts.path)).resolve()), str(int(query.get("db", "0") or 0)))
    host = (parts.hostname or "localhost").lower()
    try:
        if host == "localhost" or ipaddress.ip_address(host).is_loopback:
            host = _LOOPBACK
    except ValueError:
        pass  # a name, compared as spelled (case-folded)
    try:
        port = parts.port or 6379
    except ValueError:
        raise ConfigError(f"redis_url {url!r} has an invalid port", variable=SHARDS_ENV) from None
    path_db = parts.path.strip("/")
    db = path_db or query.get("db", "0") or "0"
    if not db.isdigit():
        raise ConfigError(f"redis_url {url!r}: the database must be a number", variable=SHARDS_ENV)
    return ("tcp", host, str(port), str(int(db)))


def _shard(name: str, spec: Any, source: str, base_dir: Path | None) -> Shard:
    if not SHARD_NAME.match(name):
        raise ConfigError(f"{source}: shard name {name!r} must be 1-32 of A-Z a-z 0-9 _ -", variable=SHARDS_ENV)
    if not isinstance(spec, dict):
        raise ConfigError(f"{source}: shard {name!r} needs `redis_url:` and `ledger:`", variable=SHARDS_ENV)
    for key in ("redis_url", "ledger"):
        if not spec.get(key):
            raise ConfigError(f"{source}: shard {name!r} has no `{key}:` (each shard has its own Redis and ledger)",
                              variable=SHARDS_ENV)  # fmt: skip
    extra = sorted(set(spec) - {"redis_url", "ledger"})
    if extra:
        raise ConfigError(f"{source}: shard {name!r} has unknown key(s) {', '.join(map(str, extra))}",
                          variable=SHARDS_ENV)  # fmt: skip
    url = str(spec["redis_url"])
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(f"{source}: shard {name!r}: redis_url {url!r} is not a redis:// URL", variable=SHARDS_ENV)
    ledger = Path(str(spec["ledger"]))
    if not ledger.is_absolute() and base_dir is not None:
        ledger = base_dir / ledger
    return Shard(name, url, ledger)


def _load_yaml(text: str, source: str) -> Any:
    try:
        return strict_yaml.load(text, source)[1]
    except strict_yaml.YamlProblem as exc:
        raise ConfigError(str(exc), variable=SHARDS_ENV) from None
