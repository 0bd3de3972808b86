"""The stdio transport: what an agent's MCP client launches. stdout carries only JSON-RPC; the SDK's
stdio server also points fd 1 at stderr while serving, so a stray print cannot corrupt the stream.

stdin is read here, not by the SDK, one bounded line at a time: a line the SDK would drop unanswered
(not JSON, not JSON-RPC, a duplicate key, too large) is answered with a JSON-RPC error instead
(ingress.frames), so a client never waits on a message that was never going to be read.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from typing import Any, BinaryIO

import anyio
import anyio.to_thread
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from ingress.app import Ingress
from ingress.frames import MAX_MESSAGE_BYTES, refusal
from ingress.server import build_server

logger = logging.getLogger(__name__)


class CheckedStdin:
    """The lines of stdin that may reach the SDK; each refused line is answered on *write_stream*."""

    def __init__(self, buffer: BinaryIO) -> None:
        self.buffer = buffer
        self.write_stream: Any = None
        self.ready = anyio.Event()

    def attach(self, write_stream: Any) -> None:
        self.write_stream = write_stream
        self.ready.set()

    async def __aiter__(self) -> AsyncIterator[str]:
        while True:
            line = await anyio.to_thread.run_sync(self._read_line)
            if line is None:
                return
            if not line.strip():
                continue
            error = refusal(line, full=True)
            if error is None:
                yield line.decode("utf-8", "replace")
                continue
            logger.warning("refused a stdio message: %s", error.error.message)
            await self.ready.wait()
            await self.write_stream.send(SessionMessage(error))

    def _read_line(self) -> bytes | None:
        """One line, or a placeholder of MAX_MESSAGE_BYTES + 1 bytes for a longer one (the rest is skipped
        as it arrives, never held); None at end of input."""
        line = self.buffer.readline(MAX_MESSAGE_BYTES + 1)
        if not line:
            return None
        if len(line) > MAX_MESSAGE_BYTES and not line.endswith(b"\n"):
            while (more := self.buffer.readline(MAX_MESSAGE_BYTES)) and not more.endswith(b"\n"):
                pass
        return line


def serve_stdio(ingress: Ingress) -> None:
    server = build_server(ingress)

    async def run() -> None:
        stdin = CheckedStdin(sys.stdin.buffer)
        async with stdio_server(stdin=stdin) as (read_stream, write_stream):  # type: ignore[arg-type]
            stdin.attach(write_stream)
            logger.info("ingress serving MCP on stdio for agent %s", ingress.stdio_agent_id)
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(run)
