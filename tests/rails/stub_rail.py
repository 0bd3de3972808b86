"""A real HTTP/1.1 server on 127.0.0.1 that misbehaves on purpose, for the deadline and send-window tests.

Modes: "trickle_head" (the response, status line included, one byte per `pace_s`), "trickle_body" (the
head at once, then the body one byte per `pace_s`), "silent" (reads the request, never answers) and
"answer" (a 200 with `body`). Every connection's received bytes are recorded.
"""

from __future__ import annotations

import socket
import socketserver
import threading
from types import TracebackType

_READ_POLL_S = 0.05


class StubRail:
    def __init__(self, mode: str, *, pace_s: float = 0.2, body: bytes = b'{"ok": true}') -> None:
        self.mode = mode
        self.pace_s = pace_s
        self.body = body
        self.received: list[bytes] = []
        self.connections = 0
        self._stop = threading.Event()
        self._closed = threading.Semaphore(0)
        self._lock = threading.Lock()
        stub = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                stub._serve(self.request)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="stub-rail", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> StubRail:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    def wait_closed(self, connections: int = 1, timeout: float = 10) -> None:
        """Wait until that many connections have been closed by the client (or ended by the stub)."""
        for _ in range(connections):
            assert self._closed.acquire(timeout=timeout), "the client did not close its connection"

    def bytes_received(self) -> bytes:
        with self._lock:
            return b"".join(self.received)

    # -- one connection --------------------------------------------------------------------------

    def _serve(self, sock: socket.socket) -> None:
        with self._lock:
            self.connections += 1
            self.received.append(b"")
            index = len(self.received) - 1
        sock.settimeout(_READ_POLL_S)
        try:
            if self._read_request(sock, index):
                self._respond(sock)
            self._drain_until_closed(sock, index)
        except OSError:
            pass  # the client went away: that is what the tests make it do
        finally:
            self._closed.release()

    def _read_request(self, sock: socket.socket, index: int) -> bool:
        data = b""
        while not self._stop.is_set():
            chunk = self._recv(sock)
            if chunk is None:
                continue
            if not chunk:
                return False
            data += chunk
            with self._lock:
                self.received[index] = data
            head, sep, rest = data.partition(b"\r\n\r\n")
            if sep and len(rest) >= _content_length(head):
                return True
        return False

    def _respond(self, sock: socket.socket) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(self.body)
        if self.mode == "answer":
            sock.sendall(head + self.body)
        elif self.mode in ("trickle_head", "trickle_body"):
            slow = head + self.body if self.mode == "trickle_head" else self.body
            if self.mode == "trickle_body":
                sock.sendall(head)
            for byte in slow:
                if self._stop.wait(self.pace_s):
                    return
                sock.sendall(bytes([byte]))

    def _drain_until_closed(self, sock: socket.socket, index: int) -> None:
        while not self._stop.is_set():
            chunk = self._recv(sock)
            if chunk == b"":
                return
            if chunk:
                with self._lock:
                    self.received[index] += chunk

    @staticmethod
    def _recv(sock: socket.socket) -> bytes | None:
        try:
            return sock.recv(65536)
        except TimeoutError:
            return None


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0
