"""One long-lived MCP client session to an upstream server, usable from synchronous code.

The workers are synchronous, the MCP SDK is async. An asyncio loop runs in a daemon thread and holds
one session (stdio: one upstream child process; HTTP: one MCP session). Calls from any thread are
submitted to that loop. Measured against the sandbox front on one machine: a held session answers
fetch_payment in ~5-7 ms (HTTP and stdio alike); a session per call costs ~70 ms over HTTP (initialize +
call + terminate) and a process start (~1.2 s) over stdio — hence one held session, dropped after any
failure other than our own refusal to hand a request over, and reopened on the next call.

Every call has ONE total deadline (`timeout_s`, INTERLOCK_RAIL_TIMEOUT_MS) counted from the moment it
is asked for: waiting for a session (opening one when none is held), every request of the call and its
answer. On the loop it is a cancel scope around the whole call; the calling thread stops waiting at the
same instant plus `_SLACK_S` for the cancellation to unwind, whatever the loop is doing. An opening
outlived by its caller goes on for the calls after it, bounded by `connect_timeout_s`.

What a failure means for the money is decided here, once, from one fact — whether a request of the call
was handed to the SDK's transport (`_Call`, under a lock shared with the calling thread, so that "never
handed over" is final once the caller has given up):
* `UpstreamNotSent`   — nothing of the call was handed over: no session in time, the deadline or the
  caller's send window passed first, or the session was already dead.
* `UpstreamAmbiguous` — a request was handed over and no readable answer came back in time: the
  upstream may have acted on it.

The send window (rails.deadline.send_window, opened by the rail worker in its own thread) does not
follow the call into the loop's thread by itself: it is read in the calling thread and carried in the
`_Call`. It is checked (1) in the calling thread before anything else; (2) on the loop when the call's
first request is handed to the transport's write stream — the SDK has built the JSON-RPC message; this is
the last point the SDK gives us for both transports; (3) over streamable HTTP only, immediately before
the first byte of the POST that carries it (rails.deadline.WindowBackend under our own httpx2 client;
the SDK copies the sender's context into that POST's task). Over stdio, after (2) the SDK's writer task
takes the message, dumps it to JSON and writes it to the child's stdin, with no I/O wait in between.

The SDK is used in "legacy" handshake mode with its response cache off: no layer of it may resend a
request on our behalf (I3), and a tools/list must always reach the upstream (G6 judges what it
serves now).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import shlex
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import anyio
import httpx2
from mcp import Client
from mcp.client._transport import TransportStreams, WriteStream
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage
from mcp_types import CallToolResult, Implementation, JSONRPCRequest, Tool

from interlock.errors import ConfigError
from rails.deadline import SendGuard, SendWindowClosed, armed_window, async_http_transport, carried, current_window
from rails.wire import describe_error

logger = logging.getLogger(__name__)

T = TypeVar("T")
MAX_TOOL_PAGES = 100  # a server whose tools/list never ends must not hang a gate
_SLACK_S = 0.5  # for the loop to unwind a call cancelled at its deadline, before the caller stops waiting
_CLOSE_GRACE_S = 5.0  # a session asked to close (HTTP DELETE, stdio shutdown) is cancelled after this
# The SDK's own defaults for its HTTP client; a call's deadline is the cancel scope around it, not these.
_HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


class UpstreamNotSent(Exception):
    """Raised when nothing of a call was handed to the upstream session: the request never left this process."""


class UpstreamAmbiguous(Exception):
    """Raised when a request went to the upstream and no readable answer came back: it may have been applied."""


class _TooLate(Exception):
    """Raised on the loop in place of handing a request over, once its call's deadline passed or the caller left."""


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


class _Call:
    """One call's deadline and send window, and whether it handed a request over; shared by both threads."""

    def __init__(self, deadline: float, window: SendGuard | None) -> None:
        self.deadline = deadline
        # The calling thread's send window, carried explicitly (context does not cross into the loop).
        self.window = window
        self.send_by = window.send_by if window is not None else None
        self.guard: SendGuard | None = None  # the window as armed for the network layer (HTTP only)
        self._lock = threading.Lock()
        self._handed = False
        self._abandoned = False

    def hand_over(self) -> bool:
        """On the loop, immediately before a request goes to the transport; True for the call's first."""
        with self._lock:
            now = time.monotonic()
            if self._abandoned or now >= self.deadline:
                raise _TooLate("the call's deadline passed before its request was handed over")
            first = not self._handed
            # Only the first request is the call's own (the SDK may follow a tools/call with a tools/list).
            late = self.window.closed() if first and self.window is not None else None
            if late is not None and self.send_by is not None:
                raise SendWindowClosed(self.send_by, self.send_by + late)
            self._handed = True
            return first

    def abandon(self) -> bool:
        """In the calling thread, giving up: nothing is handed over after this. True if something was."""
        with self._lock:
            self._abandoned = True
            return self._handed

    def refused_on_the_wire(self) -> bool:
        """The network layer stopped the handed-over request before its first byte (HTTP)."""
        return self.guard is not None and self.guard.refused and not self.guard.sent


_current_call: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("interlock_upstream_call", default=None)


class _HandOver:
    """The transport's write stream as the SDK sees it: every request of a call passes `_Call.hand_over`."""

    def __init__(self, inner: WriteStream[SessionMessage]) -> None:
        self._inner = inner

    async def send(self, item: SessionMessage, /) -> None:
        call = _current_call.get()
        if call is None or not isinstance(item.message, JSONRPCRequest):
            # The session's own traffic (initialize, initialized) and notifications such as a courtesy cancel.
            await self._inner.send(item)
            return
        if call.hand_over() and call.window is not None:
            # Armed only while this request is handed over: the HTTP transport copies this context into the
            # task that POSTs it, where the first byte is checked again.
            with armed_window(call.window.send_by, **carried(call.window)) as guard:
                call.guard = guard
                await self._inner.send(item)
            return
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _HandOver:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc_val: BaseException | None, exc_tb: TracebackType | None
    ) -> bool | None:
        await self._inner.aclose()
        return None


@asynccontextmanager
async def _handed_over(transport: AbstractAsyncContextManager[TransportStreams]) -> AsyncIterator[TransportStreams]:
    async with transport as (read_stream, write_stream):
        yield read_stream, _HandOver(write_stream)


@dataclass(eq=False)
class _Held:
    """One session's life on the loop: opening, held, closing."""

    ready: Future[Client] = field(default_factory=Future)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    ended: threading.Event = field(default_factory=threading.Event)
    task: asyncio.Task[None] | None = None
    running: Future[None] | None = None

    def alive(self) -> bool:
        return self.running is not None and not self.running.done()

    def end(self) -> None:
        """On the loop: close the session cleanly if it is open, cancel it if it is still opening."""
        self.stop.set()
        if self.task is None:
            return  # not started yet; it sees `stop` and returns
        if not self.ready.done():
            self.task.cancel()
        else:
            self.task.get_loop().call_later(_CLOSE_GRACE_S, self.task.cancel)


class UpstreamSession:
    def __init__(self, target: UpstreamTarget, *, timeout_s: float, connect_timeout_s: float = 10.0) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._held: _Held | None = None

    # -- public, synchronous -------------------------------------------------------------------

    def list_tools(self) -> list[Tool]:
        """Every tool the upstream serves now (all pages), never from a cache, within one deadline."""
        return self._call(self._list_tools)

    def call_tool(self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None) -> CallToolResult:
        async def call(client: Client, budget_s: float) -> CallToolResult:
            return await client.session.call_tool(name, arguments, read_timeout_seconds=budget_s)

        return self._call(call, timeout_s)

    def close(self) -> None:
        with self._lock:
            held, loop, thread = self._held, self._loop, self._thread
            self._held, self._loop, self._thread = None, None, None
        if loop is None:
            return
        if held is not None and held.alive():
            loop.call_soon_threadsafe(held.end)
            if not held.ended.wait(_CLOSE_GRACE_S + 1):
                logger.warning("MCP session to upstream %s did not close in time", self.target.describe())
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(5)

    # -- one call, one deadline ------------------------------------------------------------------

    def _call(self, work: Callable[[Client, float], Awaitable[T]], timeout_s: float | None = None) -> T:
        started = time.monotonic()
        call = _Call(started + (timeout_s or self.timeout_s), current_window())
        where = self.target.describe()
        late = call.window.closed() if call.window is not None else None
        if late is not None and call.send_by is not None:
            raise UpstreamNotSent(f"{where}: {SendWindowClosed(call.send_by, call.send_by + late)}")
        client, held = self._connected(call.deadline)
        budget_s = call.deadline - time.monotonic()
        if budget_s <= 0:
            raise UpstreamNotSent(f"{where}: the deadline passed while the session was opening")
        future = self._submit(self._bounded(call, work(client, budget_s)))
        try:
            return future.result(budget_s + _SLACK_S)
        except Exception as exc:
            future.cancel()
            handed = call.abandon()
            late = isinstance(exc, TimeoutError)
            what = f"{where}: " + (f"no answer within {call.deadline - started:.3g}s" if late else _describe(exc))
            # A session that failed under a call (expired by the server, transport half-dead) is not trusted
            # again: the next call opens a fresh one. Our own refusals before the hand-over leave it as it was.
            if handed or not isinstance(exc, (SendWindowClosed, _TooLate, TimeoutError)):
                self._release(held)
            if not handed or call.refused_on_the_wire():
                raise UpstreamNotSent(what) from exc
            raise UpstreamAmbiguous(what) from exc

    @staticmethod
    async def _bounded(call: _Call, work: Awaitable[T]) -> T:
        _current_call.set(call)  # this task runs in a context of its own (see _submit)
        with anyio.fail_after(call.deadline - time.monotonic()):
            return await work

    def _submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        with self._lock:
            loop = self._ensure_loop()
        # In an empty context: nothing of the calling thread's context reaches the loop by accident; what a
        # call needs from it (the send window) travels in its _Call.
        return contextvars.Context().run(asyncio.run_coroutine_threadsafe, coro, loop)

    # -- the loop and the held session ----------------------------------------------------------

    def _connected(self, deadline: float) -> tuple[Client, _Held]:
        with self._lock:
            held = self._held
            if held is None or not held.alive():
                held = self._held = _Held()
                loop = self._ensure_loop()
                held.running = contextvars.Context().run(asyncio.run_coroutine_threadsafe, self._hold(held), loop)
        try:
            return held.ready.result(max(0.0, deadline - time.monotonic())), held
        except TimeoutError:
            raise UpstreamNotSent(f"{self.target.describe()}: no session within the call's deadline") from None
        except Exception as exc:
            raise UpstreamNotSent(f"{self.target.describe()}: cannot connect: {_describe(exc)}") from exc

    async def _hold(self, held: _Held) -> None:
        # The SDK's transports are anyio task groups: entered and exited in this one task, kept open
        # until `stop` is set or the transport dies under us.
        held.task = asyncio.current_task()
        assert held.task is not None
        opening = asyncio.get_running_loop().call_later(self.connect_timeout_s, held.task.cancel)
        try:
            if held.stop.is_set():
                raise RuntimeError("closed before it opened")
            async with AsyncExitStack() as stack:
                # The session's default read timeout only bounds the handshake: each call brings its own deadline.
                client = Client(await self._transport(stack), mode="legacy", cache=None,
                                read_timeout_seconds=self.connect_timeout_s,
                                client_info=Implementation(name="interlock", version="0"))  # fmt: skip
                await stack.enter_async_context(client)
                opening.cancel()
                held.ready.set_result(client)
                logger.info("MCP session to upstream %s opened", self.target.describe())
                await held.stop.wait()
        except BaseException as exc:
            if not held.ready.done():
                failed = exc if isinstance(exc, Exception) else RuntimeError(_describe(exc))
                if isinstance(exc, asyncio.CancelledError):
                    failed = RuntimeError(f"no session within {self.connect_timeout_s}s")
                held.ready.set_exception(failed)
            elif not held.stop.is_set():
                logger.warning("MCP session to upstream %s ended: %s", self.target.describe(), _describe(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            opening.cancel()
            held.ended.set()

    async def _transport(self, stack: AsyncExitStack) -> AbstractAsyncContextManager[TransportStreams]:
        server = self.target.server()
        if isinstance(server, str):
            # Our own HTTP client, so that the POST carrying a money call has its first byte checked.
            http = await stack.enter_async_context(
                httpx2.AsyncClient(timeout=_HTTP_TIMEOUT, transport=async_http_transport())
            )
            return _handed_over(streamable_http_client(server, http_client=http))
        return _handed_over(stdio_client(server))

    def _release(self, held: _Held) -> None:
        """Let go of a session without waiting for it to close: the caller's deadline is already spent."""
        with self._lock:
            if self._held is held:
                self._held = None
            loop = self._loop
        if loop is not None and held.alive():
            loop.call_soon_threadsafe(held.end)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="mcp-upstream", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop

    @staticmethod
    async def _list_tools(client: Client, budget_s: float) -> list[Tool]:
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
    return describe_error(exc)
