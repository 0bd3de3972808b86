"""What one HTTP client may hold of the ingress (ADR 0017): sockets, outcome waits, sessions.

Real processes: redis-server and `interlock ingress --http`, with the limits lowered through their settings so
each attack fits in seconds; the TEST RESPONDER stands in for the gate and rail workers. No timing assertions:
each test asserts who was answered and what was closed or recorded.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
import redis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from rq import Queue
from rq.exceptions import DequeueTimeout
from rq.serializers import JSONSerializer

from deploy.redis_server import EmbeddedRedis
from ingress.tokens import token_sha256
from interlock.messages import Proposal
from interlock.outcomes import publish
from interlock.ports import free_port
from interlock.queues import gates_queue, rq_queue
from tests.ingress.helpers import HttpIngress, applied_outcome, error_of, wait_until
from tests.mandates import write_mandate
from tests.procs import closed_by_server

TOKENS = {"agent_a": "tok-agent-a-1234567890", "agent_b": "tok-agent-b-0987654321", "agent_c": "tok-agent-c-55555"}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}  # fmt: skip


@pytest.fixture
def agents_env(redis_server: EmbeddedRedis, tmp_path: Path) -> dict[str, str]:
    mandates = tmp_path / "mandates"
    mandates.mkdir()
    for n, agent in enumerate(TOKENS):
        write_mandate(mandates / f"{agent}.yaml", {"agent_id": agent, "merchant_id": f"acc_{agent[-1].upper()}",
                                                   "mandate_id": f"mnd_{n}"})  # fmt: skip
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("agents:\n" + "".join(f"  {a}: {{token_sha256: {token_sha256(t)}}}\n" for a, t in TOKENS.items()))
    return {"REDIS_URL": redis_server.url, "INTERLOCK_MANDATE_DIR": str(mandates),
            "INTERLOCK_AGENT_TOKENS": str(tokens), "INTERLOCK_LEDGER": str(tmp_path / "ledger.sqlite3"),
            "INTERLOCK_OUTCOME_WAIT_MS": "60000", "PATH": "/usr/bin:/bin", "INTERLOCK_RAIL_URL": "http://127.0.0.1:9",
            "INTERLOCK_RAIL_KEY_ID": "rzp_test_interlock", "INTERLOCK_RAIL_KEY_SECRET": "x" * 24}  # fmt: skip


def start(env: dict[str, str], tmp_path: Path, fd_limit: int | None = None, **limits: str) -> HttpIngress:
    server = HttpIngress({**env, **limits}, free_port(), tmp_path / "ingress-http.log", fd_limit=fd_limit)
    server.wait_ready()
    return server


@pytest.fixture
def stopper() -> Iterator[list[HttpIngress]]:
    started: list[HttpIngress] = []
    yield started
    for server in started:
        server.stop()


def client_for(server: HttpIngress, agent: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKENS[agent]}"}, timeout=90)
    return Client(streamable_http_client(server.url, http_client=http), read_timeout_seconds=90)


def initialize(server: HttpIngress, agent: str) -> httpx.Response:
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {TOKENS[agent]}"}
    return httpx.post(server.url, json=INITIALIZE, headers=headers, timeout=30)


def admitted(server: HttpIngress, agent: str, within_s: float = 60) -> httpx.Response:
    """*agent*'s initialize, repeated while the ingress says it is full; the last answer."""
    deadline = time.monotonic() + within_s
    while True:
        answer = initialize(server, agent)
        if answer.status_code != 503 or "too_many_connections" not in answer.text or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)


def test_half_sent_requests_cannot_lock_an_agent_out_and_are_closed(
    agents_env: dict[str, str], tmp_path: Path, stopper: list[HttpIngress]
) -> None:
    # 12 connections at most, 400 file descriptors for the whole process (`ulimit -n 400`): before the fix 450
    # half-sent requests took every descriptor and the agent's connection was never accepted.
    server = start(agents_env, tmp_path, fd_limit=400, INTERLOCK_HTTP_MAX_CONNECTIONS="12",
                   INTERLOCK_INGRESS_MAX_MONEY_CALLS="8", INTERLOCK_AGENT_MAX_MONEY_CALLS="4",
                   INTERLOCK_HTTP_HEADER_TIMEOUT_MS="1500", INTERLOCK_HTTP_BODY_TIMEOUT_MS="1500")  # fmt: skip
    stopper.append(server)
    attackers = []
    for n in range(450):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        if n % 2:  # never finishes its headers, never authenticates
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        else:  # an authenticated request whose body never finishes arriving
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Authorization: Bearer " + TOKENS["agent_c"].encode() + b"\r\nContent-Length: 500\r\n\r\n{")
        attackers.append(sock)

    # While the 12 slots are held the ingress answers 503 (too_many_connections), which is its contract; the agent is
    # admitted once the half-sent requests' timeouts close them, however busy the machine is.
    answer = admitted(server, "agent_a")
    assert answer.status_code == 200, answer.text
    assert all(closed_by_server(sock) for sock in attackers)
    for sock in attackers:
        sock.close()
    assert initialize(server, "agent_b").status_code == 200
    assert "closed by the ingress's limits" in server.log()


class HoldingResponder(threading.Thread):
    """TEST RESPONDER — not Interlock code (as helpers.TestResponder): pops proposals off the real "gates"
    queue, publishes agent_b's outcome at once and holds every other agent's (a slow gate) until release()."""

    def __init__(self, redis_url: str) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(redis_url)
        self.held: list[Proposal] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        queue = rq_queue(gates_queue(), self.client)
        while not self._stop_event.is_set():
            try:
                popped = Queue.dequeue_any([queue], timeout=1, connection=self.client, serializer=JSONSerializer)
            except DequeueTimeout:
                continue
            if popped is not None:
                proposal = Proposal.from_json(popped[0].args[0])
                if proposal.agent_id == "agent_b":
                    publish(self.client, applied_outcome(proposal))
                else:
                    self.held.append(proposal)

    def release(self) -> None:
        for proposal in self.held:
            publish(self.client, applied_outcome(proposal))

    def __enter__(self) -> HoldingResponder:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop_event.set()
        self.join(timeout=5)


def held_of(responder: HoldingResponder, agent: str) -> int:
    return sum(1 for p in responder.held if p.agent_id == agent)


async def refund(client: Client, payment: str) -> Any:
    return await client.call_tool("create_refund", {"payment_id": payment, "amount": 100})


@pytest.mark.anyio
async def test_one_agents_waiting_calls_are_capped_and_another_agent_is_still_answered(
    agents_env: dict[str, str], tmp_path: Path, stopper: list[HttpIngress], redis_server: EmbeddedRedis
) -> None:
    server = start(agents_env, tmp_path, INTERLOCK_AGENT_MAX_MONEY_CALLS="3", INTERLOCK_INGRESS_MAX_MONEY_CALLS="6")
    stopper.append(server)
    responder = HoldingResponder(redis_server.url)
    answers: dict[str, list[Any]] = {"agent_a": [], "agent_c": []}
    with responder:
        async with client_for(server, "agent_a") as a, client_for(server, "agent_b") as b, \
                client_for(server, "agent_c") as c, anyio.create_task_group() as group:  # fmt: skip
            for n in range(5):  # two more than agent_a may have waiting
                group.start_soon(_keep, answers["agent_a"], refund(a, f"pay_A{n}"))
            await anyio.to_thread.run_sync(lambda: wait_until(lambda: len(answers["agent_a"]) == 2, what="refusals"))
            for result in answers["agent_a"]:
                body = error_of(result)
                assert body["error"]["code"] == "AGENT_CALL_LIMIT" and body["caller_action"] == "RETRY_SAME_CALL"
                assert "INTERLOCK_AGENT_MAX_MONEY_CALLS=3" in body["error"]["message"]
            await anyio.to_thread.run_sync(lambda: wait_until(lambda: held_of(responder, "agent_a") == 3, what="a"))

            # Another agent's call is still proposed and answered with its outcome, not IN_PROGRESS.
            applied = await refund(b, "pay_B1")
            assert applied.structured_content["state"] == "APPLIED", applied

            # agent_c fills the rest of the ingress's six waits; one more call, of any agent, is refused as such.
            for n in range(3):
                group.start_soon(_keep, answers["agent_c"], refund(c, f"pay_C{n}"))
            await anyio.to_thread.run_sync(lambda: wait_until(lambda: held_of(responder, "agent_c") == 3, what="c"))
            busy = error_of(await refund(b, "pay_B2"))
            assert busy["error"]["code"] == "INGRESS_BUSY" and busy["caller_action"] == "RETRY_SAME_CALL"
            assert held_of(responder, "agent_a") == 3  # the refused calls were never proposed
            responder.release()
        retried = await _once(server, "agent_b", "pay_B2")
    assert retried.structured_content["state"] == "APPLIED"
    assert [r.structured_content["state"] for r in answers["agent_a"][2:]] == ["APPLIED"] * 3
    assert [r.structured_content["state"] for r in answers["agent_c"]] == ["APPLIED"] * 3


async def _keep(into: list[Any], call: Any) -> None:
    into.append(await call)


async def _once(server: HttpIngress, agent: str, payment: str) -> Any:
    async with client_for(server, agent) as client:
        return await refund(client, payment)


def session_works(server: HttpIngress, agent: str, session_id: str) -> bool:
    """Whether *session_id* still answers (a ping); the SDK answers 404 for a closed or unknown session."""
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {TOKENS[agent]}", "mcp-session-id": session_id,
               "mcp-protocol-version": "2025-11-25"}  # fmt: skip
    answer = httpx.post(server.url, json={"jsonrpc": "2.0", "id": 7, "method": "ping"}, headers=headers, timeout=30)
    assert answer.status_code in (200, 404), answer.text
    return answer.status_code == 200


def test_one_agent_cannot_hold_more_than_its_sessions_nor_refuse_another_agents(
    agents_env: dict[str, str], tmp_path: Path, stopper: list[HttpIngress]
) -> None:
    server = start(agents_env, tmp_path, INTERLOCK_HTTP_AGENT_MAX_SESSIONS="2", INTERLOCK_HTTP_MAX_SESSIONS="5")
    stopper.append(server)
    opened = []
    for _ in range(8):  # never closed: before the fix all eight stayed open (for 30 minutes)
        answer = initialize(server, "agent_a")
        assert answer.status_code == 200, answer.text
        opened.append(answer.headers["mcp-session-id"])
    # Each new session past two closed agent_a's oldest idle one: only the two newest still answer.
    assert [session_works(server, "agent_a", sid) for sid in opened] == [False] * 6 + [True] * 2
    for agent in ("agent_b", "agent_c"):
        assert initialize(server, agent).status_code == 200


def test_a_session_with_nothing_in_flight_is_closed_after_the_idle_timeout(
    agents_env: dict[str, str], tmp_path: Path, stopper: list[HttpIngress]
) -> None:
    server = start(agents_env, tmp_path, INTERLOCK_HTTP_SESSION_IDLE_MS="1000")
    stopper.append(server)
    session_id = initialize(server, "agent_a").headers["mcp-session-id"]
    # Watched in the log, not by asking the session: every request would restart its idle countdown.
    wait_until(lambda: f"Session {session_id} idle timeout" in server.log(), timeout=60, what="the idle timeout")
    assert not session_works(server, "agent_a", session_id)
    assert initialize(server, "agent_a").status_code == 200


def test_an_ingress_whose_limits_do_not_fit_its_file_descriptors_refuses_to_start(
    agents_env: dict[str, str], tmp_path: Path
) -> None:
    # 400 connections + 232 Redis connections cannot fit in `ulimit -n 300`: it would fail to accept an agent
    # (or to reach Redis) exactly when busiest, so it says so at start instead.
    server = HttpIngress(agents_env, free_port(), tmp_path / "ingress-http.log", fd_limit=300)
    try:
        assert server.proc.wait(timeout=60) == 2
        log = server.log()
        assert "INTERLOCK_HTTP_MAX_CONNECTIONS=400" in log and "may open only 300" in log, log
    finally:
        server.stop()
