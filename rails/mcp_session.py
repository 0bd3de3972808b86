"""One long-lived MCP client session to an upstream server, usable from synchronous code.

The workers are synchronous, the MCP SDK is async. An asyncio loop runs in a daemon thread and holds
one session (stdio: one upstream child process; HTTP: one MCP session). Calls from any thread are
submitted to that loop and waited on with a deadline. Measured against the sandbox front on one
machine: a held session answers fetch_payment in ~5-7 ms (HTTP and stdio alike); a session per call
costs ~70 ms over HTTP (initialize + call + terminate) and a process start (~1.2 s) over stdio —
hence one held session, dropped after any failure and reopened on the next call.

What a failure means for the money is decided here, once:
* `UpstreamNotSent`   — no session could be opened: nothing of the call left this process.
* `UpstreamAmbiguous` — the request was handed to a live session and no answer came back (timeout,
  transport closed, unreadable reply): the upstream may have acted on it.
The SDK is used in "legacy" handshake mode with its response cache off: no layer of it may resend a
request on our behalf (I3), and a tools/list must always reach the upstream (G6 judges what it
serves now).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, TypeVar

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult, Implementation, Tool

from interlock.errors import ConfigError

logger = logging.getLogger(__name__)

T = TypeVar("T")
MAX_TOOL_PAGES = 100  # a server whose tools/list never ends must not hang a gate
_SLACK_S = 2.0  # beyond the SDK's own read timeout, before we stop waiting on the loop


class UpstreamNotSent(Exception):
    """Raised when no session to the upstream could be opened: the request never left this process."""


class UpstreamAmbiguous(Exception):
    """Raised when a request went to the upstream and no readable answer came back: it may have been applied."""


@dataclass(frozen=True)
class UpstreamTarget:
    """Where the upstream MCP server is: a command line (stdio) or a streamable HTTP URL."""

    command: str | None = None
    url: str | None = None

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ConfigError(
                "set exactly one of INTERLOCK_UPSTREAM_COMMAND (stdio) or INTERLOCK_UPSTREAM_URL (streamable HTTP)",
                variable="INTERLOCK_UPSTREAM_URL",
            )

    @classmethod
    def parse(cls, value: str) -> UpstreamTarget:
        """A URL (http:// or https://) or else a command line."""
        value = value.strip()
        if value.startswith(("http://", "https://")):
            return cls(url=value)
        return cls(command=value)

    def describe(self) -> str:
        return self.url or f"stdio:{self.command}"

    def server(self) -> StdioServerParameters | str:
        if self.url is not None:
            return self.url
        assert self.command is not None
        argv = shlex.split(self.command)
        if not argv:
            raise ConfigError("INTERLOCK_UPSTREAM_COMMAND is empty", variable="INTERLOCK_UPSTREAM_COMMAND")
        # The upstream inherits this process's environment: that is where its own configuration lives.
        return StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))


class UpstreamSession:
    def __init__(self, target: UpstreamTarget, *, timeout_s: float, connect_timeout_s: float = 10.0) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Client | None = None
        self._stop: asyncio.Event | None = None
        self._holder: Future[None] | None = None

    # -- public, synchronous -------------------------------------------------------------------

    def list_tools(self) -> list[Tool]:
        """Every tool the upstream serves now (all pages), never from a cache."""
        client = self._connected()
        return self._guarded(client, lambda: self._run(self._list_tools(client), self.timeout_s))

    def call_tool(self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None) -> CallToolResult:
        client = self._connected()
        timeout = timeout_s or self.timeout_s
        call = client.session.call_tool
        return self._guarded(client, lambda: self._run(call(name, arguments, read_timeout_seconds=timeout), timeout))

    def close(self) -> None:
        with self._lock:
            self._disconnect()
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                if self._thread is not None:
                    self._thread.join(5)
                self._loop = None
                self._thread = None

    def _guarded(self, client: Client, run: Callable[[], T]) -> T:
        try:
            return run()
        except UpstreamAmbiguous:
            # A session that failed once (expired by the server, transport half-dead) is not trusted
            # again: the next call opens a fresh one.
            with self._lock:
                if self._client is client:
                    self._disconnect()
            raise

    # -- the loop and the held session ----------------------------------------------------------

    def _connected(self) -> Client:
        with self._lock:
            if self._client is not None and self._holder is not None and not self._holder.done():
                return self._client
            self._disconnect()
            loop = self._ensure_loop()
            ready: Future[Client] = Future()
            self._holder = asyncio.run_coroutine_threadsafe(self._hold(ready), loop)
            try:
                self._client = ready.result(self.connect_timeout_s)
            except FutureTimeout:
                self._disconnect()
                what = f"{self.target.describe()}: no session within {self.connect_timeout_s}s"
                raise UpstreamNotSent(what) from None
            except Exception as exc:
                self._disconnect()
                raise UpstreamNotSent(f"{self.target.describe()}: cannot connect: {_describe(exc)}") from exc
            logger.info("MCP session to upstream %s opened", self.target.describe())
            return self._client

    async def _hold(self, ready: Future[Client]) -> None:
        # The SDK's transports are anyio task groups: entered and exited in this one task, kept open
        # until _disconnect() sets the stop event or the transport dies under us.
        self._stop = asyncio.Event()
        client = Client(self.target.server(), mode="legacy", cache=None, read_timeout_seconds=self.timeout_s,
                        client_info=Implementation(name="interlock", version="0"))  # fmt: skip
        try:
            async with client:
                ready.set_result(client)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            else:
                logger.warning("MCP session to upstream %s ended: %s", self.target.describe(), _describe(exc))
            if not isinstance(exc, Exception):
                raise

    def _disconnect(self) -> None:
        holder, stop, loop = self._holder, self._stop, self._loop
        self._client = None
        self._holder = None
        self._stop = None
        if holder is None or holder.done() or loop is None:
            return
        if stop is not None:
            loop.call_soon_threadsafe(stop.set)
            try:
                holder.result(5)
                return
            except Exception as exc:  # the session is being dropped either way
                logger.debug("closing upstream session: %s", _describe(exc))
        holder.cancel()  # still connecting, or deaf to the stop event: cancel its task

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="mcp-upstream", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop

    def _run(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout_s + _SLACK_S)
        except FutureTimeout:
            future.cancel()
            raise UpstreamAmbiguous(f"{self.target.describe()}: no answer within {timeout_s}s") from None
        except Exception as exc:
            # After the request was handed to the session nothing proves it did not arrive.
            raise UpstreamAmbiguous(f"{self.target.describe()}: {_describe(exc)}") from exc

    @staticmethod
    async def _list_tools(client: Client) -> list[Tool]:
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools
        raise RuntimeError(f"tools/list did not end after {MAX_TOOL_PAGES} pages")


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]  # the SDK's task groups wrap the one error that matters
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
