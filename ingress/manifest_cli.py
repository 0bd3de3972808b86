"""`interlock manifest pin --upstream CMD_OR_URL`: the upstream's current G6 pins, for a human to review.

It prints a YAML `provenance:` block with one `pinned_manifests` entry per tool the upstream serves
now. Nothing is written: pinning is the human's decision, made by reviewing each tool's description
and schema (printed as comments) and copying the block into the mandate, then re-signing it. It also
says, as a comment, when the upstream has no balance tool (razorpay-mcp-server has none): instant
settlements through it are then refused, whatever is pinned.
"""

from __future__ import annotations

import click

from interlock.config import load_settings
from rails.base import RailError
from rails.mcp_session import UpstreamSession, UpstreamTarget
from rails.mcp_upstream import McpUpstreamRail
from rails.upstream_manifest import definition_hash, pins_yaml


@click.group("manifest")
def manifest_group() -> None:
    """Tool-manifest pins (G6) for proxy mode."""


@manifest_group.command("pin")
@click.option("--upstream", required=True, metavar="CMD_OR_URL",
              help="the upstream MCP server: an http(s):// URL, or a command line to launch over stdio")  # fmt: skip
@click.option("--server-id", default=None, help="write provenance.server_id too")
@click.option("--show/--no-show", default=True, show_default=True, help="print each tool's description as a comment")
def manifest_pin(upstream: str, server_id: str | None, show: bool) -> None:
    """Print the current pins of every tool UPSTREAM serves, as a mandate `provenance:` block."""
    settings = load_settings()
    rail = McpUpstreamRail(UpstreamSession(UpstreamTarget.parse(upstream), timeout_s=settings.rail_timeout_ms / 1000))
    try:
        tools = rail.list_tools()
    except RailError as exc:
        raise click.ClickException(f"cannot read the upstream's manifest: {exc}") from None
    finally:
        rail.close()
    if show:
        click.echo(f"# Upstream {upstream}: {len(tools)} tools. Review each description before pinning it.")
        for tool in tools:
            summary = " ".join((tool.description or "").split())
            click.echo(f"# {tool.name} {definition_hash(tool)[:12]}: {summary[:200]}")
        balance = rail.tools.fetch_balance
        if balance is None or balance not in {tool.name for tool in tools}:
            click.echo(f"# No balance tool ({balance or 'none configured'}): create_instant_settlement through this "
                       "upstream is refused with G2_BALANCE_UNREADABLE.")  # fmt: skip
    click.echo(pins_yaml(tools, server_id=server_id), nl=False)
