"""`interlock up --shards N`: N full shards on one machine (SPEC §15), laid out under the data directory.

Shard `s<i>` keeps its ledger and its embedded Redis in `<data>/s<i>/`, its Redis listens on
`--redis-port + i`, and the map `interlock up` used is written to `<data>/shards.yaml` — the same file an
operator would write for many hosts, with each shard's own redis_url and ledger path. Every actor of a
shard is today's process, started with that shard's REDIS_URL, INTERLOCK_LEDGER and INTERLOCK_SHARD.

With the demo mandate, each shard also gets a demo agent of its own whose merchant the map assigns to that
shard, so `interlock up --shards N --demo` can drive every shard.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from interlock.shards import Shard, ShardMap

SHARD_MAP_FILE = "shards.yaml"


@dataclass(frozen=True)
class ShardPlan:
    name: str
    directory: Path
    redis_url: str
    redis_port: int | None  # None: REDIS_URL-style external Redis, nothing to start

    @property
    def ledger(self) -> Path:
        return self.directory / "ledger.sqlite3"

    def env(self) -> dict[str, str]:
        """What makes one of today's actors serve this shard."""
        return {"REDIS_URL": self.redis_url, "INTERLOCK_LEDGER": str(self.ledger), "INTERLOCK_SHARD": self.name}


def plan_shards(data: Path, count: int, redis_port: int) -> list[ShardPlan]:
    plans = []
    for i in range(count):
        port = redis_port + i
        plans.append(ShardPlan(f"s{i}", data / f"s{i}", f"redis://127.0.0.1:{port}/0", port))
    return plans


def write_shard_map(data: Path, plans: list[ShardPlan], merchants: dict[str, str]) -> Path:
    """The map this run uses, written where INTERLOCK_SHARDS points (ledger paths relative to it)."""
    shard_map = ShardMap(tuple(Shard(p.name, p.redis_url, p.ledger.relative_to(data)) for p in plans), merchants)
    path = data / SHARD_MAP_FILE
    path.write_text("# written by `interlock up --shards`: the map this run used (SPEC §15)\n" + shard_map.to_yaml(),
                    encoding="utf-8")  # fmt: skip
    return path


def demo_mandates(data: Path, mandate: Path, plans: list[ShardPlan]) -> dict[str, Path]:
    """One demo mandate per shard (agent `<agent>_<shard>`, merchant `<merchant>_<shard>`), keyed by shard."""
    import yaml

    from interlock.mandate import load_mandate

    base = load_mandate(mandate)
    directory = data / "mandates"
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.yaml"):
        stale.unlink()
    out = {}
    for plan in plans:
        derived = base.model_copy(update={"agent_id": f"{base.agent_id}_{plan.name}",
                                          "merchant_id": f"{base.merchant_id}_{plan.name}",
                                          "mandate_id": f"{base.mandate_id}_{plan.name}"})  # fmt: skip
        path = directory / f"{derived.agent_id}.yaml"
        body = yaml.safe_dump(derived.model_dump(mode="json", exclude_none=True), sort_keys=False, width=1000)
        path.write_text(f"# derived by `interlock up --shards` from {mandate} for shard {plan.name}\n" + body,
                        encoding="utf-8")  # fmt: skip
        out[plan.name] = path
    return out
