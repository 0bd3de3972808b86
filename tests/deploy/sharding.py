"""Several shards on one machine as real processes (SPEC §15), for the sharding tests: per shard a `Stack`
(its own redis-server, ledger, rail worker, gate worker, reconciler, started with INTERLOCK_SHARD), one
sandbox rail for all, and one HTTP ingress routing by a shard map that assigns one merchant to each shard."""

from __future__ import annotations

import itertools
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from deploy.agent_client import SandboxControl
from deploy.stack import Stack
from ingress.tokens import token_sha256
from sandbox.testing import SandboxProcess
from tests.engine.conftest import FAST
from tests.mandates import example_data

_ids = itertools.count(1)


@dataclass
class Sharded:
    shards: dict[str, Stack]
    ingress: Stack
    mcp_url: str
    map_path: Path
    rail: SandboxProcess
    control: SandboxControl
    merchants: dict[str, str] = field(default_factory=dict)  # shard -> merchant assigned to it
    # shard (or hashed merchant) -> bearer token of that merchant's agent
    tokens: dict[str, str] = field(default_factory=dict)

    def payment(self, amount: int = 189900) -> str:
        pid = f"pay_SH{next(_ids)}x{id(self) % 100000}"
        self.rail.add_payment(pid, amount)
        return pid

    def ledger_rows(self, shard: str) -> list[tuple[str, str, str]]:
        """(merchant_id, sik, state) of every intent in *shard*'s ledger."""
        path = self.shards[shard].ledger_path
        if not path.exists():
            return []
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return list(conn.execute("SELECT merchant_id, sik, state FROM intents"))
        finally:
            conn.close()

    def stop(self) -> None:
        self.ingress.stop()
        for stack in self.shards.values():
            stack.stop()


def start_sharded(root: Path, rail: SandboxProcess, names: tuple[str, ...] = ("s0", "s1", "s2"),
                  env: dict[str, str] | None = None, hashed: tuple[str, ...] = ()) -> Sharded:  # fmt: skip
    """Start every shard (Redis first, then its engine), then the ingress over the map. Stop with .stop().
    Each shard gets an agent whose merchant the map assigns to it; each name in *hashed* gets an agent
    (`agent_<name>`, merchant `<name>`) the map does not mention, so it is routed by hash."""
    mandates = root / "mandates"
    mandates.mkdir(parents=True)
    token_lines = ["agents:"]
    merchants, tokens = {}, {}
    for name in names:
        data = example_data()
        data.update(agent_id=f"agent_{name}", merchant_id=f"acc_SHARD_{name}", mandate_id=f"mnd_{name}")
        (mandates / f"agent_{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        merchants[name], tokens[name] = data["merchant_id"], f"token-{name}-7f3a9c"
        token_lines.append(f"  agent_{name}: {{token_sha256: {token_sha256(tokens[name])}}}")
    for merchant in hashed:
        data = example_data()
        data.update(agent_id=f"agent_{merchant}", merchant_id=merchant, mandate_id=f"mnd_{merchant}")
        (mandates / f"agent_{merchant}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        tokens[merchant] = f"token-{merchant}-2b7d"
        token_lines.append(f"  agent_{merchant}: {{token_sha256: {token_sha256(tokens[merchant])}}}")
    tokens_file = root / "tokens.yaml"
    tokens_file.write_text("\n".join(token_lines) + "\n")
    common = {"INTERLOCK_MANDATE_DIR": str(mandates), **rail.rail_env(), **FAST, **(env or {})}
    shards: dict[str, Stack] = {}
    sharded = None
    try:
        for name in names:
            stack = shards[name] = Stack(root / name, env={**common, "INTERLOCK_SHARD": name})
            stack.start_redis()
        map_path = root / "shards.yaml"
        map_path.write_text(yaml.safe_dump({
            "shards": {n: {"redis_url": s.redis_url, "ledger": str(s.ledger_path)} for n, s in shards.items()},
            "merchants": {merchants[n]: n for n in names},
        }))  # fmt: skip
        for stack in shards.values():
            stack.start_engine()
        ingress = Stack(root / "ingress", env={**common, "INTERLOCK_SHARDS": str(map_path)})
        sharded = Sharded(shards, ingress, "", map_path, rail, SandboxControl(rail.url, rail.key_id, rail.key_secret),
                          merchants, tokens)  # fmt: skip
        sharded.mcp_url = ingress.start_ingress(tokens_file=tokens_file)
        return sharded
    except BaseException:
        if sharded is not None:
            sharded.ingress.stop()
        for stack in shards.values():
            stack.stop()
        raise
