"""The stdio transport: what an agent's MCP client launches. stdout carries only JSON-RPC; the SDK's
stdio server also points fd 1 at stderr while serving, so a stray print cannot corrupt the stream."""

from __future__ import annotations

import logging

import anyio
from mcp.server.stdio import stdio_server

from ingress.app import Ingress
from ingress.server import build_server

logger = logging.getLogger(__name__)


def serve_stdio(ingress: Ingress) -> None:
    server = build_server(ingress)

    async def run() -> None:
        async with stdio_server() as (read_stream, write_stream):
            logger.info("ingress serving MCP on stdio for agent %s", ingress.stdio_agent_id)
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(run)
