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

Through a forward proxy (rails.egress): an https rail through a CONNECT tunnel, TLS to the rail inside it; an
http rail's request in absolute form to the proxy, as curl sends it. The proxy's connect, the CONNECT and the
handshake make the connection: they share the deadline and fail NotSent; the window is checked after them.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import select
import socket
import ssl
import threading
import weakref
import zlib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as ResolveTimeout
from dataclasses import dataclass
from ipaddress import ip_address
from typing import Any
from urllib.parse import urlencode, urlsplit

import certifi

from interlock import clock
from rails.deadline import admit_first_byte
from rails.egress import Proxy, TunnelRefused, connect_request, open_tunnel, proxy_for

KEEPALIVE_S = 5.0  # a connection idle longer is not reused (httpx kept the same expiry)
_MAX_BODY = 16 * 1024 * 1024  # a rail answer larger than this (decoded, too) is not a rail answer
_READ_SIZE = 64 * 1024
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)
_VALUE = re.compile(r"^[\t\x20-\x7e]*$")  # a header value: visible ASCII, spaces and tabs, nothing else
_TARGET = re.compile(r"^/[\x21-\x7e]*$")  # a request target: no spaces, no control characters
# Name resolution has no timeout of its own: it runs here, and the call waits for it only as long as its deadline.
_resolver = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rail-resolve")


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
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return False  # decrypted bytes nobody asked for: the connection is out of step
        try:
            # An idle HTTP/1.1 connection has nothing to read; readable means the server closed it (or broke it).
            poller = select.poll()
            poller.register(self.sock, select.POLLIN)
            return not poller.poll(0)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Wire:
    """HTTP/1.1 to one origin (http or https, with an optional path prefix), basic auth, fixed headers, through the
    environment's forward proxy if it names one (rails.egress); `exchange` makes one request."""

    def __init__(self, origin: str, key_id: str, key_secret: str, *, connect_timeout_s: float, user_agent: str,
                 tls: ssl.SSLContext | None = None, environ: Mapping[str, str] | None = None) -> None:  # fmt: skip
        """*tls* replaces the default verifying context, which trusts certifi's CA bundle (tests give one that trusts
        their own CA). The proxy, if any, is read once, here, from *environ* (default: os.environ); ConfigError
        when its variable is malformed."""
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ValueError(f"the rail URL must be http(s)://host[:port][/path], got {origin!r}")
        self._prefix = parts.path.rstrip("/")  # a path on the origin goes before every request's (a gateway's)
        if self._prefix and not _TARGET.match(self._prefix):
            raise ValueError(f"the rail URL's path may not hold spaces or control characters, got {origin!r}")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.connect_timeout_s = connect_timeout_s
        # The CA bundle httpx used (certifi), so the client trusts what it trusted before ADR 0031.
        self._tls = (tls or ssl.create_default_context(cafile=certifi.where())) if self.https else None
        default_port = self.port == (443 if self.https else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        host_header = host if default_port else f"{host}:{self.port}"
        token = base64.b64encode(f"{key_id}:{key_secret}".encode()).decode("ascii")
        self._fixed = (f"Host: {host_header}\r\nUser-Agent: {user_agent}\r\nAccept: application/json\r\n"
                       f"Authorization: Basic {token}\r\n")  # fmt: skip
        if not _VALUE.match(user_agent):
            raise ValueError(f"the user agent must be printable ASCII, got {user_agent!r}")
        self.proxy: Proxy | None = proxy_for(parts.scheme, self.host, os.environ if environ is None else environ)
        self._absolute = ""  # what goes before the target: the origin, for an http rail through a proxy
        self._tunnel: tuple[str, bytes] | None = None  # the CONNECT's target and request, for an https rail
        if self.proxy is not None and self.https:
            target = f"{host}:{self.port}"
            self._tunnel = target, connect_request(self.proxy, target, user_agent)
        elif self.proxy is not None:
            self._absolute = f"http://{host_header}"
            if self.proxy.authorization is not None:
                self._fixed += f"Proxy-Authorization: {self.proxy.authorization}\r\n"
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
                raise Lost(describe_error(exc)) from exc
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
        """A new socket to the origin (through the proxy's tunnel, if any; TLS done); NotSent when it cannot be made
        by the deadline. Every wait — name resolution, each address's connect, the CONNECT exchange, the TLS
        handshake — gets what is left of the deadline, each at most connect_timeout_s."""
        proxy = self.proxy
        via = f"through {proxy}: " if proxy is not None else ""
        peer = (proxy.host, proxy.port) if proxy is not None else (self.host, self.port)
        addresses = self._resolve(*peer, deadline, via)
        failure: BaseException | None = None
        for family, kind, proto, _, address in addresses:
            left = deadline - clock.monotonic()
            if left <= 0:
                break
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(min(self.connect_timeout_s, left))
                sock.connect(address)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if proxy is not None and self._tunnel is not None:
                    # A CONNECT carries the rail's host and port, no request byte: a refusal is still NOT_SENT.
                    until = min(deadline, clock.monotonic() + self.connect_timeout_s)
                    open_tunnel(sock, proxy, *self._tunnel, until)
                if self._tls is None:
                    return sock
                # The handshake is not request bytes: a failure here is still NOT_SENT.
                sock.settimeout(max(min(self.connect_timeout_s, deadline - clock.monotonic()), 0.001))
                return self._tls.wrap_socket(sock, server_hostname=self.host)
            except TunnelRefused as exc:
                sock.close()  # an answer, not a failure to connect: no other address of the proxy is asked
                raise NotSent(f"{exc}: nothing was sent to the rail") from exc
            except BaseException as exc:
                sock.close()
                if not isinstance(exc, (OSError, ValueError)):
                    raise
                failure = exc
        if failure is None:
            raise NotSent(f"{via}the rail call's total deadline passed before connecting")
        raise NotSent(via + describe_error(failure)) from failure

    def _resolve(self, host: str, port: int, deadline: float, via: str) -> list[Any]:
        try:
            ip_address(host)
        except ValueError:
            pass
        else:  # a literal address: nothing to look up
            return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
        lookup = _resolver.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
        try:
            return lookup.result(timeout=max(deadline - clock.monotonic(), 0))
        except ResolveTimeout as exc:
            raise NotSent(f"{via}resolving {host} took longer than the call's deadline") from exc
        except (OSError, UnicodeError) as exc:
            raise NotSent(via + describe_error(exc)) from exc

    def _drop(self, conn: _Connection) -> None:
        conn.close()
        if getattr(self._mine, "conn", None) is conn:
            self._mine.conn = None
        with self._lock:
            self._all.discard(conn)

    # -- the request -------------------------------------------------------------------------------

    def _request_bytes(self, method: str, path: str, body: bytes | None, headers: Mapping[str, str] | None,
                       params: Mapping[str, Any] | None) -> bytes:  # fmt: skip
        """The request, whole; NotSent (before anything is connected) for a target or header that cannot be
        written as one unambiguous HTTP/1.1 request."""
        target = self._prefix + path + (f"?{urlencode(params)}" if params else "")
        if not _TOKEN.match(method) or not _TARGET.match(target):
            raise NotSent(f"cannot write {method!r} {target!r} as a request line: nothing was sent")
        lines = [f"{method} {self._absolute}{target} HTTP/1.1\r\n", self._fixed]
        for name, value in (headers or {}).items():
            if not _TOKEN.match(name) or not _VALUE.match(value):
                raise NotSent(f"header {name!r} cannot be written as it is (only printable ASCII): nothing was sent")
            lines.append(f"{name}: {value}\r\n")
        if body is not None:
            lines.append(f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n")
        head = "".join(lines).encode("ascii") + b"\r\n"
        return head + body if body is not None else head


class _Reader:
    """The response's bytes from the socket, buffered, each recv given what is left of the deadline. It is what
    http.client.HTTPResponse reads (readline, read, readinto); one reader serves every response head of one
    exchange (an informational 1xx, then the final answer), and what it still holds afterwards is out of step."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline
        self._buffer = bytearray()
        self._eof = False

    def makefile(self, mode: str) -> _Reader:  # HTTPResponse(sock) asks its socket for a file
        return self

    @property
    def leftover(self) -> int:
        return len(self._buffer)

    def _fill(self) -> bool:
        if self._eof:
            return False
        left = self._deadline - clock.monotonic()
        if left <= 0:
            raise TimeoutError("the rail call's total deadline has passed")
        self._sock.settimeout(left)
        chunk = self._sock.recv(_READ_SIZE)
        if not chunk:
            self._eof = True
            return False
        self._buffer += chunk
        return True

    def readline(self, limit: int = -1) -> bytes:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0 and (limit < 0 or end < limit):
                return self._take(end + 1)
            if 0 <= limit <= len(self._buffer):
                return self._take(limit)
            if not self._fill():
                return self._take(len(self._buffer))

    def read(self, amount: int | None = -1) -> bytes:
        if amount is None or amount < 0:
            while self._fill():
                pass
            return self._take(len(self._buffer))
        while len(self._buffer) < amount and self._fill():
            pass
        return self._take(min(amount, len(self._buffer)))

    def readinto(self, target: Any) -> int:
        view = memoryview(target).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def _take(self, count: int) -> bytes:
        data = bytes(self._buffer[:count])
        del self._buffer[:count]
        return data

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass  # the socket belongs to the connection, which decides whether it is kept


def _read_response(sock: socket.socket, method: str, deadline: float) -> tuple[Answer, bool]:
    """The whole final response (informational 1xx heads skipped), and whether the connection may carry another
    request: only when the answer was framed, read to its end and nothing past it arrived."""
    reader = _Reader(sock, deadline)
    while True:
        response = http.client.HTTPResponse(reader, method=method)  # type: ignore[arg-type]
        response.begin()
        if response.status == 101:
            raise http.client.HTTPException("the rail switched protocols")
        if not 100 <= response.status < 200:
            break  # 1xx: http.client read its head (it has no body); the final answer follows on the same bytes
    lengths = response.msg.get_all("content-length") or []
    if len(lengths) > 1:
        raise http.client.HTTPException(f"{len(lengths)} Content-Length headers: the answer's end is unknown")
    if response.length is not None and response.length > _MAX_BODY:
        raise http.client.HTTPException(f"a {response.length}-byte answer is larger than any rail answer")
    raw = response.read(_MAX_BODY + 1)
    if len(raw) > _MAX_BODY:
        raise http.client.HTTPException("the answer is larger than any rail answer")
    if response.length:  # http.client's read(amount) returns a short body without complaint
        raise http.client.IncompleteRead(raw, response.length)
    headers = {name.lower(): value for name, value in response.getheaders()}
    pending = sock.pending() if isinstance(sock, ssl.SSLSocket) else 0
    keep = not response.will_close and response.isclosed() and reader.leftover == 0 and pending == 0
    return Answer(response.status, headers, _decoded(raw, headers.get("content-encoding", ""))), keep


def _decoded(raw: bytes, encoding: str) -> bytes:
    # Nothing asks for compression; a server that sends it anyway is still read, up to the same size.
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding not in ("gzip", "deflate"):
        raise ValueError(f"unreadable content-encoding {encoding!r}")
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
    data = inflater.decompress(raw, _MAX_BODY + 1)
    if len(data) > _MAX_BODY or inflater.unconsumed_tail:
        raise ValueError("the decompressed answer is larger than any rail answer")
    return data


def describe_error(exc: BaseException) -> str:
    """An exception as one line: its type, and its message when it has one."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
