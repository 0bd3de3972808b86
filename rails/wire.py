"""The rail client's HTTP/1.1 exchange: one request, one response, on a kept-alive socket of the calling thread.

Why not httpx here (ADR 0031): a payment read through httpx cost 454 us of CPU against 120 us for the same
GET through the standard library, and every gated call makes two rail requests. This module does only what
the rail client needs — one request written whole, its response parsed by `http.client.HTTPResponse` —
and keeps the two rules the rail worker depends on where the bytes move (rails.deadline):

* the send window: `deadline.admit_first_byte()` is the last thing before the request's single `sendall`;
  a closed window raises SendWindowClosed and no byte is written (the socket is closed unused);
* the total deadline: every socket wait — connect, TLS handshake, the write, each read of the response —
  gets what is left of one monotonic instant, so a rail that trickles a byte at a time cannot outlive it.

Failures say what is known about the request: `NotSent` (no byte of it can have left: connect refused or
timed out, the deadline passed before the first byte, an unwritable header) and `Lost` (it may have reached
the rail: a timeout, reset or unreadable answer after the first byte). Nothing here retries (I3).

Each thread keeps one connection per client (the rail worker's call slots are threads); a kept connection
idle past KEEPALIVE_S, or one the server has closed (readable while idle), or one from before a fork, is
closed and replaced before a request is written on it.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import os
import select
import socket
import ssl
import threading
import weakref
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from interlock import clock
from rails.deadline import admit_first_byte

KEEPALIVE_S = 5.0  # a connection idle longer is not reused (httpx kept the same expiry)
_MAX_BODY = 16 * 1024 * 1024  # a rail answer larger than this is not a rail answer


class WireError(Exception):
    """Raised when an exchange did not produce a whole response."""


class NotSent(WireError):
    """Raised when no byte of the request can have reached the rail."""


class Lost(WireError):
    """Raised when the request may have reached the rail but no whole response came back."""


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole HTTP response: status, headers (lower-cased names) and the decoded body bytes."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return json.loads(self.body)


def encode_json(payload: Any) -> bytes:
    """The request body for *payload*: compact UTF-8 JSON, no NaN (the bytes httpx sent for the same payload, so
    a retry after an upgrade still sends the rail an identical body under its idempotency key)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


class _Connection:
    __slots__ = ("sock", "pid", "idle_since", "__weakref__")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pid = os.getpid()
        self.idle_since = clock.monotonic()

    def reusable(self) -> bool:
        if self.pid != os.getpid() or clock.monotonic() - self.idle_since > KEEPALIVE_S:
            return False
        try:
            # An idle HTTP/1.1 connection has nothing to read; readable means the server closed it (or broke it).
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Wire:
    """HTTP/1.1 to one origin (http or https, with an optional path prefix), basic auth, fixed headers;
    `exchange` makes one request."""

    def __init__(self, origin: str, key_id: str, key_secret: str, *, connect_timeout_s: float, user_agent: str,
                 tls: ssl.SSLContext | None = None) -> None:  # fmt: skip
        """*tls* replaces the system's default verifying context (tests give one that trusts their own CA)."""
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ValueError(f"the rail URL must be http(s)://host[:port][/path], got {origin!r}")
        self._prefix = parts.path.rstrip("/")  # a path on the origin goes before every request's (a gateway's)
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.connect_timeout_s = connect_timeout_s
        self._tls = (tls or ssl.create_default_context()) if self.https else None
        default_port = self.port == (443 if self.https else 80)
        host_header = self.host if default_port else f"{self.host}:{self.port}"
        token = base64.b64encode(f"{key_id}:{key_secret}".encode()).decode("ascii")
        self._fixed = (f"Host: {host_header}\r\nUser-Agent: {user_agent}\r\nAccept: application/json\r\n"
                       f"Authorization: Basic {token}\r\n")  # fmt: skip
        _refuse_line_breaks(self._fixed.replace("\r\n", ""))
        self._mine = threading.local()
        self._all: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._lock = threading.Lock()

    def exchange(self, method: str, path: str, *, deadline: float, body: bytes | None = None,
                 headers: Mapping[str, str] | None = None,
                 params: Mapping[str, Any] | None = None) -> Answer:  # fmt: skip
        """Write one request and read its whole response, all by *deadline* (a clock.monotonic() instant)."""
        request = self._request_bytes(method, path, body, headers, params)
        conn = self._connection(deadline)
        try:
            left = deadline - clock.monotonic()
            if left <= 0:
                raise NotSent("the rail call's total deadline passed before the first byte")
            admit_first_byte()  # the last check before the request's first byte (SendWindowClosed: none written)
        except BaseException:
            self._drop(conn)
            raise
        try:
            conn.sock.settimeout(left)
            conn.sock.sendall(request)
            answer, keep = _read_response(conn.sock, method, deadline)
        except BaseException as exc:
            self._drop(conn)
            if isinstance(exc, (OSError, http.client.HTTPException, ValueError, zlib.error)):
                raise Lost(_describe(exc)) from exc
            raise
        if keep:
            conn.idle_since = clock.monotonic()
        else:
            self._drop(conn)
        return answer

    def close(self) -> None:
        """Close every connection this client holds, in every thread."""
        with self._lock:
            held = list(self._all)
            self._all.clear()
        for conn in held:
            conn.close()

    # -- connections -----------------------------------------------------------------------------

    def _connection(self, deadline: float) -> _Connection:
        conn: _Connection | None = getattr(self._mine, "conn", None)
        if conn is not None and conn.reusable():
            return conn
        if conn is not None:
            self._drop(conn)
        conn = _Connection(self._connect(deadline))
        self._mine.conn = conn
        with self._lock:
            self._all.add(conn)
        return conn

    def _connect(self, deadline: float) -> socket.socket:
        """A new socket to the origin (TLS done); NotSent when it cannot be made by the deadline."""
        left = deadline - clock.monotonic()
        if left <= 0:
            raise NotSent("the rail call's total deadline passed before connecting")
        try:
            sock = socket.create_connection((self.host, self.port), timeout=min(self.connect_timeout_s, left))
        except OSError as exc:
            raise NotSent(_describe(exc)) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                # The handshake is not request bytes: a failure here is still NOT_SENT.
                sock.settimeout(max(min(self.connect_timeout_s, deadline - clock.monotonic()), 0.001))
                sock = self._tls.wrap_socket(sock, server_hostname=self.host)
        except OSError as exc:
            sock.close()
            raise NotSent(_describe(exc)) from exc
        return sock

    def _drop(self, conn: _Connection) -> None:
        conn.close()
        if getattr(self._mine, "conn", None) is conn:
            self._mine.conn = None
        with self._lock:
            self._all.discard(conn)

    # -- the request -------------------------------------------------------------------------------

    def _request_bytes(self, method: str, path: str, body: bytes | None, headers: Mapping[str, str] | None,
                       params: Mapping[str, Any] | None) -> bytes:  # fmt: skip
        target = self._prefix + path + (f"?{urlencode(params)}" if params else "")
        lines = [f"{method} {target} HTTP/1.1\r\n", self._fixed]
        for name, value in (headers or {}).items():
            _refuse_line_breaks(f"{name}{value}")
            lines.append(f"{name}: {value}\r\n")
        if body is not None:
            lines.append(f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n")
        _refuse_line_breaks(target)
        head = "".join(lines).encode("latin-1", errors="strict") + b"\r\n"
        return head + body if body is not None else head


def _refuse_line_breaks(text: str) -> None:
    if "\r" in text or "\n" in text:
        raise NotSent("a request header or target carries a line break: nothing was written")


class _DeadlineReader(io.RawIOBase):
    """The socket's reads, each waiting at most what is left of the deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - clock.monotonic()
        if left <= 0:
            raise TimeoutError("the rail call's total deadline has passed")
        self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _ResponseSource:
    """What http.client.HTTPResponse reads from: only makefile("rb") is used."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._reader = _DeadlineReader(sock, deadline)

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(self._reader)


def _read_response(sock: socket.socket, method: str, deadline: float) -> tuple[Answer, bool]:
    """The whole response, and whether the connection may carry another request."""
    response = http.client.HTTPResponse(_ResponseSource(sock, deadline), method=method)  # type: ignore[arg-type]
    response.begin()
    declared = response.getheader("content-length")
    if declared is not None and declared.isdigit() and int(declared) > _MAX_BODY:
        raise http.client.HTTPException(f"a {declared}-byte answer is larger than any rail answer")
    raw = response.read(_MAX_BODY + 1)
    if len(raw) > _MAX_BODY:
        raise http.client.HTTPException("the answer is larger than any rail answer")
    headers = {name.lower(): value for name, value in response.getheaders()}
    keep = not response.will_close and response.isclosed()
    return Answer(response.status, headers, _decoded(raw, headers.get("content-encoding", ""))), keep


def _decoded(raw: bytes, encoding: str) -> bytes:
    # Nothing asks for compression; a server that sends it anyway is still read.
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding == "gzip":
        return zlib.decompress(raw, 16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompress(raw)
    raise ValueError(f"unreadable content-encoding {encoding!r}")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
