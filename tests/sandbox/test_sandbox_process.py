"""The sandbox as a process: CLI flags, port errors, seed files, and a restart that keeps everything."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

from rails.wire import KEEPALIVE_S
from sandbox.server import bind
from sandbox.testing import journal_count_for_stamp, start_sandbox, wait_for


def test_port_in_use_is_a_clear_error_naming_the_port(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "sandbox", "--port", str(port), "--data", str(tmp_path)],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    assert result.returncode != 0
    assert f"port {port}" in result.stderr and "already in use" in result.stderr


def test_seed_file_and_start_flags(tmp_path: Path):
    seed = tmp_path / "payments.yaml"
    seed.write_text(
        yaml.safe_dump(
            {
                "payments": [{"id": "pay_SEEDED01", "amount": 5000, "currency": "INR", "amount_refunded": 1000}],
                "balance": {"amount": 777, "currency": "INR"},
            }
        )
    )
    with start_sandbox(tmp_path / "rail", seed_file=seed, key_id="rzp_test_other", key_secret="s3cret") as rail:
        auth = ("rzp_test_other", "s3cret")
        payment = httpx.get(rail.url + "/v1/payments/pay_SEEDED01", auth=auth).json()
        assert (payment["amount"], payment["amount_refunded"], payment["refund_status"]) == (5000, 1000, "partial")
        assert httpx.get(rail.url + "/v1/payments/pay_DEMO0001", auth=auth).status_code == 400  # no demo data
        assert httpx.get(rail.url + "/v1/balance", auth=auth).json()["balance"] == 777
        assert (
            httpx.get(rail.url + "/v1/balance", auth=("rzp_test_interlock", "interlock_sandbox_secret")).status_code
            == 401
        )


def test_fault_flags_apply_from_start(tmp_path: Path):
    proc_args = ["--fault", "fail_504=1,scope=reads", "--fault", "slow=0.5,delay_ms=20", "--seed", "3"]
    rail = _start_with_args(tmp_path, proc_args)
    try:
        described = httpx.get(rail["url"] + "/__sandbox/faults", auth=rail["auth"]).json()
        assert described["seed"] == 3
        assert [(f["name"], f["rate"], f["scope"]) for f in described["faults"]] == [
            ("fail_504", 1.0, "reads"),
            ("slow", 0.5, "money"),
        ]
        assert httpx.get(rail["url"] + "/v1/balance", auth=rail["auth"]).status_code == 504
    finally:
        rail["proc"].terminate()
        rail["proc"].wait(10)


def _start_with_args(tmp_path: Path, extra: list[str]) -> dict[str, object]:
    ready = tmp_path / "ready.json"
    cmd = [sys.executable, "-m", "sandbox", "--port", "0", "--data", str(tmp_path), "--ready-file", str(ready), *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(ready.exists, timeout=20)
    except TimeoutError:
        proc.kill()
        raise
    port = json.loads(ready.read_text())["port"]
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _up(url), timeout=20)
    return {"proc": proc, "url": url, "auth": ("rzp_test_interlock", "interlock_sandbox_secret")}


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/__sandbox/health").status_code == 200
    except httpx.TransportError:
        return False


def test_bad_fault_flag_is_a_usage_error(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "sandbox", "--port", "0", "--data", str(tmp_path), "--fault", "meteor=1"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2 and "unknown fault 'meteor'" in result.stderr


def test_restart_keeps_journal_payments_and_idempotency_keys(tmp_path: Path):
    data = tmp_path / "rail"
    sik = "RESTARTSIK0000000000000000000001"
    body = {"amount": 1500, "notes": {"interlock_sik": sik}, "receipt": "ilk_" + sik}
    headers = {"X-Refund-Idempotency": "ilk_" + sik}
    with start_sandbox(data) as rail:
        auth = (rail.key_id, rail.key_secret)
        first = httpx.post(rail.url + "/v1/payments/pay_DEMO0002/refund", json=body, headers=headers, auth=auth).json()
        httpx.post(rail.url + "/v1/settlements/ondemand", json={"amount": 1000}, auth=auth).raise_for_status()
        port = rail.port
    assert journal_count_for_stamp(data, sik) == 1  # readable straight from the file while it is down

    rail = start_sandbox(data, port=port)  # same port: SO_REUSEADDR lets it rebind at once
    try:
        auth = (rail.key_id, rail.key_secret)
        assert httpx.get(rail.url + "/v1/payments/pay_DEMO0002", auth=auth).json()["amount_refunded"] == 1500
        assert httpx.get(rail.url + f"/v1/refunds/{first['id']}", auth=auth).json() == first
        again = httpx.post(rail.url + "/v1/payments/pay_DEMO0002/refund", json=body, headers=headers, auth=auth)
        assert again.json()["id"] == first["id"]  # the key survived the restart
        assert httpx.get(rail.url + "/v1/balance", auth=auth).json()["balance"] == 5_000_000 - 1000
        assert len(rail.entities("settlement")) == 1
        assert rail.count_stamped(sik) == 1
    finally:
        rail.kill()  # SIGKILL: the journal still holds everything committed
    assert journal_count_for_stamp(data, sik) == 1


def test_small_responses_are_not_held_back_by_nagle() -> None:
    # Regression: a listening socket made with proto=0 kept asyncio from setting TCP_NODELAY, and every
    # response waited ~40 ms for a delayed ACK. Asserted as the behaviour itself, not as a wall-clock bound
    # (which a loaded CI machine cannot promise): a connection accepted on the sandbox's own listening socket,
    # by the asyncio server uvicorn runs on it, has TCP_NODELAY set.
    listening = bind("127.0.0.1", 0)

    async def accept_one() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=listening)
        async with server:
            _, client = await asyncio.open_connection(*listening.getsockname()[:2])
            nodelay = await asyncio.wait_for(accepted, timeout=30)
            client.close()
        return nodelay

    assert asyncio.run(accept_one()) != 0, "accepted connections would wait on Nagle + delayed ACK"


def test_a_connection_idle_as_long_as_a_client_keeps_one_is_still_served(tmp_path: Path) -> None:
    # Regression: the rail closed an idle connection after uvicorn's 5 s, exactly as long as httpx and rails/wire.py
    # keep one to reuse; on a busy machine a request written on one as the rail closed it got no answer at all.
    with start_sandbox(tmp_path / "rail") as rail:
        conn = http.client.HTTPConnection(rail.host, rail.port, timeout=60)
        try:
            conn.request("GET", "/__sandbox/health")
            assert conn.getresponse().read() and conn.sock is not None
            kept, idle_from = conn.sock, time.monotonic()
            wait_for(lambda: time.monotonic() > idle_from + KEEPALIVE_S + 1, timeout=60)
            conn.request("GET", "/__sandbox/health")  # on the same connection, idle past a client's keep-alive
            assert conn.getresponse().status == 200 and conn.sock is kept
        finally:
            conn.close()
