"""The `interlock` command line. Each subcommand group lives beside the code it drives and is
registered here, so this file stays a table of contents."""

from __future__ import annotations

import logging
import sys

import click

from interlock.errors import InterlockError


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="log at DEBUG level (to stderr)")
def cli(verbose: bool) -> None:
    """Interlock: an MCP proxy that lets an agent move money at most once, within its mandate."""
    # Every log goes to stderr: on stdio transports stdout carries only JSON-RPC.
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for chatty in ("httpx", "httpx2", "httpcore", "mcp.client"):
        logging.getLogger(chatty).setLevel(logging.WARNING)


def _register() -> None:
    from ledger.cli import audit_group

    cli.add_command(audit_group)
    from gate_workers.worker import gate_worker_command

    cli.add_command(gate_worker_command)
    from rail_worker.worker import rail_worker_command

    cli.add_command(rail_worker_command)
    from reconciler.worker import reconciler_command

    cli.add_command(reconciler_command)
    from interlock.status_cli import status_command

    cli.add_command(status_command)
    from interlock.demo import demo_command
    from interlock.up import up_command

    cli.add_command(up_command)
    cli.add_command(demo_command)
    # -- subcommands added by later packages register below this line --
    from interlock.mandate_cli import init_command, mandate_group

    cli.add_command(init_command)
    cli.add_command(mandate_group)
    from ingress.cli import ingress_command, token_group

    cli.add_command(ingress_command)
    cli.add_command(token_group)
    from sandbox.cli import sandbox_command

    cli.add_command(sandbox_command)


_register()


def main() -> None:
    try:
        cli(standalone_mode=True)
    except InterlockError as exc:
        click.echo(f"interlock: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
