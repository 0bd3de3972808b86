"""The forward proxy the rail client goes through, if any, read from the environment as curl reads it, and the
CONNECT exchange that opens a tunnel through it (ADR 0031, amendment of 2026-12-07).

* Which variable: `https_proxy` / `HTTPS_PROXY` for an https rail, `http_proxy` / `HTTP_PROXY` for an http one;
  a lower-case variable that is set wins over the upper-case one, even when it is empty (empty: no proxy).
  curl ignores an upper-case HTTP_PROXY (a CGI program cannot trust it); httpx reads it, and so does this
  client, which is no CGI program. ALL_PROXY is not read.
* NO_PROXY (`no_proxy` first): the whole value `*` bypasses every host; otherwise comma-separated entries, each a
  domain that matches itself and every name under it (`example.com` and `.example.com` both match
  `example.com` and `api.example.com`, never `notexample.com`), or, for a rail named by an IP address, an
  address or CIDR range. Names are not resolved to match addresses, and no host — loopback included — is
  bypassed unless listed: curl and httpx do the same.
* The proxy's URL: `http://[user:password@]host[:port]` (no scheme means http; no port means 80, as httpx;
  curl would assume 1080). Credentials become `Proxy-Authorization: Basic`, sent to the proxy only. An https://
  or socks proxy is refused at start (ConfigError naming the variable).

Nothing here decides whether a request was sent: a refusal of the CONNECT is `TunnelRefused`, which rails.wire
reports as NotSent, since a CONNECT carries only the rail's host and port.
"""

from __future__ import annotations

import base64
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from ipaddress import ip_address, ip_network
from urllib.parse import unquote, urlsplit

from interlock import clock
from interlock.errors import ConfigError

_MAX_HEAD = 16 * 1024  # a CONNECT answer's head longer than this is not one
_STATUS = re.compile(rb"^HTTP/1\.[01] (\d{3})(?: ([^\r\n]*))?\r\n")


class TunnelRefused(Exception):
    """Raised when a proxy answers CONNECT with anything but a 2xx, or ends the exchange without a whole answer."""


@dataclass(frozen=True, slots=True)
class Proxy:
    """An HTTP forward proxy: where it listens, the Proxy-Authorization value its URL's credentials make, and the
    variable it was read from (messages name that, never the credentials)."""

    host: str
    port: int
    authorization: str | None = field(repr=False)  # the credentials, barely encoded: never in a message or a log
    variable: str

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"proxy {host}:{self.port} ({self.variable})"


def proxy_for(scheme: str, host: str, environ: Mapping[str, str]) -> Proxy | None:
    """The proxy a request to *host* over *scheme* ("http" or "https") goes through, or None (direct)."""
    variable = _first_set(environ, f"{scheme}_proxy", f"{scheme}_proxy".upper())
    if variable is None or not environ[variable].strip():
        return None
    no_proxy = _first_set(environ, "no_proxy", "NO_PROXY")
    if no_proxy is not None and bypassed(host, environ[no_proxy]):
        return None
    return parse_proxy(environ[variable], variable)


def bypassed(host: str, no_proxy: str) -> bool:
    """Whether NO_PROXY's value *no_proxy* sends *host* (a URL's hostname: lower case, IPv6 without brackets)
    direct."""
    if no_proxy == "*":
        return True
    try:
        address = ip_address(host)
    except ValueError:
        address = None
    name = host.lower().removesuffix(".")
    for entry in no_proxy.split(","):
        entry = entry.strip(" \t").lower()
        if not entry:
            continue
        if address is not None:
            try:
                if address in ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue  # a name: it never matches an address
        else:
            domain = entry.removesuffix(".").removeprefix(".")
            if domain and (name == domain or name.endswith("." + domain)):
                return True
    return False


def parse_proxy(value: str, variable: str) -> Proxy:
    """The proxy *value* names; ConfigError naming *variable* (and never echoing the value, which may hold a
    password) when it is not an http proxy's URL."""
    text = value.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{variable} is not a proxy URL ({exc})", variable=variable) from exc
    if parts.scheme.lower() != "http":
        raise ConfigError(f"{variable}: only an http:// proxy is supported, not {parts.scheme}:// (the rail's TLS "
                          "runs inside the proxy's tunnel)", variable=variable)  # fmt: skip
    if not parts.hostname:
        raise ConfigError(f"{variable} names no proxy host", variable=variable)
    authorization = None
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        authorization = "Basic " + base64.b64encode(credentials).decode("ascii")
    return Proxy(parts.hostname, port or 80, authorization, variable)


def connect_request(proxy: Proxy, target: str, user_agent: str) -> bytes:
    """The CONNECT request for *target* ("host:port", an IPv6 host in brackets); the proxy's credentials go in it
    and nowhere else."""
    lines = [f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nUser-Agent: {user_agent}\r\n"]
    if proxy.authorization is not None:
        lines.append(f"Proxy-Authorization: {proxy.authorization}\r\n")
    return "".join(lines).encode("ascii") + b"\r\n"


def open_tunnel(sock: socket.socket, proxy: Proxy, target: str, request: bytes, until: float) -> None:
    """Ask *proxy*, on its connected *sock*, for a tunnel to *target*, writing and reading by *until* (a
    clock.monotonic() instant): TunnelRefused unless it answers 2xx with nothing after its head, TimeoutError or
    another OSError when the socket fails. The rail speaks only after the client's TLS hello, so any byte past
    the head is the proxy's, and out of step."""
    head = bytearray()
    try:
        sock.settimeout(_left(until))
        sock.sendall(request)
        while (end := head.find(b"\r\n\r\n")) < 0:
            if len(head) > _MAX_HEAD:
                raise TunnelRefused(f"{proxy} answered CONNECT {target} with a head longer than {_MAX_HEAD} bytes")
            sock.settimeout(_left(until))
            chunk = sock.recv(_MAX_HEAD)
            if not chunk:
                raise TunnelRefused(f"{proxy} closed the connection before answering CONNECT {target}")
            head += chunk
    except TimeoutError as exc:
        raise TimeoutError(f"no answer to CONNECT {target} in time") from exc
    status = _STATUS.match(head)
    if status is None:
        raise TunnelRefused(f"{proxy} answered CONNECT {target} with no HTTP status line: {bytes(head[:60])!r}")
    code, reason = int(status[1]), (status[2] or b"").decode("latin-1")[:80]
    if not 200 <= code < 300:
        raise TunnelRefused(f"{proxy} refused CONNECT {target}: {code} {reason}".rstrip())
    if end + 4 != len(head):
        raise TunnelRefused(f"{proxy} sent bytes past its {code} answer to CONNECT {target}")


def _first_set(environ: Mapping[str, str], *names: str) -> str | None:
    return next((name for name in names if name in environ), None)


def _left(until: float) -> float:
    left = until - clock.monotonic()
    if left <= 0:
        raise TimeoutError
    return left
