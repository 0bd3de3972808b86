"""`interlock webhooks` as a real process on loopback: an acknowledged event survives a SIGKILL of the receiver,
and a receiver started without its secrets says which variable to set."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import httpx

from interlock.ports import free_port
from tests.procs import INTERLOCK, Proc, wait_until
from tests.webhooks.test_receiver import NEW, event, headers
from webhooks.receiver import PATH


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/webhooks/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_an_acknowledged_event_survives_a_sigkill_of_the_receiver(tmp_path: Path) -> None:
    inbox = tmp_path / "webhooks.sqlite3"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {"INTERLOCK_WEBHOOK_SECRETS": NEW, "INTERLOCK_WEBHOOK_INBOX": str(inbox)}
    first = Proc([*INTERLOCK, "webhooks", "--port", str(port)], env, tmp_path / "first.log")
    try:
        wait_until(lambda: _up(url), what="the receiver to listen")
        body = event()
        answer = httpx.post(url + PATH, content=body, headers=headers(body), timeout=60)
        assert answer.status_code == 200 and answer.json()["status"] == "accepted"
        first.kill()  # SIGKILL right after the acknowledgement
    finally:
        first.stop()
    second = Proc([*INTERLOCK, "webhooks", "--port", str(port)], env, tmp_path / "second.log")
    try:
        wait_until(lambda: _up(url), what="the restarted receiver to listen")
        again = httpx.post(url + PATH, content=body, headers=headers(body), timeout=60)
        assert again.status_code == 200 and again.json()["status"] == "duplicate"
    finally:
        second.stop()
    conn = sqlite3.connect(inbox)
    assert conn.execute("SELECT event_id, deliveries, body FROM webhook_events").fetchall() == [("evt_1", 2, body)]
    conn.close()


def test_a_receiver_without_its_secrets_exits_naming_the_variable(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "INTERLOCK_WEBHOOK_SECRETS"}
    env["INTERLOCK_WEBHOOK_INBOX"] = str(tmp_path / "webhooks.sqlite3")
    done = subprocess.run([*INTERLOCK, "webhooks", "--port", str(free_port())], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode != 0
    assert "INTERLOCK_WEBHOOK_SECRETS is not set" in done.stderr
    assert not (tmp_path / "webhooks.sqlite3").exists()
