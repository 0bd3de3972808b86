"""Shared pieces of the ingress tests: a real redis-server, the real ingress as a subprocess, and a
TEST RESPONDER that stands in for the gate and rail workers over the real queue/outcome protocol."""

from __future__ import annotations

import resource
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import redis
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import CallToolResult
from rq.serializers import JSONSerializer

from ingress.results import error_body
from interlock.messages import CallerAction, IntentTerms, Outcome, Proposal
from interlock.outcomes import publish
from interlock.queues import DEFAULT_SHARD, gates_queue, rq_queue
from tests.procs import wait_until  # noqa: F401 - re-exported for the ingress tests

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_MANDATE = REPO / "deploy" / "mandate.example.yaml"
DEMO_AGENT = "agent_demo"
DEMO_MERCHANT = "acc_DEMO000001"
CLI = [sys.executable, "-m", "interlock.cli"]
INGRESS_CMD = [*CLI, "ingress"]


def error_of(result: CallToolResult) -> dict[str, Any]:
    """The `{error, caller_action}` of an error result, asserting the ADR 0012 shape: no structured content
    (it would break the tool's output schema), the message and caller_action in words, then the JSON."""
    assert result.is_error, result
    assert result.structured_content is None, result.structured_content
    body = error_body(result)
    assert body is not None, result.content
    words = getattr(result.content[0], "text", "")
    assert body["error"]["message"] in words and f"caller_action: {body['caller_action']}" in words, words
    return body


def queued_proposals(client: redis.Redis) -> list[Proposal]:
    queue = rq_queue(gates_queue(), client)
    return [Proposal.from_json(job.args[0]) for job in queue.get_jobs()]


def gates_queue_length(client: redis.Redis, *shards: str) -> int:
    """Proposals waiting on the gates queue of each of *shards* (default: the default shard) in this Redis."""
    return sum(int(rq_queue(gates_queue(shard), client).count) for shard in shards or (DEFAULT_SHARD,))


def stdio_client_for(env: dict[str, str], errlog: IO[str]) -> Client:
    params = StdioServerParameters(command=INGRESS_CMD[0], args=[*INGRESS_CMD[1:], "--stdio"], env=env, cwd=REPO)
    return Client(stdio_client(params, errlog=errlog), read_timeout_seconds=30)


def applied_outcome(proposal: Proposal) -> Outcome:
    return Outcome(
        request_id=proposal.request_id,
        state="APPLIED",
        sik="A" * 32,
        intent=IntentTerms(
            merchant_id=proposal.merchant_id,
            tool=proposal.tool,
            subject=str(proposal.arguments.get("payment_id", "balance")),
            amount_minor=int(proposal.arguments.get("amount", 1)),
            currency="INR",
        ),
        rail_entity_id="rfnd_TESTRESPONDER1",
        reason_code=None,
        caller_action=CallerAction.DONE,
        replayed=False,
    )


class TestResponder(threading.Thread):
    """TEST RESPONDER — not Interlock code. It pops proposal jobs off the real "gates" RQ queue and
    publishes an Outcome with `interlock.outcomes.publish`, exactly as the rail worker would, so the
    ingress's real enqueue → wait → answer path runs without the gate and rail workers."""

    __test__ = False  # not a pytest test class

    def __init__(self, redis_url: str, answer: Callable[[Proposal], Outcome] = applied_outcome,
                 shard: str = DEFAULT_SHARD) -> None:  # fmt: skip
        super().__init__(daemon=True)
        self.shard = shard
        self.client = redis.Redis.from_url(redis_url)
        self.answer = answer
        self.proposals: list[Proposal] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        from rq import Queue
        from rq.exceptions import DequeueTimeout

        queue = rq_queue(gates_queue(self.shard), self.client)
        while not self._stop_event.is_set():
            try:
                popped = Queue.dequeue_any([queue], timeout=1, connection=self.client, serializer=JSONSerializer)
            except DequeueTimeout:
                continue
            if popped is None:
                continue
            proposal = Proposal.from_json(popped[0].args[0])
            self.proposals.append(proposal)
            publish(self.client, self.answer(proposal))

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)

    def __enter__(self) -> TestResponder:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class HttpIngress:
    """`interlock ingress --http` as a real subprocess on 127.0.0.1, stopped by its pid."""

    def __init__(self, env: dict[str, str], port: int, log_path: Path, *, fd_limit: int | None = None) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.log_path = log_path
        self._log = log_path.open("w")

        def limit_files() -> None:  # in the child: `ulimit -n fd_limit`, soft and hard
            if fd_limit is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, fd_limit))

        self.proc = subprocess.Popen(
            [*INGRESS_CMD, "--http", "--host", "127.0.0.1", "--port", str(port)],
            env=env, cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=limit_files,
        )  # fmt: skip

    def wait_ready(self, timeout: float = 60.0) -> None:  # start-up: the MCP SDK import alone took 20 s at load 8
        def listening() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"ingress exited with {self.proc.returncode}:\n{self.log()}")
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", self.port)) == 0

        try:
            wait_until(listening, timeout=timeout, what=f"ingress on port {self.port}")
        except BaseException:
            self.stop()  # a start that failed leaves no process behind (its caller never reaches its own stop)
            raise

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if not self._log.closed:
            self._log.close()
