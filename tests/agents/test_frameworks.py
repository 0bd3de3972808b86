"""Three agent frameworks, each through its own MCP client, against the stack as real processes (redis-server,
the sandbox rail, a gate worker, the rail worker, the reconciler and the HTTP ingress): the OpenAI Agents SDK,
LangGraph with langchain-mcp-adapters, and PydanticAI, each with a scripted model (no network) and the harness
kit (agent_harness/) around it. They run in their own venv (.venv-agents, tests/agents/requirements.txt,
installed by `make agents`, which `make test` runs first) because they need the MCP SDK 1.x and Interlock's
server runs on 2.x; a missing venv fails here, it is never skipped.

For each framework, three business actions, each with its own operation_ref and signed task (the mandate
requires one): a refund larger than the payment comes back BLOCKED as a tool result the model reads; a refund
whose rail call times out ambiguously (the sandbox's ambiguous_504) is answered UNKNOWN, repeated by the harness
with the same `_meta` until it is APPLIED — one refund on the rail; and a refund above the mandate's hold
threshold comes back HELD and is surfaced to a person through the harness's on_escalate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from deploy.redis_server import EmbeddedRedis
from deploy.stack import Stack
from ingress.tokens import token_sha256
from interlock.task import public_key_b64
from ledger.db import open_ledger
from sandbox.testing import SandboxProcess
from tests.engine.conftest import FAST
from tests.mandates import AGENT, MERCHANT, write_mandate

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
AGENTS_PYTHON = REPO / ".venv-agents" / "bin" / "python"
TOKEN = "framework-agents-token-5d21e8"
SIGNER = "helpdesk"
KEY = Ed25519PrivateKey.generate()
INTERLOCK_TOOLS = ["create_instant_settlement", "create_payout", "create_refund", "fetch_payment", "fetch_refund",
                   "interlock_status"]  # fmt: skip


@dataclass
class AgentStack:
    stack: Stack
    rail: SandboxProcess
    mcp_url: str
    key_file: Path

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{actor.log()[-3000:]}" for name, actor in self.stack.actors.items())


@pytest.fixture(scope="module")
def agents_python() -> Path:
    if not AGENTS_PYTHON.exists():
        pytest.fail(f"{AGENTS_PYTHON} is missing: `make agents` creates it from tests/agents/requirements.txt")
    return AGENTS_PYTHON


@pytest.fixture(scope="module")
def agent_stack(tmp_path_factory: pytest.TempPathFactory, redis_server: EmbeddedRedis,
                rail_sandbox: SandboxProcess) -> Iterator[AgentStack]:  # fmt: skip
    data = tmp_path_factory.mktemp("agents-stack")
    tokens = data / "tokens.yaml"
    tokens.write_text(f"agents:\n  {AGENT}: {{token_sha256: {token_sha256(TOKEN)}}}\n")
    key_file = data / "harness.pem"
    key_file.write_bytes(KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    mandate = write_mandate(data / "mandate.yaml", {"limits.windows": [], "limits.fee_budgets": {},
                                                    "task_binding": "required",
                                                    "task_signers": {SIGNER: public_key_b64(KEY)}})  # fmt: skip
    stack = Stack(data, redis_url=redis_server.url,
                  env={"INTERLOCK_MANDATE": str(mandate), **rail_sandbox.rail_env(), **FAST})  # fmt: skip
    try:
        stack.start_engine()
        url = stack.start_ingress(tokens_file=tokens)
        yield AgentStack(stack, rail_sandbox, url, key_file)
    finally:
        stack.stop()
        rail_sandbox.clear_faults()


def run_agent(python: Path, agent_stack: AgentStack, tmp_path: Path, framework: str, transport: str,
              scenarios: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    config: dict[str, Any] = {
        "framework": framework, "mcp_url": agent_stack.mcp_url, "token": TOKEN, "merchant_id": MERCHANT,
        "agent_id": AGENT, "key_file": str(agent_stack.key_file), "signer": SIGNER, "scenarios": scenarios,
        "retry": {"first_delay_s": 0.2, "max_delay_s": 1.0, "give_up_after_s": 60}, **(extra or {}),
    }  # fmt: skip
    if transport == "stdio":
        # Interlock's stdio ingress from this checkout's venv; the agent id comes from the launch config.
        env = {k: v for k, v in agent_stack.stack.base_env().items() if k != "INTERLOCK_AGENT_TOKENS"}
        config["stdio"] = {"command": sys.executable, "args": ["-m", "interlock.cli", "ingress", "--stdio"],
                           "env": {**env, "INTERLOCK_AGENT_ID": AGENT}, "cwd": str(REPO)}  # fmt: skip
    config_path = tmp_path / f"{framework}-{transport}.json"
    config_path.write_text(json.dumps(config))
    # The harness kit and the Interlock vocabulary it signs with, from this checkout; nothing else of Interlock.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([str(python), str(HERE / "run_agent.py"), str(config_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=150 if extra is None else 900)  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-6000:]}\n{agent_stack.logs()}"
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


def model_saw(framework: str, tool_result: Any) -> dict[str, Any]:
    """The money result inside what the framework handed its model as the tool result — its own shape each."""
    if framework == "pydantic_ai":
        assert isinstance(tool_result, dict), tool_result  # the structured content, as is
        return tool_result
    if framework == "langgraph":
        assert tool_result["status"] == "success", tool_result  # a ToolMessage, not one with an error status
        tool_result = tool_result["content"]
    # The content blocks' text (LangChain: text blocks; the Agents SDK: input_text items), one JSON object.
    blocks = [tool_result] if isinstance(tool_result, str) else [b["text"] for b in tool_result if "text" in b]
    body: dict[str, Any] = json.loads("".join(blocks))
    return body


@pytest.mark.parametrize("framework, transport", [("openai_agents", "http"), ("openai_agents", "stdio"),
                                                  ("langgraph", "http"), ("pydantic_ai", "http")])  # fmt: skip
def test_a_framework_agent_gets_blocked_as_a_result_and_its_unknown_refund_is_repeated_to_one_applied(
    agents_python: Path, agent_stack: AgentStack, tmp_path: Path, framework: str, transport: str
) -> None:
    rail = agent_stack.rail
    n = f"{framework.replace('_', '')}{transport}{os.getpid()}"
    small, ambiguous, large = f"pay_AGT{n}a", f"pay_AGT{n}b", f"pay_AGT{n}c"
    rail.add_payment(small, 189_900)
    rail.add_payment(ambiguous, 189_900)
    rail.add_payment(large, 500_000)
    scenarios = [
        # Rs 2,500 from a Rs 1,899 payment: inside the mandate, impossible on the rail (G2).
        {"operation_ref": f"ticket-{n}-1", "subjects": [small], "arguments": {"payment_id": small, "amount": 250_000}},
        {"operation_ref": f"ticket-{n}-2", "subjects": [ambiguous], "max_amount_minor": 189_900,
         "arguments": {"payment_id": ambiguous, "amount": 189_900}},
        # Rs 4,000: above the mandate's hold_above_minor (Rs 3,000), so a person must release it.
        {"operation_ref": f"ticket-{n}-3", "subjects": [large], "arguments": {"payment_id": large, "amount": 400_000}},
    ]  # fmt: skip
    # Every money call that reaches the rail now applies and is answered with an HTML 504; the blocked refund
    # never gets there. The reconciler reads the rail (reads are unaffected) and settles the intent.
    rail.set_faults([{"name": "ambiguous_504", "rate": 1.0}])
    try:
        report = run_agent(agents_python, agent_stack, tmp_path, framework, transport, scenarios)
    finally:
        rail.clear_faults()

    assert report["tools"] == INTERLOCK_TOOLS, report
    blocked_seen, applied_seen, held_seen = (model_saw(framework, r) for r in report["tool_results"])
    blocked_sent, repeated_sent, held_sent = report["sent"]

    # A refusal is a tool result the model reads, with what to do next; nothing reached the rail.
    assert (blocked_seen["state"], blocked_seen["reason_code"], blocked_seen["caller_action"]) == (
        "BLOCKED", "G2_EXCEEDS_REFUNDABLE", "DO_NOT_RETRY"), blocked_seen  # fmt: skip
    assert len(blocked_sent) == 1 and blocked_sent[0]["meta"]["interlock/operation_ref"] == f"ticket-{n}-1"
    assert "BLOCKED" in report["finals"][0]
    assert [e for e in rail.entities("refund") if e["entity"]["payment_id"] == small] == []

    # UNKNOWN at once, then the same call — same arguments, same operation_ref, same signed task — until APPLIED.
    first, last = repeated_sent[0]["result"], repeated_sent[-1]["result"]
    assert (first["state"], first["caller_action"], first["replayed"]) == ("UNKNOWN", "RETRY_SAME_CALL", False)
    assert (last["state"], last["caller_action"], last["replayed"]) == ("APPLIED", "DONE", True), repeated_sent
    assert len(repeated_sent) >= 2
    assert {json.dumps(c["meta"], sort_keys=True) for c in repeated_sent} == {
        json.dumps(repeated_sent[0]["meta"], sort_keys=True)}  # fmt: skip
    assert repeated_sent[0]["meta"]["interlock/operation_ref"] == f"ticket-{n}-2"
    assert repeated_sent[0]["meta"]["interlock/task"]["grants"]["create_refund"]["subjects"] == [ambiguous]
    assert all(c["arguments"] == scenarios[1]["arguments"] for c in repeated_sent)
    assert {c["result"]["sik"] for c in repeated_sent} == {first["sik"]}
    assert (applied_seen["state"], applied_seen["rail_entity_id"]) == ("APPLIED", last["rail_entity_id"])

    # Exactly one refund on the rail, stamped with the operation's SIK; the ledger bound the operation_ref to it.
    refunds = [e["entity"] for e in rail.entities("refund") if e["entity"]["payment_id"] == ambiguous]
    assert [(r["id"], r["amount"]) for r in refunds] == [(last["rail_entity_id"], 189_900)]
    assert rail.count_stamped(first["sik"]) == 1
    conn = open_ledger(agent_stack.stack.ledger_path, readonly=True)
    try:
        bound = conn.execute("SELECT sik FROM operation_refs WHERE operation_ref = ?", (f"ticket-{n}-2",)).fetchall()
        intents = conn.execute("SELECT state, operation_ref, task_id FROM intents WHERE subject_id = ?",
                               (ambiguous,)).fetchall()  # fmt: skip
    finally:
        conn.close()
    assert [row["sik"] for row in bound] == [first["sik"]]
    assert [tuple(row) for row in intents] == [("APPLIED", f"ticket-{n}-2", f"ticket-{n}-2")]

    # A held refund is answered to the model (WAIT_FOR_APPROVAL) and put in front of a person, once.
    assert (held_seen["state"], held_seen["caller_action"]) == ("HELD", "WAIT_FOR_APPROVAL"), held_seen
    assert len(held_sent) == 1
    assert report["escalations"] == [{"operation_ref": f"ticket-{n}-3", "tool": "create_refund",
                                      "arguments": scenarios[2]["arguments"], "caller_action": "WAIT_FOR_APPROVAL",
                                      "state": "HELD"}]  # fmt: skip
    assert [e for e in rail.entities("refund") if e["entity"]["payment_id"] == large] == []
