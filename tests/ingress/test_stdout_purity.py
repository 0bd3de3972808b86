"""On stdio, stdout carries only JSON-RPC (SPEC §10): drive the real process with raw JSON-RPC lines,
including calls that log, fail validation, and wait out the outcome deadline, and parse every line."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

from tests.ingress.helpers import INGRESS_CMD, REPO, wait_until


def test_every_stdout_line_is_json_rpc(env: dict[str, str], tmp_path: Path) -> None:
    env = {**env, "INTERLOCK_OUTCOME_WAIT_MS": "300", "PATH": "/usr/bin:/bin"}
    stderr = (tmp_path / "stderr.log").open("w")
    proc = subprocess.Popen([*INGRESS_CMD, "--stdio"], env=env, cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=stderr, text=True, bufsize=1)  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()

    def send(message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()

    def call(id_: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": name, "arguments": arguments}}

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "purity", "version": "0"}}})  # fmt: skip
        wait_until(lambda: len(lines) >= 1, what="the initialize response")
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        send(call(3, "create_refund", {"payment_id": "pay_1", "amount": 1899.0}))  # refused, logged nothing
        send(call(4, "create_refund", {"payment_id": "pay_1", "amount": 1899}))  # enqueued (logged), IN_PROGRESS
        send(call(5, "no_such_tool", {}))
        send(call(6, "fetch_payment", {"payment_id": "pay_1"}))  # no rail configured: an error result
        wait_until(lambda: {m.get("id") for m in map(json.loads, list(lines))} >= {1, 2, 3, 4, 5, 6},
                   what="responses to every request")  # fmt: skip
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=15)
        reader.join(timeout=5)
        stderr.close()

    assert lines, "no stdout at all"
    for line in lines:
        message = json.loads(line)  # every line is JSON ...
        assert message["jsonrpc"] == "2.0"  # ... and JSON-RPC 2.0
        assert "result" in message or "error" in message or "method" in message
    by_id = {m["id"]: m for m in map(json.loads, lines) if "id" in m}
    assert by_id[3]["result"]["isError"] is True
    assert by_id[4]["result"]["structuredContent"]["state"] == "IN_PROGRESS"
    assert by_id[5]["result"]["isError"] is True
    # The logs went to stderr.
    assert "enqueued" in (tmp_path / "stderr.log").read_text()
