"""The settings `interlock up` started a stack with, kept where the operator's commands find them (issue 48 item 1).

`interlock up --data DIR` writes DIR/stack.env (and DIR/stack-<shard>.env with --shards): every INTERLOCK_* setting
and REDIS_URL its actors run with, one NAME=value a line, readable by its owner only — it holds the rail key and the
webhook secret, as the files beside it do. An operator's command (`interlock status`, `holds`, `quarantine`, ...)
reads it before it reads its settings, so it works right after `interlock up` / `make run` with nothing exported;
a variable set in the environment still wins. The actors never read it: `up` gives them their environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

STACK_ENV = "stack.env"
# What an operator's command needs of a stack: every Interlock setting, the Redis URL, and the loopback the rail
# client must not send through a shell's proxy (deploy/up.py sets it for a sandbox on this machine).
_KEPT = ("REDIS_URL", "NO_PROXY", "no_proxy")


def stack_env_file(data: Path, shard: str | None = None) -> Path:
    return Path(data) / (STACK_ENV if shard is None else f"stack-{shard}.env")


def write_stack_env(path: Path, env: Mapping[str, str]) -> None:
    """Write *env*'s settings (INTERLOCK_*, _KEPT) to *path*, created readable by its owner only."""
    lines = [f"{name}={value}" for name, value in sorted(env.items())
             if (name.startswith("INTERLOCK_") or name in _KEPT) and "\n" not in value]  # fmt: skip
    header = "# written by `interlock up`: the settings its actors run with; interlock's commands read it\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(header + "\n".join(lines) + "\n")
    os.chmod(path, 0o600)  # an older file of wider mode keeps its mode through O_TRUNC


def read_stack_env(path: Path) -> dict[str, str]:
    """NAME=value lines of *path*; {} when there is no such file (no stack was started there)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    found = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            found[name.strip()] = value
    return found


def fill_from_stack(environ: MutableMapping[str, str], data: Path, shard: str | None = None) -> Path | None:
    """Set in *environ* each setting of the stack started in *data* that is not set already; returns the file read,
    or None when there is none."""
    path = stack_env_file(data, shard)
    found = read_stack_env(path)
    for name, value in found.items():
        environ.setdefault(name, value)
    return path if found else None
