"""Forward proxies and a TLS front for the rail client's proxy tests, all on 127.0.0.1.

* `ProxyPy` — proxy.py (PyPI), a real forward proxy nobody on the team wrote, as a subprocess stopped by pid.
* `TlsFront` — TLS in front of the sandbox (its own certificate for "localhost"), so an https rail answers with
  the sandbox's real semantics; it records the SNI it was asked for and the plaintext requests it relayed.
* `HostileProxy` — a tiny proxy that misbehaves on purpose, where proxy.py cannot: it never answers a CONNECT
  ("silent"), grants one and then forwards nothing ("black_hole"), or relays and drops the connection in the
  middle of the rail's answer ("drop_mid_answer").
"""

from __future__ import annotations

import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from sandbox.testing import wait_for

_CHUNK = 64 * 1024


class ProxyPy:
    """`python -m proxy` on a port it picks itself (written to a file, so no race), one worker, access log on."""

    def __init__(self, directory: Path, *, basic_auth: str | None = None) -> None:
        self._directory = directory
        self._port_file = directory / "proxy.port"
        self.log_path = directory / "proxy.log"
        self._args = ["--basic-auth", basic_auth] if basic_auth else []
        self._proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ProxyPy:
        self._directory.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", "0", "--port-file",
               str(self._port_file), "--num-workers", "1", "--num-acceptors", "1", "--log-level", "INFO",
               "--data-dir", str(self._directory / "data"), *self._args]  # fmt: skip
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          cwd=self._directory)  # no folder of the checkout can shadow its package
        try:
            self.port = wait_for(self._listening, timeout=20)
        except TimeoutError:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)

    def access_log(self) -> str:
        """proxy.py's access lines ("<client> - <METHOD> <target> - ..."), one per request it forwarded."""
        return "\n".join(line for line in self.log_path.read_text().splitlines() if "access_log" in line)

    def _listening(self) -> int:
        assert self._proc is not None and self._proc.poll() is None, self.log_path.read_text()
        text = self._port_file.read_text().strip() if self._port_file.exists() else ""
        if not text:
            return 0
        try:
            socket.create_connection(("127.0.0.1", int(text)), timeout=1).close()
        except OSError:
            return 0
        return int(text)


class _Listener:
    """Accepts on 127.0.0.1 and serves each connection on a daemon thread; close() ends every socket it holds."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.05)
        self.port = int(self._server.getsockname()[1])
        self._stop = threading.Event()
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        with self._lock:
            held, self._held = self._held, []
        for sock in held:
            _close(sock)

    def hold(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            self._held.append(sock)
        return sock

    def serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except (TimeoutError, OSError):
                continue
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._serve_one, args=(self.hold(conn),), daemon=True).start()

    def _serve_one(self, conn: socket.socket) -> None:
        try:
            self.serve(conn)
        except OSError:
            pass  # the other side went away: what several tests make it do
        finally:
            _close(conn)


class TlsFront(_Listener):
    """TLS on the client's side, the sandbox's plain HTTP on the other, bytes relayed both ways."""

    def __init__(self, upstream_port: int, cert: Path, key: Path) -> None:
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._tls.load_cert_chain(cert, key)
        self._tls.sni_callback = self._sni
        self._upstream_port = upstream_port
        self.server_names: list[str | None] = []
        self.handshakes = 0
        self.plaintext = bytearray()  # every byte a client sent through the front, decrypted
        super().__init__()

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}"

    def _sni(self, sock: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> None:
        self.server_names.append(name)

    def serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        tls = self.hold(self._tls.wrap_socket(conn, server_side=True))
        self.handshakes += 1
        upstream = self.hold(socket.create_connection(("127.0.0.1", self._upstream_port), timeout=10))
        _relay(tls, upstream, self.plaintext)


class HostileProxy(_Listener):
    """A forward proxy (CONNECT, or a request in absolute form) that fails in one chosen way. In
    "drop_mid_answer" it relays both ways until the rail's answer starts coming back after *cut_when()* turns
    true, forwards half of that piece and closes both sides."""

    def __init__(self, mode: str, *, cut_when: Callable[[], bool] = lambda: True) -> None:
        assert mode in ("silent", "black_hole", "drop_mid_answer")
        self.mode = mode
        self.cut_when = cut_when
        self.received = bytearray()  # what clients sent it, before any tunnel (the CONNECT or the request)
        self.dropped = threading.Event()
        super().__init__()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def serve(self, conn: socket.socket) -> None:
        if self.mode == "silent":
            self._stop.wait(30)
            return
        conn.settimeout(10)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(_CHUNK)
            if not chunk:
                return
            head += chunk
        self.received += head
        line = head.split(b"\r\n", 1)[0]
        tunnel = re.match(rb"CONNECT (\S+):(\d+) HTTP/1\.1$", line)
        if self.mode == "black_hole":
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            while conn.recv(_CHUNK):
                pass
            return
        if tunnel:
            upstream = self.hold(socket.create_connection((tunnel[1].decode(), int(tunnel[2])), timeout=10))
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            first = head.partition(b"\r\n\r\n")[2]
        else:  # absolute form: the rail gets the request with its target in origin form
            target = re.match(rb"(\S+) http://([^/:]+):(\d+)(/\S*) (HTTP/1\.1)$", line)
            assert target, line
            upstream = self.hold(socket.create_connection((target[2].decode(), int(target[3])), timeout=10))
            first = b"%s %s %s\r\n" % (target[1], target[4], target[5]) + head.split(b"\r\n", 1)[1]
        upstream.sendall(first)
        threading.Thread(target=_relay_one_way, args=(conn, upstream, None), daemon=True).start()
        while chunk := upstream.recv(_CHUNK):
            if self.cut_when():
                conn.sendall(chunk[: max(len(chunk) // 2, 1)])
                self.dropped.set()
                _close(conn)
                _close(upstream)
                return
            conn.sendall(chunk)


def _relay(client: socket.socket, upstream: socket.socket, record: bytearray | None) -> None:
    threading.Thread(target=_relay_one_way, args=(upstream, client, None), daemon=True).start()
    _relay_one_way(client, upstream, record)


def _relay_one_way(source: socket.socket, sink: socket.socket, record: bytearray | None) -> None:
    try:
        while chunk := source.recv(_CHUNK):
            if record is not None:
                record += chunk
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        _close(sink)
        _close(source)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def wait_for_log(proxy: ProxyPy, text: str, timeout: float = 10) -> str:
    """proxy.py writes a connection's access line when the connection ends: poll for it."""
    return str(wait_for(lambda: text in proxy.access_log() and proxy.access_log(), timeout=timeout))
