"""Every HTTP listener holds against half-sent requests (interlock.http_serve, ADR 0017): the webhook receiver — the
one listener Razorpay must reach from the internet — and the console, as the ingress does (tests/ingress/
test_http_limits.py). Real processes under `ulimit -n 400` with 12 connections at most: 450 connections that never
finish their request would take every descriptor of an unguarded listener and hold it for ever (../shared/repro/
sec_webhook_receiver_slowloris.py). No timing assertions: who was answered, and what was closed."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from interlock.ports import free_port
from ledger.db import open_ledger
from tests.mandates import write_mandate
from tests.procs import INTERLOCK, Proc, closed_by_server, wait_until
from tests.webhooks.test_receiver import NEW, event, headers
from webhooks.receiver import PATH

LIMITS = {"INTERLOCK_HTTP_MAX_CONNECTIONS": "12", "INTERLOCK_HTTP_HEADER_TIMEOUT_MS": "1500",
          "INTERLOCK_HTTP_BODY_TIMEOUT_MS": "1500"}  # fmt: skip
CONSOLE_TOKEN = "console-token-0123456789abcdef"


def _listener(name: str, tmp_path: Path) -> tuple[Proc, str, str, Callable[[str], httpx.Response]]:
    """(the process, its name in logs, the path floods aim at, a real client's request and its answer)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    if name == "webhooks":
        env = {"INTERLOCK_WEBHOOK_SECRETS": NEW, "INTERLOCK_WEBHOOK_INBOX": str(tmp_path / "inbox.sqlite3")}

        def delivery(event_id: str) -> httpx.Response:
            body = event()
            return httpx.post(url + PATH, content=body, headers=headers(body, event_id=event_id), timeout=30)

        real, path, said = delivery, PATH, "webhook receiver"
    else:
        mandate = tmp_path / "mandate.yaml"
        write_mandate(mandate, {})
        open_ledger(tmp_path / "ledger.sqlite3").close()  # the rail worker's: the console keeps its sessions there
        env = {"INTERLOCK_CONSOLE_TOKEN": CONSOLE_TOKEN, "INTERLOCK_MANDATE": str(mandate),
               "INTERLOCK_LEDGER": str(tmp_path / "ledger.sqlite3")}  # fmt: skip

        def login(_: str) -> httpx.Response:
            return httpx.post(url + "/login", data={"token": CONSOLE_TOKEN}, timeout=30)

        real, path, said = login, "/login", "console"
    proc = Proc(["prlimit", "--nofile=400:400", "--", *INTERLOCK, name, "--port", str(port)], {**env, **LIMITS},
                tmp_path / f"{name}.log")  # fmt: skip

    def listening() -> bool:
        assert proc.alive(), proc.output()
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    wait_until(listening, timeout=60, what=f"{name} on port {port}")
    return proc, said, path, real


@pytest.mark.parametrize("name", ["webhooks", "console"])
def test_half_sent_requests_cannot_hold_a_listener_and_are_closed(name: str, tmp_path: Path) -> None:
    proc, said, path, real = _listener(name, tmp_path)
    try:
        port = int(proc.args[proc.args.index("--port") + 1])
        attackers = []
        for n in range(450):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
            # half a head, or a whole head whose body never finishes arriving
            sock.sendall(head if n % 2 else head + b"Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{")
            attackers.append(sock)
        # While the 12 slots are held the listener answers 503 (too_many_connections); the real request is answered
        # once the half-sent requests' deadlines close them, however busy the machine is.
        deadline = time.monotonic() + 60
        answer = None
        while time.monotonic() < deadline:
            try:
                answer = real("evt_during_the_flood")
            except httpx.HTTPError:
                answer = None  # a connection closed at the cap: tried again, as Razorpay retries
            if answer is not None and answer.status_code != 503:
                break
            time.sleep(0.2)
        assert answer is not None and answer.status_code in (200, 303), (answer, proc.output())
        if name == "webhooks":
            assert answer.json()["status"] == "accepted"
        assert all(closed_by_server(sock) for sock in attackers)
        for sock in attackers:
            sock.close()
        assert f"closed by the {said}'s limits" in proc.output()
    finally:
        proc.stop()
