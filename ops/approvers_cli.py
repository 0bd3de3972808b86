"""`interlock approver new ID` (mint an approver's credential) and how the hold commands authenticate the
person running them: their own token from INTERLOCK_APPROVER_TOKEN, or typed at a hidden prompt — never a
bare name (ADR 0015)."""

from __future__ import annotations

import sys

import click

from interlock.errors import OperatorRefused
from ops.approvers import TOKEN_VARIABLE, VARIABLE, Approver, new_token, token_sha256, valid_id, yaml_entry
from ops.context import OpsContext


@click.group("approver")
def approver_group() -> None:
    """Approver credentials for the hold commands and the console (only their sha256 is ever stored)."""


@approver_group.command("new")
@click.argument("approver_id")
def approver_new(approver_id: str) -> None:
    """Print a fresh token for APPROVER_ID once, and the line to add to the INTERLOCK_APPROVERS file."""
    if not valid_id(approver_id):
        raise click.BadParameter("must be 1-254 characters of [A-Za-z0-9_.@+-]", param_hint="APPROVER_ID")
    token = new_token()
    click.echo(f"token: {token}")
    click.echo("Give it to that person only. It is shown only now; Interlock keeps only its sha256. They log in to")
    click.echo(f"the console with it, or set {TOKEN_VARIABLE} for `interlock holds approve/reject`.")
    click.echo(f"Add this under `approvers:` in the {VARIABLE} file (replacing any older line for them):")
    click.echo(yaml_entry(approver_id, token_sha256(token)))


def authenticate(ctx: OpsContext, sik: str, claimed: str) -> Approver:
    """The approver the presented token proves, refused unless it is *claimed* (`--as`)."""
    token = ctx.settings.approver_token
    if not token:
        if not sys.stdin.isatty():
            raise OperatorRefused(sik, f"{claimed!r} must authenticate: set {TOKEN_VARIABLE} to your own approver "
                                       "token (from `interlock approver new`), or run this at a terminal to be "
                                       "asked for it")  # fmt: skip
        token = click.prompt(f"approver token for {claimed}", hide_input=True, err=True)
    approver = ctx.approvers().authenticate(token.strip())
    if approver is None or approver.approver_id != claimed:
        raise OperatorRefused(sik, f"that token is not {claimed!r}'s credential in {VARIABLE}; nothing was done")
    return approver
