"""The send window of a money call, enforced where the bytes move.

The check lives in the network layer, not before the call into a client: the process can be paused (SIGSTOP,
GC, VM steal) between any two Python lines, so a check that guards a send must be made at the moment the first
byte is about to be written.

* `send_window(send_by)` — the worker's rule (SPEC §8, ADR 0005): inside the block a request's first
  byte may leave only while `clock.monotonic() < send_by`; later, nothing is written and the call fails
  NOT_SENT. Once the first byte has left, the rest of that request is written normally.
* `admit_first_byte()` — the check itself, made by the REST client's wire (rails.wire, which also holds
  every socket wait of a REST call to one total deadline) and by the MCP upstream's stream below.

The window is a context variable, so it holds for the thread (or asyncio task) that set it. The MCP
upstream's session runs on its own event loop: rails.mcp_session passes send_by across explicitly and
re-arms the window inside the task that hands the request to the SDK's transport.

HTTP/1.1 only (httpx2 is built with http2=False here): a request is all writes, then its response is all
reads, so the first write after a read — or the first on a new connection — is the first byte of a request.
TLS handshakes happen inside start_tls, below this layer, and are not request bytes.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

import httpcore2
import httpx2

from interlock import clock


class SendWindowClosed(Exception):
    """Raised when a request's first byte would leave after its send window closed: nothing was written."""

    def __init__(self, send_by: float, now: float) -> None:
        super().__init__(f"send window closed {int((now - send_by) * 1000)} ms before the first byte")
        self.send_by = send_by
        self.late_ms = int((now - send_by) * 1000)


class Stop(Protocol):
    """What closes a send window from outside: the worker's lease-lost event, or anything else set like one."""

    def is_set(self) -> bool: ...


@dataclass(slots=True)
class SendGuard:
    """One send window. Mutable so that whoever opened it can learn what happened at the network layer,
    even from another task that saw a copy of the context (the MCP SDK copies it into its POST tasks).

    Besides the monotonic instant it may hold the same limit on the wall clock (`wall_until_ms`, read with
    `wall_clock`) — the clock a standby and the reconciler judge abandonment by, which a step or a suspend
    can move without moving the monotonic one — and the worker's lease-lost event."""

    send_by: float
    wall_until_ms: int | None = None
    wall_clock: Callable[[], int] | None = None
    lost: Stop | None = None
    sent: bool = False  # a request's first byte left inside the window
    refused: bool = False  # a request was stopped before its first byte

    def closed(self) -> float | None:
        """How late it is (seconds, >= 0) when the window is closed now, else None."""
        now = clock.monotonic()
        if now >= self.send_by:
            return now - self.send_by
        if self.lost is not None and self.lost.is_set():
            return 0.0
        if self.wall_until_ms is not None and self.wall_clock is not None:
            late_ms = self.wall_clock() - self.wall_until_ms
            if late_ms >= 0:
                return late_ms / 1000
        return None

    def admit(self) -> None:
        """Immediately before a request's first byte is written: raise unless the window is still open."""
        late = self.closed()
        if late is not None:
            self.refused = True
            raise SendWindowClosed(self.send_by, self.send_by + late)
        self.sent = True


_window: ContextVar[SendGuard | None] = ContextVar("interlock_send_window", default=None)


@contextmanager
def send_window(send_by: float, *, wall_until_ms: int | None = None, wall_clock: Callable[[], int] | None = None,
                lost: Stop | None = None) -> Iterator[None]:
    """Inside this block, a rail call may let the FIRST byte of its request leave only while
    clock.monotonic() < send_by. If the moment has passed when the request is about to be written, the call
    raises rails.razorpay.RailError with kind RailErrorKind.NOT_SENT (nothing left this machine) and no byte is
    written. Once the first byte has left, the rest of the request is written normally (never a half request).
    *wall_until_ms* (on *wall_clock*) and *lost* close the window too (SendGuard)."""
    with armed_window(send_by, wall_until_ms=wall_until_ms, wall_clock=wall_clock, lost=lost):
        yield


@contextmanager
def armed_window(send_by: float, *, wall_until_ms: int | None = None, wall_clock: Callable[[], int] | None = None,
                 lost: Stop | None = None) -> Iterator[SendGuard]:
    """`send_window`, handing back its guard (the MCP session reads `sent` / `refused` from it)."""
    guard = SendGuard(send_by, wall_until_ms, wall_clock, lost)
    token = _window.set(guard)
    try:
        yield guard
    finally:
        _window.reset(token)


def current_window() -> SendGuard | None:
    """This thread's send window, for a caller that must carry it into another thread or event loop (the MCP
    session): `carried()` gives a fresh guard with the same limits — monotonic, wall clock and lease loss."""
    return _window.get()


def carried(guard: SendGuard) -> dict[str, Any]:
    """The keyword arguments that re-arm *guard*'s limits with `armed_window(guard.send_by, **carried(guard))`."""
    return {"wall_until_ms": guard.wall_until_ms, "wall_clock": guard.wall_clock, "lost": guard.lost}


def check_send_window() -> None:
    """An early check, before any work: a window already closed now is closed at the write too."""
    guard = _window.get()
    late = guard.closed() if guard is not None else None
    if guard is not None and late is not None:
        guard.refused = True
        raise SendWindowClosed(guard.send_by, guard.send_by + late)


def admit_first_byte() -> None:
    """Immediately before a request's first byte is written: SendWindowClosed unless this thread's window (if
    any) is still open. Called by the REST client's wire (rails.wire) and the MCP session's stream below."""
    guard = _window.get()
    if guard is not None:
        guard.admit()


# -- httpcore2 (the MCP SDK's streamable HTTP client, asynchronous) ----------------------------------
# Only the send window: an async call's total deadline is a cancel scope around the whole call.


class _WindowStream(httpcore2.AsyncNetworkStream):
    def __init__(self, inner: httpcore2.AsyncNetworkStream) -> None:
        self._inner = inner
        self._between_requests = True

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._between_requests = True
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if self._between_requests:
            # anyio's send hands the bytes to the asyncio transport, which send()s them at once; nothing
            # yields to the loop in between unless this connection's send buffer is full.
            admit_first_byte()
            self._between_requests = False
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.AsyncNetworkStream:
        return _WindowStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class WindowBackend(httpcore2.AsyncNetworkBackend):
    def __init__(self, inner: httpcore2.AsyncNetworkBackend | None = None) -> None:
        self._inner = inner or httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return _WindowStream(await self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.AsyncNetworkStream:
        return _WindowStream(await self._inner.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def async_http_transport() -> httpx2.AsyncHTTPTransport:
    """httpx2's transport with never a retry and the send-window backend under its connection pool."""
    transport = httpx2.AsyncHTTPTransport(retries=0)
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=httpx2.create_ssl_context(),
        max_connections=100,
        max_keepalive_connections=20,
        keepalive_expiry=5.0,
        http1=True,
        http2=False,
        retries=0,
        network_backend=WindowBackend(),
    )
    return transport
