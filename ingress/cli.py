"""`interlock ingress --stdio | --http` and `interlock token new AGENT_ID`."""

from __future__ import annotations

import logging
import re

import click

from ingress.tokens import TokenTable, new_token, token_sha256, yaml_entry
from interlock.config import Settings, load_settings
from interlock.errors import ConfigError
from interlock.mandate import MandateStore
from rails.base import check_rail_settings

logger = logging.getLogger(__name__)

DEFAULT_HTTP_PORT = 8710
_AGENT_ID = re.compile(r"^[A-Za-z0-9_]{1,64}$")


@click.command("ingress")
@click.option("--stdio", "transport", flag_value="stdio", help="serve one agent on stdin/stdout (INTERLOCK_AGENT_ID)")
@click.option("--http", "transport", flag_value="http", help="serve streamable HTTP at /mcp with bearer tokens")
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP listen address")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_HTTP_PORT, show_default=True,
              help="HTTP listen port (0: any free port, logged)")  # fmt: skip
def ingress_command(transport: str | None, host: str, port: int) -> None:
    """Run the MCP ingress agents connect to."""
    from ingress.app import Ingress

    if transport is None:
        raise click.UsageError("choose a transport: --stdio or --http")
    settings = load_settings()
    mandates = MandateStore.from_settings(settings)
    # The rail serves fetch_payment, fetch_refund and (proxy mode) the upstream's tools: a setting missing is said
    # now, where the operator (or the MCP client's log) sees it, not as every call's escalation later.
    check_rail_settings(settings)
    if transport == "stdio":
        agent_id = _stdio_agent(settings, mandates)
        ingress = Ingress(settings, mandates, stdio_agent_id=agent_id)
        ingress.check_redis()
        from ingress.stdio import serve_stdio

        try:
            serve_stdio(ingress)
        finally:
            ingress.close()
        return
    tokens = TokenTable.load(settings.require("agent_tokens"))
    for agent_id in tokens.digests:
        if mandates.get(agent_id) is None:
            logger.warning("agent %s has a token but no mandate: it can call nothing but interlock_status", agent_id)
    ingress = Ingress(settings, mandates, stdio_agent_id=None)
    ingress.check_redis()
    from ingress.http import serve_http

    try:
        serve_http(ingress, tokens, host, port)
    finally:
        ingress.close()


def _stdio_agent(settings: Settings, mandates: MandateStore) -> str:
    agent_id: str = settings.require("agent_id")
    mandate = mandates.require(agent_id)  # fail at launch, where the MCP client's log shows it
    if settings.merchant_id is not None and settings.merchant_id != mandate.merchant_id:
        raise ConfigError(
            f"INTERLOCK_MERCHANT_ID={settings.merchant_id} but agent {agent_id}'s mandate is for merchant "
            f"{mandate.merchant_id}; unset it or fix the mandate",
            variable="INTERLOCK_MERCHANT_ID",
        )
    return agent_id


@click.group("token")
def token_group() -> None:
    """Bearer tokens for the HTTP ingress (only their sha256 is ever stored)."""


@token_group.command("new")
@click.argument("agent_id")
def token_new(agent_id: str) -> None:
    """Print a fresh token for AGENT_ID once, and the line to add to INTERLOCK_AGENT_TOKENS."""
    if not _AGENT_ID.match(agent_id):
        raise click.BadParameter("must be 1-64 characters of [A-Za-z0-9_]", param_hint="AGENT_ID")
    token = new_token()
    digest = token_sha256(token)
    click.echo(f"token: {token}")
    click.echo("Give it to the agent's MCP client as `Authorization: Bearer <token>`. It is shown only now;")
    click.echo("Interlock keeps only its sha256. Add this to the INTERLOCK_AGENT_TOKENS file")
    click.echo(f"(or, if the file already has `agents:`, add `  {agent_id}: {{token_sha256: {digest}}}` under it):")
    click.echo(yaml_entry(agent_id, digest))
