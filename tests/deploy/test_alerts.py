"""People hear what waits for them (issue 48 item 5): a real Prometheus server, given the shipped alerting rules
(deploy/prometheus/interlock-alerts.yml) and a scrape of `interlock metrics`, fires InterlockCallHeld for a call a
real stack HELD — and the rules pass promtool's own checks and unit tests."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from deploy.agent_client import mcp_client, structured
from interlock.ports import free_port, port_in_use
from tests.deploy.conftest import FullStack

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "interlock-alerts.yml"


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path is not None, f"{name} is missing: `make prometheus` installs Debian's prometheus package"
    return path


def test_the_shipped_rules_pass_promtool_check_and_its_unit_tests() -> None:
    checked = subprocess.run([_tool("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert checked.returncode == 0 and "SUCCESS: 5 rules found" in checked.stdout, checked.stdout + checked.stderr
    tested = subprocess.run([_tool("promtool"), "test", "rules", "interlock-alerts.test.yml"], cwd=RULES.parent,
                            capture_output=True, text=True)  # fmt: skip
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def _alerts(port: int) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=5) as answer:
        alerts: list[dict[str, Any]] = json.load(answer)["data"]["alerts"]
        return alerts


@pytest.mark.anyio
async def test_a_real_prometheus_fires_for_a_call_held_on_a_running_stack(
    full_stack_factory: Callable[..., FullStack], tmp_path: Path,
) -> None:
    full = full_stack_factory()
    async with mcp_client(full.info.mcp_url, full.info.token()) as client:
        held = structured(await client.call_tool("create_refund", {"payment_id": full.payment(500000),
                                                                   "amount": 400000}))  # fmt: skip
    assert held["state"] == "HELD", held  # above the example mandate's Rs 3,000
    metrics_port, prometheus_port = free_port(), free_port()
    full.stack.start_actor("metrics", ["metrics", "--host", "127.0.0.1", "--port", str(metrics_port)])
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "interlock", "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}],
    }))  # fmt: skip
    log = (tmp_path / "prometheus.log").open("w")
    server = subprocess.Popen([_tool("prometheus"), f"--config.file={config}",
                               f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                               f"--web.listen-address=127.0.0.1:{prometheus_port}"], stdout=log,
                              stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 180  # a bound on a wait, not a measurement: scrapes and evaluations are 1 s
        firing: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not firing:
            assert server.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            if port_in_use(prometheus_port):
                firing = [a for a in _alerts(prometheus_port)
                          if a["labels"]["alertname"] == "InterlockCallHeld" and a["state"] == "firing"]  # fmt: skip
            time.sleep(0.5)
        assert firing, (tmp_path / "prometheus.log").read_text()[-3000:]
        assert firing[0]["labels"]["merchant"] == "acc_DEMO000001"
        assert firing[0]["annotations"]["summary"] == "1 call(s) of merchant acc_DEMO000001 wait for an approver"
    finally:
        server.terminate()
        server.wait(30)
        log.close()


@pytest.mark.anyio
async def test_the_reconciler_process_posts_a_held_call_to_the_configured_channel(
    full_stack_factory: Callable[..., FullStack],
) -> None:
    """The real reconciler actor, given INTERLOCK_NOTIFY_URL and _SECRET, tells a real receiver of the call it holds."""
    from tests.reconciler.test_notify import SECRET, Receiver

    receiver = Receiver()
    try:
        full = full_stack_factory(env={"INTERLOCK_NOTIFY_URL": receiver.url, "INTERLOCK_NOTIFY_SECRET": SECRET})
        async with mcp_client(full.info.mcp_url, full.info.token()) as client:
            held = structured(await client.call_tool("create_refund", {"payment_id": full.payment(500000),
                                                                       "amount": 400000}))  # fmt: skip
        assert held["state"] == "HELD", held
        deadline = time.monotonic() + 120  # a bound on a wait: the reconciler sweeps every few seconds
        while time.monotonic() < deadline and not receiver.received:
            time.sleep(0.2)
        [body] = receiver.bodies()
        assert body["interlock"]["kind"] == "held" and body["interlock"]["sik"] == held["sik"]
        assert "4,000.00 INR" in body["text"]
    finally:
        receiver.server.shutdown()
