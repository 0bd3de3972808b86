"""The rail client's wire (rails.wire) against real local HTTP/1.1 servers: kept-alive connections, answers
framed every way a server may frame them, and what is known about a request when something fails."""

from __future__ import annotations

import gzip
import http.server
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import rails.wire
from rails.wire import Lost, NotSent, Wire, encode_json
from sandbox.testing import free_port, wait_for
from tests.rails.certs import self_signed


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.opened += 1

    def finish(self) -> None:
        super().finish()
        with self.server.lock:
            self.server.closed += 1

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._answer(b"")

    def do_POST(self) -> None:  # noqa: N802
        self._answer(self.rfile.read(int(self.headers["Content-Length"])))

    def _answer(self, body: bytes) -> None:
        self.server.requests.append((self.command, self.path, dict(self.headers), body))
        payload = encode_json({"path": self.path, "echo": body.decode()})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.path.startswith("/chunked"):
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(payload), 7):
                piece = payload[start : start + 7]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path.startswith("/gzip"):
            payload = gzip.compress(payload)
            self.send_header("Content-Encoding", "gzip")
        if self.path.startswith("/close"):
            self.send_header("Connection", "close")
            self.close_connection = True
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, idle_s: float | None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        _Handler.timeout = idle_s  # a kept connection idle this long is closed by the server
        self.lock = threading.Lock()
        self.opened = 0
        self.closed = 0
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def server() -> Iterator[_Server]:
    with _serve(None) as srv:
        yield srv


@contextmanager
def _serve(idle_s: float | None, tls: ssl.SSLContext | None = None) -> Iterator[_Server]:
    srv = _Server(idle_s)
    if tls is not None:
        srv.socket = tls.wrap_socket(srv.socket, server_side=True)
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def wire_to(url: str, **extra: object) -> Wire:
    return Wire(url, "rzp_key", "secret", connect_timeout_s=2, user_agent="wire-test", **extra)  # type: ignore[arg-type]


def soon() -> float:
    return time.monotonic() + 5


def test_requests_in_one_thread_share_one_kept_alive_connection(server: _Server) -> None:
    wire = wire_to(server.url)
    first = wire.exchange("POST", "/v1/refund", body=encode_json({"amount": 500, "notes": {"k": "é"}}), deadline=soon())
    second = wire.exchange("GET", "/v1/payments/pay_1", params={"count": 10, "skip": 0}, deadline=soon())
    wire.close()
    assert first.status == 200 and first.json()["echo"] == '{"amount":500,"notes":{"k":"é"}}'
    assert second.json()["path"] == "/v1/payments/pay_1?count=10&skip=0"
    assert server.opened == 1
    method, _, headers, _ = server.requests[0]
    assert method == "POST" and headers["Authorization"] == "Basic cnpwX2tleTpzZWNyZXQ="
    assert headers["Content-Type"] == "application/json" and headers["Host"] == server.url.removeprefix("http://")


def test_each_thread_keeps_its_own_connection_and_close_ends_them_all(server: _Server) -> None:
    wire = wire_to(server.url)
    done = threading.Event()

    def call_and_stay() -> None:  # the thread (and its connection) outlives the call, as a call slot does
        wire.exchange("GET", "/v1/balance", deadline=soon())
        done.wait(60)

    threads = [threading.Thread(target=call_and_stay) for _ in range(3)]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(server.requests) == 3, timeout=60)
    assert server.opened == 3 and server.closed == 0
    wire.close()
    wait_for(lambda: server.closed == 3, timeout=60)
    done.set()
    for thread in threads:
        thread.join()


def test_a_path_on_the_origin_goes_before_every_request(server: _Server) -> None:
    wire = wire_to(server.url + "/gateway/")
    assert wire.exchange("GET", "/v1/balance", deadline=soon()).json()["path"] == "/gateway/v1/balance"
    wire.close()
    with pytest.raises(ValueError):
        wire_to(server.url + "/?key=1")


def test_chunked_and_gzip_answers_are_read_whole(server: _Server) -> None:
    wire = wire_to(server.url)
    assert wire.exchange("GET", "/chunked/x", deadline=soon()).json() == {"path": "/chunked/x", "echo": ""}
    assert wire.exchange("GET", "/gzip/y", deadline=soon()).json() == {"path": "/gzip/y", "echo": ""}
    wire.close()
    assert server.opened == 1  # both framings leave the connection reusable


def test_a_connection_the_server_closes_is_not_reused(server: _Server) -> None:
    wire = wire_to(server.url)
    assert wire.exchange("GET", "/close", deadline=soon()).status == 200
    assert wire.exchange("GET", "/v1/balance", deadline=soon()).status == 200
    wire.close()
    assert server.opened == 2


def test_an_idle_connection_the_server_dropped_is_replaced_before_writing() -> None:
    with _serve(idle_s=0.2) as srv:
        wire = wire_to(srv.url)
        wire.exchange("GET", "/v1/balance", deadline=soon())
        wait_for(lambda: srv.closed == 1, timeout=60)
        # Written on the dead socket, this request would have been Lost (ambiguous); it goes on a new one.
        assert wire.exchange("POST", "/v1/refund", body=b"{}", deadline=soon()).status == 200
        wire.close()
        assert srv.opened == 2 and len(srv.requests) == 2


def test_a_connection_idle_past_the_keepalive_is_replaced(server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rails.wire, "KEEPALIVE_S", 0.0)
    wire = wire_to(server.url)
    wire.exchange("GET", "/v1/balance", deadline=soon())
    wire.exchange("GET", "/v1/balance", deadline=soon())
    wire.close()
    assert server.opened == 2


def test_a_header_with_a_line_break_is_not_sent(server: _Server) -> None:
    wire = wire_to(server.url)
    with pytest.raises(NotSent):
        wire.exchange("POST", "/v1/refund", body=b"{}", headers={"X-Refund-Idempotency": "a\r\nX-Evil: 1"},
                      deadline=soon())  # fmt: skip
    wire.close()
    assert server.opened == 0 and server.requests == []


def test_nothing_listening_is_not_sent_and_a_passed_deadline_sends_nothing(server: _Server) -> None:
    with pytest.raises(NotSent):
        wire_to(f"http://127.0.0.1:{free_port()}").exchange("GET", "/v1/balance", deadline=soon())
    wire = wire_to(server.url)
    with pytest.raises(NotSent):
        wire.exchange("POST", "/v1/refund", body=b"{}", deadline=time.monotonic() - 0.001)
    wire.close()
    assert server.requests == []


class _Scripted:
    """A raw HTTP/1.1 server: each request it reads (head and Content-Length body) gets the next scripted bytes,
    on whichever connection it came; a None closes that connection instead."""

    def __init__(self, answers: list[bytes | None]) -> None:
        self.answers = list(answers)
        self.connections = 0
        self.requests: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def close(self) -> None:
        self._stop.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        data = b""
        with conn:
            while self.answers:
                head, sep, rest = data.partition(b"\r\n\r\n")
                declared = re.search(rb"(?i)content-length: *(\d+)", head)
                length = int(declared.group(1)) if declared else 0
                if not sep or len(rest) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                    continue
                self.requests.append(head + sep + rest[:length])
                data = rest[length:]
                answer = self.answers.pop(0)
                if answer is None:
                    return
                conn.sendall(answer)


def _ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        len(body), extra, body)


@contextmanager
def scripted(*answers: bytes | None) -> Iterator[_Scripted]:
    srv = _Scripted(list(answers))
    try:
        yield srv
    finally:
        srv.close()


def test_an_informational_answer_is_skipped_and_the_final_one_belongs_to_its_request() -> None:
    early = b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n"
    with scripted(early + _ok(b'{"for": 1}'), _ok(b'{"for": 2}')) as srv:
        wire = wire_to(srv.url)
        assert wire.exchange("POST", "/v1/refund", body=b"{}", deadline=soon()).json() == {"for": 1}
        assert wire.exchange("GET", "/v1/payments/pay_2", deadline=soon()).json() == {"for": 2}
        wire.close()
        assert srv.connections == 1


def test_bytes_past_the_answer_put_the_connection_out_of_step_so_it_is_not_reused() -> None:
    # The stray bytes would be taken as the next request's answer on a reused connection.
    with scripted(_ok(b'{"for": 1}') + _ok(b'{"stray": true}'), _ok(b'{"for": 2}')) as srv:
        wire = wire_to(srv.url)
        assert wire.exchange("GET", "/v1/payments/pay_1", deadline=soon()).json() == {"for": 1}
        assert wire.exchange("GET", "/v1/payments/pay_2", deadline=soon()).json() == {"for": 2}
        wire.close()
        assert srv.connections == 2


@pytest.mark.parametrize("answer", [
    b"NOT HTTP AT ALL\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n" + b'{"id": "rfnd_1"}',  # then the server hangs up
    _ok(b'{"id": "rfnd_1"}', b"Content-Length: 3\r\n"),  # two lengths: where the answer ends is unknown
    b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (
        len(bomb := gzip.compress(b" " * (rails.wire._MAX_BODY + 1))), bomb),
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
], ids=["garbage", "truncated", "two-lengths", "gzip-bomb", "switching"])  # fmt: skip
def test_an_answer_that_is_not_one_whole_response_loses_the_request(answer: bytes) -> None:
    with scripted(answer, None) as srv:
        with pytest.raises(Lost):
            wire_to(srv.url).exchange("POST", "/v1/refund", body=b"{}", deadline=soon())
        assert len(srv.requests) == 1


def test_a_name_lookup_that_hangs_ends_at_the_deadline_unsent(monkeypatch: pytest.MonkeyPatch) -> None:
    real, release = socket.getaddrinfo, threading.Event()

    def hanging(*args: object, **kwargs: object) -> object:
        release.wait(30)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    try:
        with pytest.raises(NotSent, match="resolving"):
            wire_to("http://rail.example:8080").exchange("GET", "/v1/balance", deadline=time.monotonic() + 0.3)
    finally:
        release.set()


def test_https_verifies_the_server_and_keeps_the_connection(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    trusting = ssl.create_default_context(cafile=str(cert))
    with _serve(None, tls=server_tls) as srv:
        url = srv.url.replace("http://", "https://").replace("127.0.0.1", "localhost")
        wire = wire_to(url, tls=trusting)
        assert wire.exchange("GET", "/v1/balance", deadline=soon()).json()["path"] == "/v1/balance"
        assert wire.exchange("GET", "/v1/balance", deadline=soon()).status == 200
        wire.close()
        assert srv.opened == 1
        # A client that does not trust the certificate refuses during the handshake: nothing was sent.
        with pytest.raises(NotSent):
            wire_to(url, tls=ssl.create_default_context()).exchange("GET", "/v1/balance", deadline=soon())
        assert len(srv.requests) == 2
