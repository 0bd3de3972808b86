"""A witness in front of the sandbox rail: real HTTP, forwarding every request, that holds money calls for a
set latency and checks, at the moment each one arrives, that its IN_FLIGHT row is already committed in the
ledger (I2). It reads the ledger file read-only: in WAL mode a reader sees only committed transactions."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from interlock.sik import RECEIPT_PREFIX


class _Server(ThreadingHTTPServer):
    # Many gate reads and money calls open connections at once: the default backlog of 5 drops SYNs.
    request_queue_size = 1024


class LedgerWitness:
    def __init__(self, upstream: str, ledger: Path, *, money_delay_ms: int = 200, split: bool = False) -> None:
        self.upstream = upstream.rstrip("/")
        self.ledger = ledger
        self.money_delay_ms = money_delay_ms
        # split: every other money call is held *after* the rail applied it (its answer is late), the rest
        # before (the rail has not seen it yet): a crash then leaves both kinds in flight.
        self.split = split
        self.violations: list[str] = []
        self.money_calls = 0
        # Requests whose caller died between sending the headers and the whole body (a SIGKILL, or a thread
        # descheduled between the two writes): the rail never receives them, so they are not forwarded.
        self.truncated = 0
        self.max_concurrent = 0
        self._out = 0
        self._lock = threading.Lock()
        self._client = httpx.Client(timeout=30, limits=httpx.Limits(max_connections=512))
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> LedgerWitness:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._client.close()

    def _committed_in_flight(self, sik: str) -> str | None:
        conn = sqlite3.connect(f"file:{self.ledger}?mode=ro", uri=True)
        try:
            row = conn.execute(
                """SELECT i.state, a.attempt_seq FROM intents i JOIN intent_attempts a
                     ON a.merchant_id = i.merchant_id AND a.sik = i.sik AND a.attempt_seq = i.attempt_seq
                   WHERE i.sik = ? AND a.finished_at IS NULL""", (sik,)).fetchone()  # fmt: skip
        finally:
            conn.close()
        if row is None or row[0] != "IN_FLIGHT":
            return f"{sik}: request arrived with no committed IN_FLIGHT attempt (ledger has {row})"
        return None

    def _sik_of_key(self, idempotency_key: str | None) -> str | None:
        if idempotency_key and idempotency_key.startswith(RECEIPT_PREFIX):
            return idempotency_key.removeprefix(RECEIPT_PREFIX)
        return None

    def _cut_off(self, problem: str | None) -> None:
        """A money request cut off before its body arrived: not forwarded (the rail would never have read it),
        but its headers left the caller, so I2 must have held when they arrived (*problem* was judged then)."""
        with self._lock:
            self.truncated += 1
            if problem:
                self.violations.append(problem)

    @property
    def out(self) -> int:
        with self._lock:
            return self._out

    def _money(self, body: bytes) -> bool:
        """Check and count one money call; True when it is to be held after forwarding instead of before."""
        payload: dict[str, Any] = json.loads(body or b"{}")
        sik = (payload.get("notes") or {}).get("interlock_sik")
        with self._lock:
            self.money_calls += 1
            self._out += 1
            self.max_concurrent = max(self.max_concurrent, self._out)
            after = self.split and self.money_calls % 2 == 0
        problem = self._committed_in_flight(sik) if sik else f"money call without a stamp: {payload}"
        if problem:
            with self._lock:
                self.violations.append(problem)
        if not after:
            time.sleep(self.money_delay_ms / 1000)
        return after

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        witness = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                money = self.command == "POST"
                # Judged when the headers arrive, for the case that the body never does.
                keyed = witness._sik_of_key(self.headers.get("X-Refund-Idempotency")) if money else None
                at_headers = witness._committed_in_flight(keyed) if keyed else None
                body = self.rfile.read(length) if length else b""
                if len(body) < length:
                    if money:
                        witness._cut_off(at_headers)
                    self.close_connection = True
                    return
                hold_after = witness._money(body) if money else False
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                    answer = witness._client.request(self.command, witness.upstream + self.path, content=body,
                                                     headers=headers)  # fmt: skip
                    if hold_after:
                        time.sleep(witness.money_delay_ms / 1000)
                finally:
                    if money:
                        with witness._lock:
                            witness._out -= 1
                try:
                    self._answer(answer)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the caller is gone (killed, or gave up at its deadline): the rail applied regardless

            def _answer(self, answer: httpx.Response) -> None:
                self.send_response(answer.status_code)
                for name, value in answer.headers.items():
                    if name.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            do_GET = do_POST = do_PATCH = _forward

        return Handler
