"""`make run` from the Makefile: installs (already installed here), starts the stack under
supervisord, runs the demo with a real MCP client, serves until interrupted, stops every actor."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from interlock.ports import free_port, port_in_use
from tests.procs import wait_until

REPO = Path(__file__).resolve().parents[2]


def test_make_run_starts_the_stack_runs_the_demo_and_stops(tmp_path: Path) -> None:
    ports = {"sandbox": free_port(), "ingress": free_port(), "redis": free_port(), "console": free_port(),
             "webhooks": free_port()}
    up_args = (f"--data {tmp_path / 'data'} --sandbox-port {ports['sandbox']} --ingress-port {ports['ingress']} "
               f"--redis-port {ports['redis']} --console-port {ports['console']} --webhook-port {ports['webhooks']} "
               "--gate-workers 2")  # fmt: skip
    log = tmp_path / "make-run.log"
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("INTERLOCK_")}
    with log.open("wb") as out:
        make = subprocess.Popen(["make", "run", f"UP_ARGS={up_args}"], cwd=REPO, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        wait_until(lambda: "interlock: serving" in log.read_text() or make.poll() is not None, timeout=240,
                   what="the stack to serve")  # fmt: skip
        text = log.read_text()
        assert "interlock: stack ready" in text, text[-3000:]
        assert "\ndemo: 9 passed, 0 failed\n" in text, text[-3000:]
        assert "PASS  ...settled by the rail's webhook" in text, "the ambiguous refund was settled by its webhook"
        assert f"webhooks      http://127.0.0.1:{ports['webhooks']}/webhooks/razorpay" in text
        assert all(port_in_use(p) for p in ports.values())
        # An operator's commands find the running stack with nothing exported (issue 48 item 1): from --data.
        for command in (["status"], ["holds", "list"], ["quarantine", "list"], ["audit", "verify"]):
            done = subprocess.run([str(REPO / ".venv" / "bin" / "interlock"), "--data", str(tmp_path / "data"),
                                   *command], env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
            said = done.stdout + done.stderr
            assert done.returncode == 0 and "is not set" not in said, (command, said)
        assert "queues:" in subprocess.run([str(REPO / ".venv" / "bin" / "interlock"), "--data", str(tmp_path / "data"),
                                            "status"], env=env, capture_output=True, text=True,
                                           timeout=60).stdout  # fmt: skip
        stack_env = tmp_path / "data" / "stack.env"
        assert stack_env.stat().st_mode & 0o777 == 0o600  # it holds the rail key and the webhook secret
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGINT)
        make.wait(90)
    assert "interlock: stopped" in log.read_text()
    deadline = time.monotonic() + 30
    while any(port_in_use(p) for p in ports.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(port_in_use(p) for p in ports.values()), "every actor must be stopped"
