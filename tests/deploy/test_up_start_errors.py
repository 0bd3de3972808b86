"""`interlock up` says an actor's own start error as soon as the actor exits with it (issue 48 item 1): a setting
the actor refuses is refused again at every restart, so waiting out the ready timeout only hides why."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from interlock.ports import free_port, port_in_use

REPO = Path(__file__).resolve().parents[2]


def test_a_webhook_secret_too_short_stops_up_with_the_receivers_own_words(tmp_path: Path) -> None:
    ports = {name: free_port() for name in ("sandbox", "ingress", "redis", "console", "webhook")}
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("INTERLOCK_")}
    env["INTERLOCK_WEBHOOK_SECRETS"] = "short"
    # A ready timeout longer than the test waits: `up` can only have stopped because it read the refusal.
    done = subprocess.run([str(REPO / ".venv" / "bin" / "interlock"), "up", "--data", str(tmp_path / "data"),
                           "--ready-timeout", "900",
                           *(arg for name, port in ports.items() for arg in (f"--{name}-port", str(port)))],
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "webhooks refused to start: INTERLOCK_WEBHOOK_SECRETS" in said and "shorter than 16 characters" in said
    assert "not ready after" not in said
    assert "interlock: stopped" in said and not any(port_in_use(p) for p in ports.values())
