"""The whole stack as real processes: redis-server, the sandbox rail, gate workers, the rail worker,
the reconciler and (optionally) the HTTP ingress — each its own process, each stoppable and
killable by pid. Used by `interlock up`, the end-to-end tests and the chaos matrix.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.redis_server import EmbeddedRedis
from interlock.errors import InterlockError
from interlock.ports import free_port, port_in_use

logger = logging.getLogger(__name__)

INTERLOCK = [sys.executable, "-m", "interlock.cli"]


class StackError(InterlockError):
    """Raised when an actor of the stack does not start or become ready; names the actor and its log."""


@dataclass
class Actor:
    name: str
    args: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> Actor:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self.args, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def stop(self, timeout: float = 10.0) -> None:
        if not self.alive():
            return
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.alive():
            assert self.process is not None
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class Stack:
    """A data directory and the actors running over it. Ports are free loopback ports unless given."""

    data_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    gate_workers: int = 1
    redis_url: str | None = None
    actors: dict[str, Actor] = field(default_factory=dict)
    redis: EmbeddedRedis | None = None

    @property
    def ledger_path(self) -> Path:
        return self.data_dir / "ledger.sqlite3"

    def base_env(self) -> dict[str, str]:
        env = {**os.environ, "INTERLOCK_LEDGER": str(self.ledger_path), **self.env}
        if self.redis_url:
            env["REDIS_URL"] = self.redis_url
        return env

    def start_redis(self, port: int | None = None) -> str:
        if self.redis_url and self.redis is None:
            return self.redis_url  # REDIS_URL given: use that Redis, start none
        self.redis = EmbeddedRedis(self.data_dir / "redis", port=port).start()
        self.redis_url = self.redis.url
        return self.redis_url

    def actor(self, name: str, args: list[str], extra_env: Mapping[str, str] | None = None) -> Actor:
        env = {**self.base_env(), **(extra_env or {})}
        actor = Actor(name, [*INTERLOCK, *args], env, self.data_dir / "logs" / f"{name}.log")
        self.actors[name] = actor
        return actor

    def start_engine(self, *, kill_at: Mapping[str, str] | None = None) -> None:
        """Rail worker first (it creates the ledger and takes the lease), then gates and the reconciler.
        *kill_at* maps an actor name to the failpoint at which that one process SIGKILLs itself."""
        kill_at = kill_at or {}
        self.start_actor("rail", ["rail-worker"], kill_at.get("rail"))
        wait_for(lambda: self.ledger_path.exists(), timeout=30, what="the rail worker to create the ledger",
                 actor=self.actors["rail"])  # fmt: skip
        for i in range(1, self.gate_workers + 1):
            # No --name: RQ refuses a name a killed worker still holds, so a restart must get a fresh one.
            self.start_actor(f"gate{i}", ["gate-worker"], kill_at.get(f"gate{i}") or kill_at.get("gate"))
        self.start_actor("reconciler", ["reconciler"], kill_at.get("reconciler"))

    def start_sandbox(self, *, port: int = 0, seed: int | None = None, seed_file: Path | None = None) -> str:
        """The sandbox rail as an actor of this stack; points INTERLOCK_RAIL_* at it and returns its URL."""
        ready = self.data_dir / "sandbox" / "ready.json"
        ready.unlink(missing_ok=True)
        # The sandbox and every client read the same INTERLOCK_RAIL_KEY_* (sandbox-only defaults otherwise).
        self.env.setdefault("INTERLOCK_RAIL_KEY_ID", "rzp_test_interlock")
        self.env.setdefault("INTERLOCK_RAIL_KEY_SECRET", "interlock_sandbox_secret")
        args = ["sandbox", "--port", str(port), "--data", str(self.data_dir / "sandbox"), "--ready-file", str(ready)]
        if seed is not None:
            args += ["--seed", str(seed)]
        if seed_file is not None:
            args += ["--seed-file", str(seed_file)]
        actor = self.start_actor("sandbox", args)
        info = wait_for(lambda: read_json(ready), timeout=30, what="the sandbox rail", actor=actor)
        url = f"http://127.0.0.1:{info['port']}"
        self.env["INTERLOCK_RAIL_URL"] = url
        return url

    def start_ingress(self, *, tokens_file: Path, port: int = 0, kill_at: str | None = None, wait: bool = True) -> str:
        """The HTTP ingress; returns the MCP endpoint URL (once it accepts connections, unless not *wait*)."""
        self.env["INTERLOCK_AGENT_TOKENS"] = str(tokens_file)
        chosen = port or free_port()
        self.start_actor("ingress", ["ingress", "--http", "--host", "127.0.0.1", "--port", str(chosen)],
                         kill_at)  # fmt: skip
        if wait:
            self.wait_for_ingress()
        return f"http://127.0.0.1:{chosen}/mcp"

    def wait_for_ingress(self, timeout: float = 30) -> None:
        actor = self.actors["ingress"]
        port = int(actor.args[actor.args.index("--port") + 1])
        # Its own line, not just a listener on the port: free_port() hands out a number another process may bind
        # first (under xdist it happened), and then the agents' calls went to a stranger while the ingress died.
        # The ingress binds and listens before it logs this.
        mine = f":{port}/mcp ("
        wait_for(lambda: mine in actor.log() and port_in_use(port), timeout=timeout, what="the ingress to listen",
                 actor=actor)  # fmt: skip

    def start_console(self, *, token: str, approvers: Path | None = None, port: int = 0) -> str:
        """The operator console (optional actor), with the approvers' credentials file if given (ADR 0015);
        returns its base URL once it accepts connections."""
        self.env["INTERLOCK_CONSOLE_TOKEN"] = token
        if approvers is not None:
            self.env["INTERLOCK_APPROVERS"] = str(approvers)
        chosen = port or free_port()
        actor = self.start_actor("console", ["console", "--host", "127.0.0.1", "--port", str(chosen)])
        wait_for(lambda: port_in_use(chosen), timeout=30, what="the console to listen", actor=actor)
        return f"http://127.0.0.1:{chosen}"

    def start_upstream(self, *, overrides: Path | None = None) -> str:
        """The sandbox's MCP front (an upstream payment MCP server for proxy mode) over the sandbox rail;
        points INTERLOCK_RAIL=mcp-upstream at it and returns its URL."""
        ready = self.data_dir / "upstream.ready.json"
        ready.unlink(missing_ok=True)
        args = ["sandbox", "--mcp", "--port", "0", "--rail-url", self.env["INTERLOCK_RAIL_URL"],
                "--ready-file", str(ready)]  # fmt: skip
        if overrides is not None:
            args += ["--manifest-overrides", str(overrides)]
        actor = self.start_actor("upstream", args)
        info = wait_for(lambda: read_json(ready), timeout=30, what="the upstream MCP front", actor=actor)
        url = str(info["url"])
        self.env.update({"INTERLOCK_RAIL": "mcp-upstream", "INTERLOCK_UPSTREAM_URL": url})
        return url

    def start_actor(self, name: str, args: list[str], kill_at: str | None = None) -> Actor:
        extra = {"INTERLOCK_KILL_AT": kill_at} if kill_at else {"INTERLOCK_KILL_AT": ""}
        return self.actor(name, args, extra).start()

    def restart(self, name: str, *, kill_at: str | None = None) -> Actor:
        old = self.actors[name]
        old.stop()
        args = old.args[len(INTERLOCK):]
        return self.start_actor(name, args, kill_at)

    def stop(self) -> None:
        for name in ("console", "ingress", *[n for n in self.actors if n.startswith("gate")], "reconciler", "rail"):
            actor = self.actors.get(name)
            if actor is not None:
                actor.stop()
        for actor in self.actors.values():
            actor.stop()
        if self.redis is not None:
            self.redis.stop()

    def kill_all(self) -> None:
        """SIGKILL every actor and Redis at once (a finished chaos trial has nothing to shut down cleanly)."""
        for actor in self.actors.values():
            if actor.alive():
                os.kill(actor.pid, signal.SIGKILL)
        for actor in self.actors.values():
            if actor.process is not None:
                actor.process.wait(10)
        if self.redis is not None:
            self.redis.kill()

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_for(predicate: Callable[[], Any], *, timeout: float, what: str, actor: Actor | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if actor is not None and not actor.alive():
            raise StackError(f"{actor.name} exited ({actor.returncode()}) while waiting for {what}; "
                             f"log {actor.log_path}:\n{actor.log()[-2000:]}")  # fmt: skip
        if time.monotonic() > deadline:
            raise StackError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data
    except (OSError, ValueError):
        return None
