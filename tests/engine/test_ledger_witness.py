"""The witness itself: a money request whose caller died before its body was sent never reaches the rail, and
is judged for I2 by the headers that did arrive."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from interlock.sik import idempotency_key_for
from ledger.db import open_ledger
from tests.engine.ledger_witness import LedgerWitness


class _Upstream(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        self.seen = 0
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                upstream.seen += 1
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def upstream() -> Iterator[_Upstream]:
    server = _Upstream()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _cut_off_post(url: str, headers: dict[str, str]) -> None:
    """Send a POST's headers promising a body, then close the socket before sending any of it."""
    host, port = url.removeprefix("http://").split(":")
    lines = ["POST /v1/payments/pay_X/refund HTTP/1.1", f"Host: {host}", "Content-Length: 64"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())


def _wait_for(predicate: Any) -> None:
    deadline = time.monotonic() + 60  # detects a witness that never judges; not a measure of how fast it does
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("the witness never judged the cut-off request")
        time.sleep(0.01)


def test_a_request_cut_off_before_its_body_is_not_forwarded_nor_called_unstamped(
    upstream: _Upstream, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    open_ledger(ledger).close()
    with LedgerWitness(f"http://127.0.0.1:{upstream.server_address[1]}", ledger, money_delay_ms=0) as witness:
        _cut_off_post(witness.url, {})
        _wait_for(lambda: witness.truncated == 1)
    assert witness.violations == []
    assert witness.money_calls == 0
    assert upstream.seen == 0


def test_a_cut_off_request_whose_key_names_no_committed_attempt_is_a_violation(
    upstream: _Upstream, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    open_ledger(ledger).close()
    with LedgerWitness(f"http://127.0.0.1:{upstream.server_address[1]}", ledger, money_delay_ms=0) as witness:
        _cut_off_post(witness.url, {"X-Refund-Idempotency": idempotency_key_for("sik_never_written")})
        _wait_for(lambda: witness.truncated == 1)
    assert len(witness.violations) == 1
    assert "sik_never_written" in witness.violations[0]
    assert upstream.seen == 0
