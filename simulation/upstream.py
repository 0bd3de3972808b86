"""Proxy mode in the simulation (docs/proxy.md): one shard reaches its rail through an upstream MCP server.

The shard's deployment says `INTERLOCK_RAIL=mcp-upstream`; its simulated rail then serves an upstream's manifest —
the sandbox front's profile (with a balance tool) or razorpay-mcp-server's (without one, so every instant settlement
is refused for want of a balance read) — and behaves as `rails.mcp_upstream` makes a rail behave: a refund is sent
with no idempotency key (the stamp is in its receipt and notes only), and payouts are refused, as G2 refuses them.
The gate workers judge G6 against that manifest (`ManifestCache`, as `GateRuntime.from_settings` builds it), and
the shard's mandates pin the upstream's tools, as `interlock mandate pins` prints them.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from mcp_types import Tool

from rails.base import RAIL_MCP_UPSTREAM
from rails.upstream_manifest import pins
from sandbox.mcp_front import make_profile

if TYPE_CHECKING:
    from simulation.workload import Workload
    from simulation.world import World

PROFILES = ("sandbox", "razorpay-mcp-server")


def install_upstream(world: World, w: Workload, seed: int) -> None:
    """Put one shard in proxy mode: its settings, its rail's manifest, and its mandates' pins."""
    from simulation.workload import _edit, _set

    rng = random.Random(f"upstream:{seed}")
    shard = world.shards[rng.choice(sorted(world.shards))]
    profile = rng.choice(PROFILES)
    tools = [Tool.model_validate(data) for data in make_profile(profile).tools()]
    shard.settings = shard.settings.model_copy(update={"rail": RAIL_MCP_UPSTREAM})
    shard.rail.upstream_tools = tools
    pinned = pins(tools)
    w.upstream[shard.name] = profile

    def pin(d: dict[str, Any]) -> None:
        d["provenance"] = {"server_id": profile, "pinned_manifests": {
            tool: {"sha256": pinned[tool]} for tool in d["scope"]["grants"] if tool in pinned}}  # fmt: skip

    for agent, mandate in list(world.mandates.items()):
        if mandate.merchant_id in shard.merchants:
            _set(world, agent, _edit(mandate, pin))
