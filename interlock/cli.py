"""The `interlock` command line. Each subcommand group lives beside the code it drives and is
registered here, so this file stays a table of contents.

Every actor process starts through this CLI, so it is also where each one learns to show its threads: on
STACKS_SIGNAL (SIGUSR1) an actor writes every thread's stack to its stderr, which is its log under a stack
(the chaos pause trial asks a woken rail worker that has not stopped for them)."""

from __future__ import annotations

import faulthandler
import importlib
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import click

from interlock.errors import InterlockError


class LazyGroup(click.Group):
    """Subcommands imported only when invoked: every actor process starts through this CLI, and
    importing every package (the MCP SDK alone takes a second) would slow each start."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy and name not in self.commands:
            module, _, attr = self.lazy[name].partition(":")
            command = getattr(importlib.import_module(module), attr)
            self.add_command(command() if not isinstance(command, click.Command) else command, name)
        return super().get_command(ctx, name)


# What a hung actor can be asked for: `kill -USR1 <pid>` writes every thread's stack to its stderr (its log).
STACKS_SIGNAL = signal.SIGUSR1

# name -> "module:attribute" (a click command, or a function returning one). One line per command.
COMMANDS: dict[str, str] = {
    "audit": "ops.audit_cli:audit_group",
    "gate-worker": "gate_workers.worker:gate_worker_command",
    "rail-worker": "rail_worker.worker:rail_worker_command",
    "reconciler": "reconciler.worker:reconciler_command",
    "status": "ops.status_cli:status_command",
    "shards": "ops.shards_cli:shards_group",
    "up": "deploy.up:up_command",
    "demo": "deploy.demo:demo_command",
    "init": "ops.mandate_cli:init_command",
    "mandate": "ops.mandate_cli:mandate_group",
    "ingress": "ingress.cli:ingress_command",
    "token": "ingress.cli:token_group",
    "manifest": "ingress.manifest_cli:manifest_group",
    "sandbox": "sandbox.cli:sandbox_command",
    "task": "ops.task_cli:task_group",
    "holds": "ops.cli:holds_group",
    "approver": "ops.approvers_cli:approver_group",
    "quarantine": "ops.cli:quarantine_group",
    "attention": "ops.cli:attention_group",
    "metrics": "ops.cli:metrics_command",
    "console": "console.cli:console_command",
    "chaos": "chaos.cli:chaos_command",
    # -- subcommands added by later packages register below this line --
    "bench": "bench.cli:bench_group",
    "fuzz": "chaos.cli:fuzz_command",
    "simulate": "simulation.cli:simulate_command",
    "webhooks": "webhooks.cli:webhooks_command",
}


# An operator's commands: each reads the settings of the stack `interlock up` started in --data (interlock.stack_env)
# for whatever the environment does not set. The actors, `up` itself and the tools that start stacks of their own
# never do: they are given their environment.
OPERATOR_COMMANDS = frozenset({"audit", "status", "shards", "holds", "approver", "quarantine", "attention",
                               "metrics", "token", "mandate", "task", "console", "demo"})  # fmt: skip


@click.group(cls=LazyGroup, lazy=COMMANDS)
@click.option("-v", "--verbose", is_flag=True, help="log at DEBUG level (to stderr)")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=Path("data"),
              envvar="INTERLOCK_DATA", show_default=True,
              help="where `interlock up` keeps the stack; an operator's command reads its settings (stack.env) for "
              "every variable the environment does not set")  # fmt: skip
@click.option("--shard", default=None, envvar="INTERLOCK_DATA_SHARD",
              help="with `interlock up --shards`: the shard whose settings an operator's command reads")
@click.pass_context
def cli(ctx: click.Context, verbose: bool, data: Path, shard: str | None) -> None:
    """Interlock: an MCP proxy that lets an agent move money at most once, within its mandate."""
    if ctx.invoked_subcommand in OPERATOR_COMMANDS:
        from interlock.stack_env import fill_from_stack

        fill_from_stack(os.environ, data, shard)
    # Every actor process starts here, so this is the one place a stack dump on STACKS_SIGNAL is installed. Written
    # by the C handler itself: it works while the main thread is blocked, or holds the GIL in a C call.
    try:
        faulthandler.register(STACKS_SIGNAL, file=sys.stderr, all_threads=True)
    except (AttributeError, ValueError):  # a stderr without a file descriptor (click's CliRunner): no actor
        pass
    # Every log goes to stderr: on stdio transports stdout carries only JSON-RPC.
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for chatty in ("httpx", "httpx2", "httpcore", "mcp.client"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    # `interlock bench perf --profile` sets INTERLOCK_PROFILE_DIR for the actors it starts (interlock/profiling.py).
    from interlock.profiling import start_from_env

    start_from_env()


def main() -> None:
    try:
        cli(standalone_mode=True)
    except InterlockError as exc:
        click.echo(f"interlock: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
