"""Serving the sandbox's MCP front over streamable HTTP (at /mcp) or stdio."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import anyio
import uvicorn
from mcp.server.stdio import stdio_server

from sandbox.mcp_front import Front, build_front_server
from sandbox.server import bind

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"


def serve_front_http(front: Front, host: str, port: int, *, ready_file: Path | None = None) -> None:
    sock = bind(host, port)
    server = build_front_server(front)
    # No idle expiry: Interlock holds one session for its whole life and must not find it gone.
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host, session_idle_timeout=None)
    bound_host, bound_port = sock.getsockname()[:2]
    if ready_file is not None:
        tmp = ready_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"host": bound_host, "port": bound_port, "pid": os.getpid(),
                                   "url": f"http://{bound_host}:{bound_port}{MCP_PATH}"}))  # fmt: skip
        tmp.replace(ready_file)
    logger.warning("sandbox MCP front (profile %s) serving on http://%s:%s%s over rail %s", front.profile.name,
                   bound_host, bound_port, MCP_PATH, front.rail_url)  # fmt: skip
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False, timeout_graceful_shutdown=2)
    uvicorn.Server(config).run(sockets=[sock])


def serve_front_stdio(front: Front) -> None:
    server = build_front_server(front)

    async def run() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        await front.aclose()

    anyio.run(run)
