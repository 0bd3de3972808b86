"""The wire side of `interlock fuzz`: a stdio ingress fed raw lines, an HTTP session that posts raw bodies,
raw HTTP requests over a socket, and what each answer amounts to (chaos.fuzz judges it)."""

from __future__ import annotations

import json
import queue
import re
import select
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from chaos.fuzz_inputs import FuzzInput
from chaos.trial import TOKEN
from deploy.stack import INTERLOCK

PROTOCOL = "2025-06-18"
ANSWER_TIMEOUT_S = 20.0

@dataclass
class Answer:
    """What came back for one input, reduced to what the verdict needs."""

    outcome: str  # tool_error | rpc_error | http_4xx | none | success | http_5xx | internal_error | dropped
    code: str = ""  # the error code / HTTP status




# -- answers ------------------------------------------------------------------------------------------


def classify_message(msg: Any) -> Answer:
    """A JSON-RPC message the ingress sent back for an input."""
    if not isinstance(msg, dict):
        return Answer("success", "non-object")
    if isinstance(msg.get("error"), dict):
        return Answer("rpc_error", str(msg["error"].get("code")))
    result = msg.get("result")
    if isinstance(result, dict) and result.get("isError") is True:
        code = _tool_error_code(result)
        if code is None:
            return Answer("success", "isError without an error body")
        return Answer("internal_error" if code == "INTERNAL_ERROR" else "tool_error", code)
    return Answer("success", json.dumps(result)[:120])


def _tool_error_code(result: dict[str, Any]) -> str | None:
    for block in result.get("content") or []:
        text = block.get("text", "") if isinstance(block, dict) else ""
        if text.startswith("{"):
            try:
                body = json.loads(text)
            except ValueError:
                continue
            if isinstance(body, dict) and isinstance(body.get("error"), dict) and "caller_action" in body:
                return str(body["error"].get("code"))
    return None


def initialize(ident: int | str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": "initialize",
            "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}}


TOOLS_LIST = b'{"jsonrpc":"2.0","id":"probe","method":"tools/list"}'


# -- the stdio ingress ---------------------------------------------------------------------------------


class StdioIngress:
    """`interlock ingress --stdio` with pipes, fed raw lines; a ping after each input marks its end."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.seq = 0
        self._exchanging = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self._err: IO[bytes] | None = None

    def start(self) -> None:
        self._err = self.log.open("ab")
        self.proc = subprocess.Popen([*INTERLOCK, "ingress", "--stdio"], env=self.env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._err)  # fmt: skip
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        msgs = self.exchange(json.dumps(initialize("init")).encode(), answer_id="init", timeout=60)
        if not any(m.get("id") == "init" and "result" in m for m in msgs):
            raise RuntimeError(f"stdio ingress did not initialize: {msgs}")
        self._write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.put(line)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _write(self, data: bytes) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def exchange(self, frame: bytes, *, answer_id: Any = None,
                 timeout: float = ANSWER_TIMEOUT_S) -> list[dict[str, Any]]:  # fmt: skip
        """Send *frame* then a ping; return what came back before the ping's answer (and *answer_id*'s)."""
        with self._exchanging:  # the probes share the pipe with the fuzz loop: one exchange at a time
            return self._exchange(frame, answer_id, timeout)

    def _exchange(self, frame: bytes, answer_id: Any, timeout: float) -> list[dict[str, Any]]:
        self.seq += 1
        sentinel = f"sentinel-{self.seq}"
        try:
            self._write(frame)
            self._write(json.dumps({"jsonrpc": "2.0", "id": sentinel, "method": "ping"}).encode())
        except (BrokenPipeError, OSError):
            return []
        got: list[dict[str, Any]] = []
        seen_sentinel = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if seen_sentinel and (answer_id is None or any(m.get("id") in (answer_id, None) for m in got)):
                break
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if not self.alive():
                    break
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                got.append({"unparseable": line[:200].decode("utf-8", "replace")})
                continue
            if isinstance(msg, dict) and msg.get("id") == sentinel:
                seen_sentinel = True
            else:
                got.append(msg if isinstance(msg, dict) else {"non_object": msg})
        return got

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._err is not None:
            self._err.close()


def send_stdio(ingress: StdioIngress, item: FuzzInput, rid: int) -> Answer:
    frame = item.body.replace(b'"id":ID', b'"id":%d' % rid)
    msgs = ingress.exchange(frame, answer_id=rid if item.expects_answer else None)
    mine = [m for m in msgs if m.get("id") in (rid, None)] or msgs
    if not mine:
        return Answer("none")
    worst = [classify_message(m) for m in mine]
    return next((a for a in worst if a.outcome not in ("tool_error", "rpc_error")), worst[0])


# -- the HTTP ingress ----------------------------------------------------------------------------------


class HttpSession:
    def __init__(self, url: str) -> None:
        self.url = url
        self.client = httpx.Client(timeout=ANSWER_TIMEOUT_S)
        response = self.client.post(url, content=json.dumps(initialize(0)), headers=self.headers(session=False))
        response.raise_for_status()
        self.session = response.headers.get("mcp-session-id", "")
        self.client.post(url, content=b'{"jsonrpc":"2.0","method":"notifications/initialized"}', headers=self.headers())

    def headers(self, *, session: bool = True) -> dict[str, str]:
        out = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream", "mcp-protocol-version": PROTOCOL}  # fmt: skip
        if session and self.session:
            out["mcp-session-id"] = self.session
        return out

    def post(self, body: bytes) -> Answer:
        try:
            response = self.client.post(self.url, content=body, headers=self.headers())
        except httpx.HTTPError as exc:
            return Answer("dropped", type(exc).__name__)
        if response.status_code >= 500:
            return Answer("http_5xx", str(response.status_code))
        if response.status_code == 202:
            return Answer("none", "202")
        got = messages(response)
        if response.status_code >= 400:
            return Answer("http_4xx", str(response.status_code))
        if not got:
            return Answer("none", str(response.status_code))
        return classify_message(got[-1])

    def close(self) -> None:
        self.client.close()


def messages(response: httpx.Response) -> list[Any]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        out = []
        # Only CR / LF end an SSE line: str.splitlines() would also split on U+2028 inside the JSON.
        for line in re.split(r"\r\n|\r|\n", response.text):
            if line.startswith("data:") and line[5:].strip():
                try:
                    out.append(json.loads(line[5:]))
                except ValueError:
                    continue
        return out
    try:
        return [response.json()]
    except ValueError:
        return []


def send_raw_http(port: int, session: str, item: FuzzInput) -> Answer:
    raw = item.raw
    if raw.get("garbage"):
        request = raw["garbage"]
    else:
        head = [f"{raw['method']} {raw['path']} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close",
                f"mcp-protocol-version: {PROTOCOL}"]  # fmt: skip
        if raw["token"] is True:
            head.append(f"Authorization: Bearer {TOKEN}")
        elif raw["token"]:
            head.append(f"Authorization: Bearer {raw['token']}")
        if raw["session"] is True:
            head.append(f"mcp-session-id: {session}")
        elif raw["session"]:
            head.append(f"mcp-session-id: {raw['session']}")
        if raw.get("content_type"):
            head.append(f"Content-Type: {raw['content_type']}")
        if raw.get("accept"):
            head.append(f"Accept: {raw['accept']}")
        if raw.get("chunked"):
            head.append("Transfer-Encoding: chunked")
            body = raw["chunked"]
        else:
            head.append(f"Content-Length: {raw.get('content_length', len(item.body))}")
            body = item.body
        request = ("\r\n".join(head) + "\r\n\r\n").encode("utf-8") + body
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT_S) as sock:
        try:
            if raw.get("abandon"):
                sock.sendall(request if raw.get("chunked") else request[: len(request) - len(item.body) // 2])
                time.sleep(0.5)
                return Answer("none", "abandoned")
            step = max(1, len(request) // 4) if raw.get("slow") else 1 << 16
            for start in range(0, len(request), step):
                if select.select([sock], [], [], 0)[0]:
                    break  # answered before the body was all sent (413): read it
                sock.sendall(request[start: start + step])
                if raw.get("slow"):
                    time.sleep(0.15)
        except (ConnectionResetError, BrokenPipeError):
            pass  # the server may have answered and closed mid-body: read what it said
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
                if len(data) > 1 << 20:
                    break
        except ConnectionResetError:
            pass
        except TimeoutError:
            return Answer("none", "timeout")
    if not data:
        return Answer("dropped", "closed")
    status_line = data.split(b"\r\n", 1)[0].split()
    status = int(status_line[1]) if len(status_line) > 1 and status_line[1].isdigit() else 0
    if 400 <= status < 500:
        return Answer("http_4xx", str(status))
    if 300 <= status < 400:
        return Answer("http_3xx", str(status))  # e.g. /mcp/ redirected to /mcp: nothing was called
    if status >= 500:
        return Answer("http_5xx", str(status))
    return Answer("success", f"HTTP {status}")
