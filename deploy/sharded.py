"""Several shards on one machine as real processes (SPEC §15), each stoppable and killable by pid: per shard
a `Stack` (its own redis-server, ledger, rail worker, gate workers, reconciler, started with INTERLOCK_SHARD),
and one HTTP ingress routing by a shard map. The rail is the caller's (one sandbox for all shards, say).
Used by the sharding tests and by `interlock bench perf --shards`; `interlock up --shards` is the same
layout under supervisord."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from deploy.stack import Stack
from ingress.tokens import token_sha256


@dataclass(frozen=True)
class Agent:
    """An agent of the sharded stack: its mandate (as data) and, if pinned, the shard its merchant is on."""

    agent_id: str
    token: str
    mandate: dict[str, Any]
    shard: str | None = None  # None: the map does not name its merchant, so it is routed by hash

    @property
    def merchant_id(self) -> str:
        return str(self.mandate["merchant_id"])


@dataclass
class ShardedStack:
    root: Path
    names: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    gate_workers: int = 1
    shards: dict[str, Stack] = field(default_factory=dict)
    ingress: Stack | None = None
    mcp_url: str = ""

    @property
    def map_path(self) -> Path:
        return self.root / "shards.yaml"

    def start(self, agents: list[Agent]) -> ShardedStack:
        """Every shard (Redis first, then its engine), then the ingress over the map; stops what it started
        if any of it fails."""
        mandates = self.root / "mandates"
        mandates.mkdir(parents=True, exist_ok=True)
        for agent in agents:
            (mandates / f"{agent.agent_id}.yaml").write_text(yaml.safe_dump(agent.mandate, sort_keys=False))
        tokens = self.root / "tokens.yaml"
        tokens.write_text("agents:\n" + "".join(f"  {a.agent_id}: {{token_sha256: {token_sha256(a.token)}}}\n"
                                                for a in agents))  # fmt: skip
        common = {"INTERLOCK_MANDATE_DIR": str(mandates), **self.env}
        try:
            for name in self.names:
                stack = self.shards[name] = Stack(self.root / name, env={**common, "INTERLOCK_SHARD": name},
                                                  gate_workers=self.gate_workers)  # fmt: skip
                stack.start_redis()
            self.map_path.write_text(yaml.safe_dump({
                "shards": {n: {"redis_url": s.redis_url, "ledger": str(s.ledger_path)} for n, s in self.shards.items()},
                "merchants": {a.merchant_id: a.shard for a in agents if a.shard is not None},
            }))  # fmt: skip
            for stack in self.shards.values():
                stack.start_engine()
            self.ingress = Stack(self.root / "ingress", env={**common, "INTERLOCK_SHARDS": str(self.map_path)})
            self.mcp_url = self.ingress.start_ingress(tokens_file=tokens)
        except BaseException:
            self.stop()
            raise
        return self

    def ledger_rows(self, shard: str) -> list[tuple[str, str, str]]:
        """(merchant_id, sik, state) of every intent in *shard*'s ledger, read-only."""
        path = self.shards[shard].ledger_path
        if not path.exists():
            return []
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return list(conn.execute("SELECT merchant_id, sik, state FROM intents"))
        finally:
            conn.close()

    def pids(self) -> dict[str, int]:
        found = {}
        for name, stack in {**self.shards, **({"ingress": self.ingress} if self.ingress else {})}.items():
            found.update({f"{name}/{a}": actor.pid for a, actor in stack.actors.items() if actor.alive()})
            if stack.redis is not None:
                found[f"{name}/redis-server"] = stack.redis.pid
        return found

    def stop(self) -> None:
        if self.ingress is not None:
            self.ingress.stop()
        for stack in self.shards.values():
            stack.stop()
