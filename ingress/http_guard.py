"""Connection limits below the ASGI app: a header and a body read deadline, and a cap on open connections.

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

A connection that times out gets a bare `408` and is closed. Nothing here knows about MCP or tokens.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)

TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
FULL_BODY = b'{"error": "too_many_connections", "detail": "the ingress holds its maximum of open connections"}'
FULL = (b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-type: application/json\r\n"
        b"retry-after: 1\r\ncontent-length: %d\r\n\r\n%s" % (len(FULL_BODY), FULL_BODY))  # fmt: skip
# Under a flood one line per closed connection would be a flood of its own: say how many, at most this often.
REPORT_EVERY_S = 10.0


class ConnectionGuard:
    """The limits, and the connections they apply to (all on the one event loop thread: no locks)."""

    def __init__(self, max_connections: int, header_timeout_s: float, body_timeout_s: float) -> None:
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
        logger.warning("HTTP connections closed by the ingress's limits: %s (%d open, limit %d)", summary,
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
                self._close(FULL)
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
