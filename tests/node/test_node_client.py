"""A second real MCP client in `make test`: the official TypeScript SDK (client.mjs, with Ajv) and the MCP
Inspector CLI, both pinned in package-lock.json, against the stack as real processes — redis-server, the
sandbox rail, a gate worker, the rail worker, the reconciler, the HTTP ingress, and stdio ingresses the
Node client launches itself.

Never skipped: a machine without Node fails here, and `make test` installs Debian's nodejs and npm first.
The Inspector is pinned at 1.0.3, the last of its v1 line, for that reason: v2 needs Node >= 22.19 (its CLI
bundles undici 8), newer than Debian 12's Node 18, while v1's CLI is the SDK plus commander and express.
Its `--cli URL --transport http --header ... --method ...` flags are the same in both lines.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deploy.demo import DEMO_PAYEE, STRANGER
from deploy.redis_server import EmbeddedRedis
from deploy.stack import Stack
from ingress.tokens import token_sha256
from sandbox.testing import SandboxProcess
from tests.engine.conftest import FAST
from tests.mandates import AGENT, EXAMPLE

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
NODE_MODULES = HERE / "node_modules"
INSPECTOR = NODE_MODULES / ".bin" / "mcp-inspector"
TOKEN = "node-client-token-3c7a91"
BALANCE = 5_000_000


def _require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is missing; `make test` installs Debian's nodejs and npm: apt-get install nodejs npm")
    return path


@pytest.fixture(scope="module")
def node_modules() -> Path:
    """`npm ci` from the committed lockfile when node_modules is missing or older than the lockfile:
    nothing is fetched at run time, and every run uses the pinned versions."""
    _require("node")
    npm = _require("npm")
    installed = NODE_MODULES / ".package-lock.json"  # npm's record of what it installed
    lock = HERE / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        proc = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=HERE, capture_output=True, text=True,
                              timeout=600)  # fmt: skip
        assert proc.returncode == 0, f"npm ci failed:\n{proc.stdout}\n{proc.stderr}"
    return NODE_MODULES


@dataclass
class NodeStack:
    stack: Stack
    rail: SandboxProcess
    mcp_url: str
    stdio_env: dict[str, str]
    _n: int = 0

    def payment(self, amount: int) -> str:
        self._n += 1
        pid = f"pay_NODE{self._n}x{os.getpid()}"
        self.rail.add_payment(pid, amount)
        return pid

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{actor.log()[-3000:]}" for name, actor in self.stack.actors.items())


@pytest.fixture(scope="module")
def node_stack(tmp_path_factory: pytest.TempPathFactory, redis_server: EmbeddedRedis,
               rail_sandbox: SandboxProcess) -> Iterator[NodeStack]:  # fmt: skip
    data = tmp_path_factory.mktemp("node-stack")
    tokens = data / "tokens.yaml"
    tokens.write_text(f"agents:\n  {AGENT}: {{token_sha256: {token_sha256(TOKEN)}}}\n")
    stack = Stack(data, redis_url=redis_server.url,
                  env={"INTERLOCK_MANDATE": str(EXAMPLE), **rail_sandbox.rail_env(), **FAST})  # fmt: skip
    try:
        stack.start_engine()
        url = stack.start_ingress(tokens_file=tokens)
        stdio_env = {k: v for k, v in stack.base_env().items() if k != "INTERLOCK_AGENT_TOKENS"}
        stdio_env["INTERLOCK_AGENT_ID"] = AGENT
        rail_sandbox.set_balance(BALANCE)
        rail_sandbox.add_fund_account(DEMO_PAYEE)
        rail_sandbox.add_fund_account(STRANGER)
        rail_sandbox.set_banking_balance(BALANCE)
        yield NodeStack(stack, rail_sandbox, url, stdio_env)
    finally:
        stack.stop()
        rail_sandbox.clear_faults()  # in case the harness died while the rail was slowed


def _fixtures(stack: NodeStack, transport: str, settlement_amount: int) -> dict[str, Any]:
    return {
        "refund_payment": stack.payment(189900),
        "held_payment": stack.payment(500000),
        "in_progress_payment": stack.payment(50000),
        "settlement_amount": settlement_amount,
        # The example mandate's one payee (deploy/mandate.example.yaml) and one it does not name.
        "payee": DEMO_PAYEE, "stranger": STRANGER, "payout_amount": settlement_amount - 2000 - os.getpid() % 1000,
        "operation_ref": f"node-{transport}-{os.getpid()}",
    }


def test_the_typescript_sdk_gets_a_result_with_caller_action_for_every_call_over_stdio_and_http(
    node_modules: Path, node_stack: NodeStack, tmp_path: Path
) -> None:
    config = {
        "http": {"url": node_stack.mcp_url, "token": TOKEN},
        "stdio": {"command": sys.executable, "args": ["-m", "interlock.cli", "ingress", "--stdio"],
                  "env": node_stack.stdio_env, "cwd": str(REPO)},
        # Distinct payments and settlement amounts per transport: one transport's calls are not the other's repeats.
        "fixtures": {"stdio": _fixtures(node_stack, "stdio", 50000), "http": _fixtures(node_stack, "http", 60000)},
        # The sandbox's control surface, to make the rail slow for the IN_PROGRESS case.
        "sandbox": {"url": node_stack.rail.url, "key_id": node_stack.rail.key_id,
                    "key_secret": node_stack.rail.key_secret},
    }  # fmt: skip
    config_path = tmp_path / "node-client.json"
    config_path.write_text(json.dumps(config))
    proc = subprocess.run([_require("node"), str(HERE / "client.mjs"), str(config_path)], cwd=HERE,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    report = f"{proc.stdout}\n--- stderr\n{proc.stderr[-6000:]}"
    assert proc.returncode == 0, f"{report}\n{node_stack.logs()}"
    summary = proc.stdout.strip().splitlines()[-1]
    passed = int(summary.split()[1])
    # 2 transports x (33 calls x ~6 checks + schemas); far fewer means the harness skipped its work.
    assert summary.endswith(" passed, 0 failed") and passed > 300, report


def _inspector(*args: str) -> dict[str, Any]:
    proc = subprocess.run([_require("node"), str(INSPECTOR), "--cli", *args], cwd=HERE, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    answer: dict[str, Any] = json.loads(proc.stdout)
    return answer


def test_the_mcp_inspector_cli_lists_and_calls_tools_over_http_with_the_bearer_token(
    node_modules: Path, node_stack: NodeStack
) -> None:
    server = [node_stack.mcp_url, "--transport", "http", "--header", f"Authorization: Bearer {TOKEN}"]
    listed = _inspector(*server, "--method", "tools/list")
    assert {tool["name"] for tool in listed["tools"]} == {"fetch_payment", "fetch_refund", "create_refund",
                                                         "create_instant_settlement", "create_payout",
                                                         "interlock_status"}  # fmt: skip

    pid = node_stack.payment(189900)
    found = _inspector(*server, "--method", "tools/call", "--tool-name", "fetch_payment", "--tool-arg",
                       f"payment_id={pid}")  # fmt: skip
    assert not found.get("isError") and found["structuredContent"]["id"] == pid

    refused = _inspector(*server, "--method", "tools/call", "--tool-name", "create_refund", "--tool-arg",
                         f"payment_id={pid}", "--tool-arg", "amount=1899.5")  # fmt: skip
    assert refused["isError"] is True and "structuredContent" not in refused
    body = json.loads(refused["content"][1]["text"])
    assert (body["error"]["field"], body["caller_action"]) == ("amount", "DO_NOT_RETRY")
