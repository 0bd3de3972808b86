"""Every code block in README.md and docs/ marked `<!-- snippet: NAME ... -->` is run here as a reader would run it,
against a real stack (issue 48 item 2): the stdio launch config (the same in the README and docs/ingress.md) by the
official MCP SDK's stdio client, the Python client for the pinned MCP SDK 2.x with this checkout's venv, the
TypeScript client with the official TypeScript SDK under Node. Only the machine-specific values are replaced —
the checkout's path, the ports and secrets of this test's stack — so a snippet that stops working fails here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from deploy.agent_client import structured
from deploy.redis_server import EmbeddedRedis
from deploy.stack import Stack
from ingress.tokens import token_sha256
from sandbox.testing import SandboxProcess
from tests.node.test_node_client import node_modules  # noqa: F401 (the fixture: `npm ci` from the lockfile)

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- snippet: ([a-z0-9-]+)[^>]*-->\n```([a-z]*)\n(.*?)\n```", re.S)
# Each snippet name and the test that runs it; a marker of another name fails test_every_marked_snippet_is_run.
RUN = {"stdio-config", "python-http-client", "typescript-http-client"}
TOKEN = "snippet-test-token-0123456789abcdef"
DOCUMENTED_URL = "http://127.0.0.1:8710/mcp"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass(frozen=True)
class Snippet:
    name: str
    path: Path
    lang: str
    text: str


def snippets() -> list[Snippet]:
    found = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        found += [Snippet(m[1], path, m[2], m[3]) for m in MARKER.finditer(path.read_text(encoding="utf-8"))]
    return found


def one(name: str) -> Snippet:
    [first, *rest] = [s for s in snippets() if s.name == name]
    assert all(s.text == first.text for s in rest), f"{name} differs between {[str(s.path) for s in [first, *rest]]}"
    return first


def test_every_marked_snippet_is_run_and_the_stdio_config_is_one() -> None:
    found = snippets()
    assert {s.name for s in found} == RUN, "a snippet marker this test does not run"
    configs = [s for s in found if s.name == "stdio-config"]
    assert {s.path.name for s in configs} == {"README.md", "ingress.md"}
    assert len({s.text for s in configs}) == 1, "the stdio config differs between README.md and docs/ingress.md"


@pytest.fixture
def ingress(tmp_path: Path, redis_server: EmbeddedRedis, rail_sandbox: SandboxProcess) -> Iterator[tuple[str, Path]]:
    """An HTTP ingress over the sandbox with the demo agent's token in <cwd>/data/agent.token, as after `make run`."""
    cwd = tmp_path / "reader"
    (cwd / "data").mkdir(parents=True)
    (cwd / "data" / "agent.token").write_text(TOKEN + "\n")
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f"agents:\n  agent_demo: {{token_sha256: {token_sha256(TOKEN)}}}\n")
    stack = Stack(tmp_path / "stack", redis_url=redis_server.url,
                  env={"INTERLOCK_MANDATE": str(REPO / "deploy" / "mandate.example.yaml"), **rail_sandbox.rail_env()})
    try:
        yield stack.start_ingress(tokens_file=tokens), cwd
    finally:
        stack.stop()


def _said_the_payment(output: str) -> None:
    assert "fetch_payment" in output and "create_payout" in output, output
    assert "pay_DEMO0001" in output and "189900" in output, output


def test_the_python_client_for_the_pinned_sdk_runs(ingress: tuple[str, Path]) -> None:
    url, cwd = ingress
    snippet = one("python-http-client")
    assert snippet.lang == "python" and DOCUMENTED_URL in snippet.text
    script = cwd / "client.py"
    script.write_text(snippet.text.replace(DOCUMENTED_URL, url))
    done = subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    _said_the_payment(done.stdout)


def test_the_typescript_client_runs(ingress: tuple[str, Path], node_modules: Path) -> None:  # noqa: F811
    url, cwd = ingress
    snippet = one("typescript-http-client")
    assert DOCUMENTED_URL in snippet.text
    (cwd / "node_modules").symlink_to(node_modules)
    script = cwd / "client.mjs"
    script.write_text(snippet.text.replace(DOCUMENTED_URL, url))
    done = subprocess.run(["node", str(script)], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    _said_the_payment(done.stdout)


@pytest.mark.anyio
async def test_the_stdio_config_launches_an_ingress_that_answers(
    tmp_path: Path, redis_server: EmbeddedRedis, rail_sandbox: SandboxProcess,
) -> None:
    server = json.loads(one("stdio-config").text)["mcpServers"]["payments"]
    env = {k: v.replace("/path/to/interlock", str(REPO)) for k, v in server["env"].items()}
    # This machine's values for the documented ones: the test's Redis and sandbox, a ledger of its own.
    assert env["REDIS_URL"] == "redis://127.0.0.1:8790/0" and env["INTERLOCK_RAIL_URL"] == "http://127.0.0.1:8700"
    env.update({"REDIS_URL": redis_server.url, "INTERLOCK_LEDGER": str(tmp_path / "ledger.sqlite3"),
                **rail_sandbox.rail_env()})  # fmt: skip
    assert (env["INTERLOCK_RAIL_KEY_ID"], env["INTERLOCK_RAIL_KEY_SECRET"]) == (
        server["env"]["INTERLOCK_RAIL_KEY_ID"], server["env"]["INTERLOCK_RAIL_KEY_SECRET"])  # the sandbox's own
    command = server["command"].replace("/path/to/interlock", str(REPO))
    params = StdioServerParameters(command=command, args=server["args"], env={**env, "PATH": "/usr/bin:/bin"})
    with (tmp_path / "stdio.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=60) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            payment = structured(await client.call_tool("fetch_payment", {"payment_id": "pay_DEMO0001"}))
    assert {"create_refund", "create_payout", "fetch_payment", "interlock_status"} <= names
    assert json.dumps(payment).count("pay_DEMO0001") and "189900" in json.dumps(payment)
