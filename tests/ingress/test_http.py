"""`interlock ingress --http` as a real process: bearer tokens map to agents, nothing else does."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from deploy.redis_server import EmbeddedRedis
from ingress.tokens import token_sha256
from interlock.ports import free_port
from tests.ingress.helpers import (
    DEMO_AGENT,
    DEMO_MERCHANT,
    INGRESS_CMD,
    REPO,
    HttpIngress,
    TestResponder,
    error_of,
)

DEMO_TOKEN = "demo-token-9f8e7d6c5b4a"
LONELY_TOKEN = "lonely-token-0a1b2c3d4e5f"  # an agent with a token but no mandate
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}  # fmt: skip
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def http_env(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        "agents:\n"
        f"  {DEMO_AGENT}: {{token_sha256: {token_sha256(DEMO_TOKEN)}}}\n"
        f"  agent_lonely: {{token_sha256: {token_sha256(LONELY_TOKEN)}}}\n"
    )
    http_env = {k: v for k, v in env.items() if k != "INTERLOCK_AGENT_ID"}
    return {**http_env, "INTERLOCK_AGENT_TOKENS": str(tokens), "PATH": "/usr/bin:/bin"}


@pytest.fixture
def ingress(http_env: dict[str, str], tmp_path: Path) -> Iterator[HttpIngress]:
    server = HttpIngress(http_env, free_port(), tmp_path / "ingress-http.log")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def client_for(ingress: HttpIngress, token: str, mode: str = "auto") -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return Client(streamable_http_client(ingress.url, http_client=http), read_timeout_seconds=30, mode=mode)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer not-a-known-token"},
        {"Authorization": f"Basic {DEMO_TOKEN}"},
        {"Authorization": "Bearer"},
    ],
)
def test_a_request_without_a_known_bearer_token_is_401(ingress: HttpIngress, headers: dict[str, str]) -> None:
    response = httpx.post(ingress.url, json=INITIALIZE, headers={**MCP_HEADERS, **headers}, timeout=10)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert DEMO_TOKEN not in ingress.log()


OAUTH_DISCOVERY = [
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-protected-resource/mcp",
    "/.well-known/oauth-authorization-server",
    "/.well-known/oauth-authorization-server/mcp",
    "/.well-known/openid-configuration",
]


def test_every_401_carries_a_bearer_challenge(ingress: HttpIngress) -> None:
    base = ingress.url.removesuffix("/mcp")
    for method in ("GET", "POST", "DELETE"):
        for path in ("/mcp", "/", "/anything/else"):
            bare = httpx.request(method, base + path, headers=MCP_HEADERS, timeout=10)
            wrong = httpx.request(method, base + path, headers={**MCP_HEADERS, "Authorization": "Bearer nope"},
                                  timeout=10)  # fmt: skip
            assert (bare.status_code, wrong.status_code) == (401, 401), (method, path)
            # RFC 6750 §3: no error code when no credentials were sent; invalid_token when an unknown one was.
            assert bare.headers["www-authenticate"] == 'Bearer realm="interlock"'
            assert wrong.headers["www-authenticate"] == 'Bearer realm="interlock", error="invalid_token"'


def test_oauth_discovery_is_404_not_401_while_oauth_is_not_configured(ingress: HttpIngress) -> None:
    # A client that gets 401 here starts an OAuth flow (and some then drop their configured bearer header);
    # 404 tells it there is no OAuth, so it sends the static token it was given.
    base = ingress.url.removesuffix("/mcp")
    for path in OAUTH_DISCOVERY:
        for headers in ({}, {"Authorization": f"Bearer {DEMO_TOKEN}"}):
            response = httpx.get(base + path, headers=headers, timeout=10)
            assert response.status_code == 404, (path, headers)
            assert "Authorization: Bearer" in response.json()["detail"]


def test_the_right_token_initializes(ingress: HttpIngress) -> None:
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {DEMO_TOKEN}"}
    response = httpx.post(ingress.url, json=INITIALIZE, headers=headers, timeout=10)
    assert response.status_code == 200


@pytest.mark.anyio
# Both eras of the protocol: the handshake era (a stateful session) and 2026-07-28 (stateless requests).
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_the_proposal_carries_the_agent_of_the_token_that_sent_it(
    ingress: HttpIngress, redis_server: EmbeddedRedis, mode: str
) -> None:
    with TestResponder(redis_server.url) as responder:
        async with client_for(ingress, DEMO_TOKEN, mode) as client:
            assert client.session.protocol_version == ("2025-11-25" if mode == "legacy" else mode)
            names = [tool.name for tool in (await client.list_tools()).tools]
            result = await client.call_tool("create_refund", {"payment_id": "pay_1", "amount": 2500})
    assert "create_refund" in names
    assert not result.is_error
    assert result.structured_content["state"] == "APPLIED"
    [proposal] = responder.proposals
    assert (proposal.agent_id, proposal.merchant_id) == (DEMO_AGENT, DEMO_MERCHANT)


@pytest.mark.anyio
async def test_an_agent_without_a_mandate_sees_only_status_and_can_move_nothing(ingress: HttpIngress, rclient) -> None:
    async with client_for(ingress, LONELY_TOKEN) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        result = await client.call_tool("create_refund", {"payment_id": "pay_1", "amount": 2500})
    assert names == ["interlock_status"]
    assert error_of(result)["error"]["code"] == "NO_MANDATE"
    assert rclient.keys("rq:queue:*") == []


def test_a_port_in_use_is_a_clear_error_naming_it(ingress: HttpIngress, http_env: dict[str, str]) -> None:
    proc = subprocess.run(
        [*INGRESS_CMD, "--http", "--host", "127.0.0.1", "--port", str(ingress.port)],
        env=http_env, cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert f"port {ingress.port}" in proc.stderr and "already in use" in proc.stderr


def test_http_without_a_tokens_file_refuses_to_start(http_env: dict[str, str]) -> None:
    env = {k: v for k, v in http_env.items() if k != "INTERLOCK_AGENT_TOKENS"}
    proc = subprocess.run([*INGRESS_CMD, "--http", "--port", str(free_port())], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2
    assert "INTERLOCK_AGENT_TOKENS" in proc.stderr


def test_a_session_opened_by_one_agent_cannot_be_used_with_another_agents_token(ingress: HttpIngress) -> None:
    opened = httpx.post(ingress.url, json=INITIALIZE, timeout=10,
                        headers={**MCP_HEADERS, "Authorization": f"Bearer {DEMO_TOKEN}"})  # fmt: skip
    session_id = opened.headers["mcp-session-id"]
    hijack = httpx.post(
        ingress.url,
        json={"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
        headers={**MCP_HEADERS, "Authorization": f"Bearer {LONELY_TOKEN}", "Mcp-Session-Id": session_id,
                 "MCP-Protocol-Version": "2025-11-25"},
        timeout=10,
    )  # fmt: skip
    assert hijack.status_code == 404
