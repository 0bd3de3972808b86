"""A supervisord configuration for the whole stack, written per data directory by `interlock up`.

One [program] per actor (the Procfile's lines), restarts on crash, `numprocs` gate workers, logs
under the data directory, and an XML-RPC control port on 127.0.0.1 with a random password.
"""

from __future__ import annotations

import secrets
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Program:
    name: str
    command: list[str]
    numprocs: int = 1
    priority: int = 100
    stopwaitsecs: int = 10
    # Added to (and overriding) the stack's environment for this program only: a shard's REDIS_URL,
    # INTERLOCK_LEDGER and INTERLOCK_SHARD (SPEC §15).
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SupervisorConf:
    path: Path
    rpc_port: int
    rpc_user: str
    rpc_password: str

    @property
    def rpc_url(self) -> str:
        return f"http://{self.rpc_user}:{self.rpc_password}@127.0.0.1:{self.rpc_port}/RPC2"


def interlock(*args: str) -> list[str]:
    return [sys.executable, "-m", "interlock.cli", *args]


def _quote_env(value: str) -> str:
    # supervisord's environment= takes KEY="value" pairs; % must be doubled (it expands %(name)s).
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%") + '"'


def write_conf(data_dir: Path, programs: list[Program], env: dict[str, str], rpc_port: int) -> SupervisorConf:
    logs = data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    password = secrets.token_hex(16)
    lines = [
        "; written by `interlock up`; regenerated on every start",
        "[supervisord]",
        "nodaemon=true",
        "silent=true",
        f"logfile={logs / 'supervisord.log'}",
        f"pidfile={data_dir / 'supervisord.pid'}",
        f"childlogdir={logs}",
        "",
        "[inet_http_server]",
        f"port=127.0.0.1:{rpc_port}",
        "username=interlock",
        f"password={password}",
        "",
        "[rpcinterface:supervisor]",
        "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
        "",
    ]
    for program in programs:
        environment = ",".join(f"{k}={_quote_env(v)}" for k, v in sorted({**env, **program.env}.items()))
        lines += [
            f"[program:{program.name}]",
            "command=" + " ".join(shlex.quote(part).replace("%", "%%") for part in program.command),
            f"numprocs={program.numprocs}",
            "process_name=%(program_name)s" + ("-%(process_num)d" if program.numprocs > 1 else ""),
            f"priority={program.priority}",
            "autostart=true",
            "autorestart=true",
            "startsecs=1",
            "startretries=100",
            "stopsignal=TERM",
            f"stopwaitsecs={program.stopwaitsecs}",
            "stopasgroup=true",
            "killasgroup=true",
            "redirect_stderr=true",
            f"stdout_logfile={logs / (program.name + ('-%(process_num)d' if program.numprocs > 1 else '') + '.log')}",
            f"environment={environment}",
            "",
        ]
    path = data_dir / "supervisord.conf"
    path.write_text("\n".join(lines), encoding="utf-8")
    path.chmod(0o600)  # it carries the environment, rail credentials included
    return SupervisorConf(path, rpc_port, "interlock", password)
