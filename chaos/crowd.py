"""A crowd of agent identities and the stack they call: each agent its own mandate (limits lifted: these
runs are about identity, concurrency and failure, not velocity) and its own bearer token, all served by one
stack with its own Redis, sandbox rail, gate workers, rail worker, reconciler and HTTP ingress."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from chaos.trial import MANDATE, TIMINGS
from deploy.agent_client import SandboxControl
from deploy.stack import Stack
from ingress.tokens import token_sha256


def token_of(name: str) -> str:
    return f"crowd-token-{name}"


def identities(data: Path, names: list[str], token: Callable[[str], str] = token_of) -> Path:
    """A mandate per agent under data/mandates and the tokens file naming them; returns the tokens file."""
    (data / "mandates").mkdir(parents=True, exist_ok=True)
    example = yaml.safe_load(MANDATE.read_text(encoding="utf-8"))
    lines = ["agents:"]
    for name in names:
        mandate = {**example, "agent_id": name, "mandate_id": f"mnd_{name}"}
        mandate["limits"] = {"windows": [], "fee_budgets": {}}
        (data / "mandates" / f"{name}.yaml").write_text(yaml.safe_dump(mandate), encoding="utf-8")
        lines.append(f"  {name}: {{token_sha256: {token_sha256(token(name))}}}")
    tokens = data / "tokens.yaml"
    tokens.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tokens


@dataclass
class Crowd:
    stack: Stack
    tokens: Path
    url: str = ""  # the ingress's MCP endpoint, once started
    control: SandboxControl | None = None

    @classmethod
    def prepare(cls, data: Path, names: list[str], *, gate_workers: int = 2) -> Crowd:
        """A fresh data directory with the identities; nothing started yet."""
        shutil.rmtree(data, ignore_errors=True)
        tokens = identities(data, names)
        stack = Stack(data, env={"INTERLOCK_MANDATE_DIR": str(data / "mandates"), **TIMINGS}, gate_workers=gate_workers)
        return cls(stack, tokens)

    def start(self, *, seed: int) -> Crowd:
        stack = self.stack
        stack.start_redis()
        sandbox = stack.start_sandbox(seed=seed)  # first: the ingress refuses to start without the rail's settings
        self.url = stack.start_ingress(tokens_file=self.tokens, wait=False)
        stack.start_engine()
        stack.wait_for_ingress()
        self.control = SandboxControl(sandbox, stack.env["INTERLOCK_RAIL_KEY_ID"],
                                      stack.env["INTERLOCK_RAIL_KEY_SECRET"])  # fmt: skip
        return self

    def payments(self, prefix: str, count: int, amount: int = 500_000) -> list[str]:
        assert self.control is not None
        ids = [f"{prefix}{i}" for i in range(count)]
        for pid in ids:
            self.control.add_payment(pid, amount)
        return ids
