"""`interlock task sign` and `interlock task signer`: what a harness attaches to a tool call, from the command
line — for trying task binding by hand and as the reference a harness in another language can compare with."""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

import click
from pydantic import ValidationError

from interlock.mandate import load_private_key
from interlock.task import new_task, public_key_b64, sign_task
from interlock.tools import MONEY_TOOLS

_TTL = re.compile(r"^(\d+)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
DEFAULT_SIGNER = "harness"


def parse_ttl(text: str) -> int:
    """A duration such as 90s, 30m, 1h or 2d, in milliseconds."""
    match = _TTL.fullmatch(text.strip())
    if match is None or int(match.group(1)) == 0:
        raise click.BadParameter(f"{text!r}: give a duration such as 90s, 30m, 1h or 2d")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


@click.group("task")
def task_group() -> None:
    """Task binding (SPEC §10): the harness-signed statement of what this call is about."""


@task_group.command("sign")
@click.option("--key", "key_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="the harness's Ed25519 private key (PEM, e.g. from `interlock mandate keygen`)")  # fmt: skip
@click.option("--merchant", "merchant_id", required=True,
              help="the one merchant whose calls may use the task (its audience, inside the signed bytes)")
@click.option("--agent", "agent_ids", required=True, multiple=True,
              help="an agent of that merchant that may present the task (repeatable)")
@click.option("--tool", required=True, type=click.Choice(sorted(MONEY_TOOLS)), help="the tool the task grants")
@click.option("--subject", "subjects", multiple=True, help="a rail id the call may act on (repeatable), e.g. pay_X")
@click.option("--order", "order_id", help="the order the payment must belong to")
@click.option("--customer", "customer_id", help="the customer the payment must belong to")
@click.option("--max-amount", type=click.IntRange(min=1), help="ceiling on the SUM moved under this task, in paise")
@click.option("--ttl", default="1h", show_default=True, help="how long the task stays valid (90s, 30m, 1h, 2d)")
@click.option("--task-id",
              help="the task's id (default: a fresh one); calls sharing it and --signer share its ceiling")
@click.option("--signer", default=DEFAULT_SIGNER, show_default=True, help="the signer id the mandate lists")
@click.option("--purpose", help="what the person asked for, in words (G5 compares the call with it when on)")
def sign_command(key_path: Path, merchant_id: str, agent_ids: tuple[str, ...], tool: str,
                 subjects: tuple[str, ...], order_id: str | None, customer_id: str | None, max_amount: int | None,
                 ttl: str, task_id: str | None,
                 signer: str, purpose: str | None) -> None:  # fmt: skip
    """Print the `_meta` block a harness attaches to the tool call (JSON): a v2 task, naming its audience."""
    key = load_private_key(key_path)
    expires_at = int(time.time() * 1000) + parse_ttl(ttl)
    try:
        task = new_task(task_id or f"task_{uuid.uuid4().hex[:16]}", expires_at, tool, merchant_id=merchant_id,
                        agent_ids=list(agent_ids), subjects=list(subjects) or None,
                        order_id=order_id, customer_id=customer_id, max_amount_minor=max_amount,
                        purpose=purpose)  # fmt: skip
    except ValidationError as exc:
        first = exc.errors()[0]
        raise click.UsageError(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    click.echo(json.dumps(sign_task(task, key, signer), indent=2))


@task_group.command("signer")
@click.option("--key", "key_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="the harness's Ed25519 private key (PEM)")  # fmt: skip
@click.option("--signer", default=DEFAULT_SIGNER, show_default=True, help="the signer id to list it under")
def signer_command(key_path: Path, signer: str) -> None:
    """Print the `task_signers` entry for the mandate (base64 of the raw public key)."""
    click.echo(f"task_signers:\n  {signer}: \"{public_key_b64(load_private_key(key_path))}\"")
