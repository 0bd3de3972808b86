"""The upstream's tool manifest as G6 sees it: each tool's definition hash, fetched from the upstream.

The hash is `interlock.tools.tool_definition_hash(name, description, input_schema)` over the tool
exactly as the upstream lists it (a missing description hashes as ""), so a pin made by
`interlock manifest pin --upstream ...` is compared with the same function at list and call time.
The cache is short and per process: the gate worker and the ingress judge what the upstream serves
now, give or take INTERLOCK_UPSTREAM_MANIFEST_TTL_MS (0: fetched for every judgement).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

import yaml
from mcp_types import Tool

from interlock import clock
from interlock.tools import tool_definition_hash


@runtime_checkable
class ToolLister(Protocol):
    def list_tools(self) -> list[Tool]: ...


def definition_hash(tool: Tool) -> str:
    return tool_definition_hash(tool.name, tool.description or "", dict(tool.input_schema))


def pins(tools: Iterable[Tool]) -> dict[str, str]:
    """tool name → definition hash, in the upstream's order."""
    return {tool.name: definition_hash(tool) for tool in tools}


def current_pins(url: str, *, timeout_s: float = 10) -> dict[str, str]:
    """The pins of what the upstream MCP server at *url* serves right now (for a person to review)."""
    from rails.mcp_session import UpstreamSession, UpstreamTarget
    from rails.mcp_upstream import McpUpstreamRail

    rail = McpUpstreamRail(UpstreamSession(UpstreamTarget(url=url), timeout_s=timeout_s))
    try:
        return pins(rail.list_tools())
    finally:
        rail.close()


def pins_yaml(tools: Iterable[Tool], *, server_id: str | None = None) -> str:
    """A `provenance:` block for a human to review into the mandate (grants are a separate decision)."""
    block: dict[str, object] = {}
    if server_id is not None:
        block["server_id"] = server_id
    block["pinned_manifests"] = {name: {"sha256": digest} for name, digest in pins(tools).items()}
    return yaml.safe_dump({"provenance": block}, sort_keys=False)


class ManifestCache:
    """The upstream's tools, re-fetched when older than *ttl_ms*. A failed fetch raises (RailError) and
    leaves nothing cached: an unreadable manifest never stands in for the one last seen."""

    def __init__(self, source: ToolLister, *, ttl_ms: int) -> None:
        self.source = source
        self.ttl_s = ttl_ms / 1000
        self._lock = threading.Lock()
        self._tools: dict[str, Tool] | None = None
        self._fetched_at = 0.0

    def tools(self) -> dict[str, Tool]:
        with self._lock:
            fresh = self._tools is not None and clock.monotonic() - self._fetched_at < self.ttl_s
            if not fresh:
                self._tools = None
                listed = self.source.list_tools()
                self._tools = {tool.name: tool for tool in listed}
                self._fetched_at = clock.monotonic()
            assert self._tools is not None
            return dict(self._tools)

    def hashes(self) -> dict[str, str]:
        return pins(self.tools().values())
