"""Three shards on one machine for the sharding tests (deploy.sharded): one sandbox rail for all, and an
agent per shard whose merchant the map assigns to that shard (plus, on request, agents routed by hash)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

from deploy.agent_client import SandboxControl
from deploy.sharded import Agent, ShardedStack
from sandbox.testing import SandboxProcess
from tests.engine.conftest import FAST
from tests.mandates import example_data

_ids = itertools.count(1)


@dataclass
class Sharded(ShardedStack):
    rail: SandboxProcess | None = None
    control: SandboxControl | None = None
    merchants: dict[str, str] = field(default_factory=dict)  # shard -> merchant assigned to it
    # shard (or hashed merchant) -> bearer token of that merchant's agent
    tokens: dict[str, str] = field(default_factory=dict)

    def payment(self, amount: int = 189900) -> str:
        assert self.rail is not None
        pid = f"pay_SH{next(_ids)}x{id(self) % 100000}"
        self.rail.add_payment(pid, amount)
        return pid


def start_sharded(root: Path, rail: SandboxProcess, names: tuple[str, ...] = ("s0", "s1", "s2"),
                  env: dict[str, str] | None = None, hashed: tuple[str, ...] = ()) -> Sharded:  # fmt: skip
    """Each shard gets an agent whose merchant the map assigns to it; each name in *hashed* gets an agent
    (`agent_<name>`, merchant `<name>`) the map does not mention, so it is routed by hash. Stop with .stop()."""
    agents = []
    sharded = Sharded(root, names, env={**rail.rail_env(), **FAST, **(env or {})}, rail=rail,
                      control=SandboxControl(rail.url, rail.key_id, rail.key_secret))  # fmt: skip
    for name in names:
        data = {**example_data(), "agent_id": f"agent_{name}", "merchant_id": f"acc_SHARD_{name}",
                "mandate_id": f"mnd_{name}"}  # fmt: skip
        agents.append(Agent(f"agent_{name}", f"token-{name}-7f3a9c", data, shard=name))
        sharded.merchants[name], sharded.tokens[name] = data["merchant_id"], agents[-1].token
    for merchant in hashed:
        data = {**example_data(), "agent_id": f"agent_{merchant}", "merchant_id": merchant,
                "mandate_id": f"mnd_{merchant}"}  # fmt: skip
        agents.append(Agent(f"agent_{merchant}", f"token-{merchant}-2b7d", data))
        sharded.tokens[merchant] = agents[-1].token
    sharded.start(agents)
    return sharded
