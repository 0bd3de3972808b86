"""One total deadline per rail call, and the send window of a money call, enforced where the bytes move.

Both checks live in the network layer (an httpcore network backend), not before the call into httpx:
the process can be paused (SIGSTOP, GC, VM steal) between any two Python lines, so a check that guards
a send must be made at the moment the first byte is about to be written, and a deadline must bound every
socket wait, not each operation afresh (httpx's own timeouts restart on every read, so a rail that
trickles a byte every few seconds would hold a call open for ever).

* `send_window(send_by)` — the worker's rule (SPEC §8, ADR 0005): inside the block a request's first
  byte may leave only while `clock.monotonic() < send_by`; later, nothing is written and the call fails
  NOT_SENT. Once the first byte has left, the rest of that request is written normally.
* `total_deadline(deadline)` — every socket wait of the REST request under way (connect, TLS handshake,
  each write, each read of the response) is clamped to what is left; when nothing is left the matching
  httpcore timeout is raised, which the client classifies as before (connect: NOT_SENT, later: AMBIGUOUS).

Both are context variables, so they hold for the thread (or asyncio task) that set them. The MCP
upstream's session runs on its own event loop: rails.mcp_session passes send_by across explicitly and
re-arms the window inside the task that hands the request to the SDK's transport.

HTTP/1.1 only (httpx and httpx2 are built with http2=False here): a request is all writes, then its
response is all reads, so the first write after a read — or the first on a new connection — is the
first byte of a request. TLS handshakes happen inside start_tls, below this layer, and are not
request bytes.
"""

from __future__ import annotations

import itertools
import ssl
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

import httpcore
import httpcore2
import httpx
import httpx2

from interlock import clock

# The deadline is re-checked between pieces of a write; inside one piece httpcore gives each partial send()
# what was left when the piece began. A refund request is a few hundred bytes: one send(), never blocking.
_WRITE_PIECE = 16 * 1024


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
_deadline: ContextVar[float | None] = ContextVar("interlock_rail_deadline", default=None)


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


@contextmanager
def total_deadline(deadline: float) -> Iterator[None]:
    """Every socket wait of the request made inside this block ends by `deadline` (a monotonic instant)."""
    token = _deadline.set(deadline)
    try:
        yield
    finally:
        _deadline.reset(token)


def _clamp(timeout: float | None, expired: type[Exception]) -> float | None:
    deadline = _deadline.get()
    if deadline is None:
        return timeout
    left = deadline - clock.monotonic()
    if left <= 0:
        raise expired("the rail call's total deadline has passed")
    return left if timeout is None else min(timeout, left)


def _admit() -> None:
    guard = _window.get()
    if guard is not None:
        guard.admit()


# -- httpcore (the REST client, synchronous) ----------------------------------------------------------


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner
        self._between_requests = True

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._between_requests = True
        return self._inner.read(max_bytes, _clamp(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if self._between_requests:
            # Out of time before the first byte: nothing was sent, which is what a connect timeout means.
            _clamp(timeout, httpcore.ConnectTimeout)
            _admit()  # the last check before this request's first byte
            self._between_requests = False
        for start in range(0, len(buffer), _WRITE_PIECE):
            self._inner.write(buffer[start : start + _WRITE_PIECE], _clamp(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        tls = self._inner.start_tls(ssl_context, server_hostname, _clamp(timeout, httpcore.ConnectTimeout))
        return _DeadlineStream(tls)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's own backend, with the total deadline on every wait and the send window on first writes."""

    def __init__(self, inner: httpcore.NetworkBackend | None = None) -> None:
        self._inner = inner or httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        # Connecting is not sending: the window is checked at the first write, not here.
        timeout = _clamp(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        timeout = _clamp(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


POOL_SHARD = 32  # connections per httpcore pool: its bookkeeping scans every connection on every request


def http_transport(connections: int = 100) -> httpx.BaseTransport:
    """httpx's transport with never a retry (I3) and the deadline backend under its connection pool.

    *connections* should cover the calls a process keeps in flight at once (the rail worker's concurrency):
    past it a request waits for a connection inside its own deadline, and keep-alive is kept for all of
    them so a busy worker does not reconnect per call. Above POOL_SHARD connections the pool is split into
    several, each thread keeping to one: httpcore walks a whole pool on every request and every release,
    which at 256 connections cost the rail worker more CPU than the HTTP itself."""
    if connections <= POOL_SHARD:
        return _pooled_transport(connections)
    shards = -(-connections // POOL_SHARD)
    return _ThreadShardedTransport([_pooled_transport(-(-connections // shards)) for _ in range(shards)])


def _pooled_transport(connections: int) -> httpx.HTTPTransport:
    transport = httpx.HTTPTransport(retries=0)
    # httpx 0.28 has no network_backend argument: rebuild its pool the way it does, with ours underneath.
    transport._pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(),
        max_connections=connections,
        max_keepalive_connections=connections,
        keepalive_expiry=5.0,
        http1=True,
        http2=False,
        retries=0,
        network_backend=DeadlineBackend(),
    )
    return transport


class _ThreadShardedTransport(httpx.BaseTransport):
    """Several connection pools; a thread is given one, in turn, the first time it sends."""

    def __init__(self, shards: list[httpx.HTTPTransport]) -> None:
        self._shards = shards
        self._mine = threading.local()
        self._turn = itertools.count()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        shard: httpx.HTTPTransport | None = getattr(self._mine, "shard", None)
        if shard is None:
            shard = self._mine.shard = self._shards[next(self._turn) % len(self._shards)]
        return shard.handle_request(request)

    def close(self) -> None:
        for shard in self._shards:
            shard.close()


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
            _admit()
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
