"""Every HTTP listener of Interlock — the ingress, the webhook receiver, the console — is served here, below its
ASGI app, with one set of connection limits (ADR 0017): a header and a body read deadline, and a cap on open
connections, with the file descriptors the cap needs reserved before the first is accepted.

uvicorn (0.54) has no timeout for a request that never finishes arriving: `timeout_keep_alive` covers only
the idle time between requests and is cancelled by the first byte of the next one, and `limit_concurrency`
answers 503 only once a request's headers are complete. ASGI middleware runs only after that too, so the
bearer check cannot help. A client that sends half a request line and stops would hold its socket (one file
descriptor) forever, and a thousand of them lock every agent out. So the guard sits in uvicorn's protocol
(h11's connection states say where each request is):

* a connection waiting for a request (just opened, or kept alive after an answer) must deliver the request's
  headers within `header_timeout_s`, counted from when it started waiting, not reset by each byte;
* a request whose headers are in must deliver its body within `body_timeout_s`;
* past `max_connections` open connections, a new one closes the connection that has waited longest without
  delivering a request's headers (an idle keep-alive or a slow sender: nothing is lost but a socket the
  client can reopen), so a flood of half-sent requests cannot refuse an agent's connection; when every
  connection is serving a request, the new one is answered 503 and closed.

A connection that times out gets a bare `408` and is closed. Nothing here knows about MCP, webhooks or sessions:
each listener passes its app and its name (which its logs and its 503 say).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from interlock.config import Settings
from interlock.errors import ConfigError, InterlockError

logger = logging.getLogger(__name__)

# The listen queue, and also (asyncio uses the one number for both) how many connections one pass of the event
# loop accepts before any of them reaches the guard: under a flood about three passes' worth are open beyond
# INTERLOCK_HTTP_MAX_CONNECTIONS until the guard closes them (uvicorn's default of 2048 let a burst of
# half-sent requests hit EMFILE before the cap could act).
LISTEN_BACKLOG = 64
# uvicorn's default: an idle kept-alive connection is closed after 5 s (and first in line at the connection cap).
KEEP_ALIVE_S = 5
# Beside the connections: the listening socket, logs, the ledger and inbox files, Redis, the rail client.
OWN_FILE_DESCRIPTORS = 64

TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"


def _full(name: str) -> bytes:
    body = b'{"error": "too_many_connections", "detail": "the %s holds its maximum of open connections"}' % (
        name.encode("ascii"))
    return (b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-type: application/json\r\n"
            b"retry-after: 1\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip

# Under a flood one line per closed connection would be a flood of its own: say how many, at most this often.
REPORT_EVERY_S = 10.0


class ConnectionGuard:
    """The limits, and the connections they apply to (all on the one event loop thread: no locks)."""

    def __init__(self, max_connections: int, header_timeout_s: float, body_timeout_s: float, *,
                 name: str = "ingress") -> None:  # fmt: skip
        self.name = name
        self.full = _full(name)
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        self.body_timeout_s = body_timeout_s
        self.open: set[GuardedH11Protocol] = set()
        # Connections waiting for a request's headers, in the order they started waiting (dicts keep it).
        self.waiting: dict[GuardedH11Protocol, None] = {}
        self.closed: dict[str, int] = {}
        self._report: asyncio.TimerHandle | None = None

    def protocol(self) -> type[GuardedH11Protocol]:
        """The uvicorn `http` protocol class that applies this guard."""
        return type("GuardedH11", (GuardedH11Protocol,), {"guard": self})

    def count(self, why: str) -> None:
        self.closed[why] = self.closed.get(why, 0) + 1
        if self._report is None:  # the first in a while is said now, the rest summed up REPORT_EVERY_S later
            self._say()

    def _say(self) -> None:
        self._report = None
        if not self.closed:
            return  # a quiet spell: the next one closed is said at once
        summary = ", ".join(f"{n} {why}" for why, n in sorted(self.closed.items()))
        logger.warning("HTTP connections closed by the %s's limits: %s (%d open, limit %d)", self.name, summary,
                       len(self.open), self.max_connections)  # fmt: skip
        self.closed = {}
        self._report = asyncio.get_running_loop().call_later(REPORT_EVERY_S, self._say)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the guard's deadlines and connection cap."""

    guard: ConnectionGuard

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase = ""
        self._deadline: asyncio.TimerHandle | None = None
        self._partial = False  # bytes of the awaited request have arrived (else it is an idle keep-alive)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        guard = self.guard
        guard.open.add(self)
        if len(guard.open) > guard.max_connections:
            victim = next(iter(guard.waiting), None)
            if victim is None:  # every other connection is serving a request: refuse this one instead
                guard.count("refused at the connection limit")
                self._close(guard.full)
                return
            guard.count("waiting for a request, closed at the connection limit")
            victim._close(TIMED_OUT)
        self._track()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._track()
        self._partial = self._phase == "headers" and bool(data)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._track()  # kept alive: the next request's headers are due from now

    def connection_lost(self, exc: Exception | None) -> None:
        self._enter("closed", None)
        self.guard.open.discard(self)
        super().connection_lost(exc)

    def _track(self) -> None:
        """Arm the deadline of the part of the request h11 says the client owes us next."""
        if self.transport is None or self.transport.is_closing():
            return
        state = self.conn.their_state
        if state is h11.IDLE:
            self._enter("headers", self.guard.header_timeout_s)
        elif state is h11.SEND_BODY:
            self._enter("body", self.guard.body_timeout_s)
        else:  # the request is in (or the connection is ending): the app's answer takes as long as it takes
            self._enter("serving", None)

    def _enter(self, phase: str, timeout_s: float | None) -> None:
        if phase == self._phase:
            return  # a deadline counts from the start of its phase: a byte at a time does not extend it
        self._phase = phase
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._partial = False
        if phase == "headers":
            self.guard.waiting[self] = None
        else:
            self.guard.waiting.pop(self, None)
        if timeout_s is not None:
            self._deadline = self.loop.call_later(timeout_s, self._expire, phase)

    def _expire(self, phase: str) -> None:
        self._deadline = None
        if phase == self._phase:
            self.guard.count(f"sent no complete request {phase} in time")
            self._close(TIMED_OUT)

    def _close(self, answer: bytes) -> None:
        if self._phase == "headers" and not self._partial:
            answer = b""  # an idle keep-alive: an unasked-for answer would confuse the client's next request
        self._enter("closed", None)
        if self.cycle is not None and not self.cycle.response_complete:
            answer = b""  # the app has started an answer of its own: do not interleave another
        if not self.transport.is_closing():
            if answer:
                self.transport.write(answer)
            self.transport.close()


def guard_for(settings: Settings, name: str) -> ConnectionGuard:
    """The limits INTERLOCK_HTTP_MAX_CONNECTIONS, INTERLOCK_HTTP_HEADER_TIMEOUT_MS and INTERLOCK_HTTP_BODY_TIMEOUT_MS
    set, for the listener *name* (each listener is its own process: each holds its own cap)."""
    return ConnectionGuard(settings.http_max_connections, settings.http_header_timeout_ms / 1000,
                           settings.http_body_timeout_ms / 1000, name=name)  # fmt: skip


def reserve_file_descriptors(settings: Settings, name: str, extra: int = 0) -> int:
    """Make sure the process may open every socket its limits allow (the connection cap, what the accept loop takes
    beyond it, and *extra* of its own), raising the soft RLIMIT_NOFILE up to the hard one if needed; refuse to start
    when even that is too few — else the listener would fail to accept a connection, or to open its ledger, at
    exactly the moment it is busiest, and the cap would never be the limit reached first."""
    needed = settings.http_max_connections + 3 * LISTEN_BACKLOG + OWN_FILE_DESCRIPTORS + extra
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return needed
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise ConfigError(
            f"the {name}'s limits need {needed} file descriptors (INTERLOCK_HTTP_MAX_CONNECTIONS="
            f"{settings.http_max_connections}, and {extra + OWN_FILE_DESCRIPTORS} of its own) but this process may "
            f"open only {hard} (ulimit -n); lower INTERLOCK_HTTP_MAX_CONNECTIONS or raise the limit",
            variable="INTERLOCK_HTTP_MAX_CONNECTIONS",
        )  # fmt: skip
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return needed


def bind(host: str, port: int, *, flag: str = "--port") -> socket.socket:
    """Bind the listening socket ourselves, so a port in use is a clear error naming it (SPEC §16)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted sockets only when it can see they are
    # TCP. Without it every answer (SSE chunks: several small writes) waited ~40 ms on Nagle + delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise InterlockError(f"port {port} on {host} is already in use; choose another with {flag}") from None
        raise InterlockError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(LISTEN_BACKLOG)
    sock.set_inheritable(True)
    return sock


def serve(app: Any, sock: socket.socket, guard: ConnectionGuard, **config: Any) -> None:
    """Serve *app* on the bound *sock* under *guard* until stopped. No WebSocket is served (ws="none"), so an Upgrade
    is never handed to a protocol without these limits; *config* adds uvicorn settings (lifespan, ...)."""
    settings = {"log_level": "warning", "access_log": False, "timeout_keep_alive": KEEP_ALIVE_S,
                "backlog": LISTEN_BACKLOG, **config}  # fmt: skip
    uvicorn.Server(uvicorn.Config(app, http=guard.protocol(), ws="none", **settings)).run(sockets=[sock])
