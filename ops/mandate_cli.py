"""`interlock init` (the mandate wizard) and `interlock mandate keygen|sign|verify|check|pins`.

The wizard has no --yes on purpose (SPEC §11): a person reads the generated policy and its hash and
answers the final confirmation, or nothing is written.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal, TypeVar

import click
import yaml

from interlock.errors import MandateError
from interlock.fees import DEFAULT_FEE_RATE
from interlock.mandate import (
    Mandate,
    generate_keypair,
    load_mandate,
    parse_mandate,
    sign_mandate,
    signature_path,
    signature_problem,
    validate_mandate,
)
from interlock.mandate_inert import inert_settings
from interlock.tools import current_pins

DAY_MS = 86_400_000
OWN_SERVER_ID = "interlock-rest"  # provenance.server_id of pins made of Interlock's own tools
HOLD_FRACTION = Decimal("0.6")  # calls above 60% of the per-action maximum wait for a person
READ_GRANTS = ("fetch_payment", "fetch_refund", "interlock_status")
CHOICES = {
    "refunds": ("create_refund",),
    "settlements": ("create_instant_settlement",),
    "payouts": ("create_payout",),
    "both": ("create_refund", "create_instant_settlement"),
    "all": ("create_refund", "create_instant_settlement", "create_payout"),
    "read-only": (),
}
PAYEE = re.compile(r"(fa|cont)_[A-Za-z0-9]{14}")
ACCOUNT_NUMBER = re.compile(r"[0-9]{9,18}")
_ID = re.compile(r"[A-Za-z0-9_]{1,64}")
T = TypeVar("T")


def parse_amount(text: str) -> int:
    """Rupees ("5000", "5,000.50", "Rs 5000") or paise ("500000p", "500000 paise") → positive integer paise."""
    raw = text.strip().lower().replace(",", "").replace("_", "")
    paise_match = re.fullmatch(r"(\S+?)\s*(?:p|paise)", raw)
    if paise_match:
        digits = paise_match.group(1)
        if not digits.isdigit():
            raise click.BadParameter(f"{text!r}: paise are whole numbers (no decimals)")
        value = int(digits)
    else:
        rupees = re.sub(r"^(?:rs\.?|inr|₹)\s*|\s*(?:rupees|rs|inr)$", "", raw)
        if not re.fullmatch(r"\d+(?:\.\d+)?", rupees):
            raise click.BadParameter(f"{text!r} is not an amount; write rupees (5000 or 4999.50) or paise (500p)")
        try:
            amount = Decimal(rupees)
        except InvalidOperation:
            raise click.BadParameter(f"{text!r} is not an amount") from None
        if amount.as_tuple().exponent < -2:  # type: ignore[operator]
            raise click.BadParameter(f"{text!r} has more than 2 decimal places; a paisa is the smallest unit")
        value = int(amount * 100)
    if value <= 0:
        raise click.BadParameter(f"{text!r}: the amount must be more than zero")
    return value


def rupees(paise: int) -> str:
    return f"Rs {paise // 100:,}.{paise % 100:02d}"


def _ident(what: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if not _ID.fullmatch(text.strip()):
            raise click.BadParameter(f"{what} must be 1-64 characters of A-Z a-z 0-9 _")
        return text.strip()

    return check


def _matching(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if not pattern.fullmatch(text.strip()):
            raise click.BadParameter(f"must be {what}")
        return text.strip()

    return check


def _payee_ids(text: str) -> list[str]:
    ids = [part.strip() for part in text.split(",") if part.strip()]
    bad = [i for i in ids if not PAYEE.fullmatch(i)]
    if not ids or bad:
        raise click.BadParameter(f"give fund account ids (fa_ and 14 characters) or contact ids (cont_ and 14), "
                                 f"separated by commas{'; not ' + ', '.join(bad) if bad else ''}")  # fmt: skip
    return ids


def _approvers(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names or any(re.search(r"\s", name) for name in names):
        raise click.BadParameter("give one or more approvers separated by commas, e.g. ops_lead@example.com")
    return names


def build_mandate(
    *,
    merchant_id: str,
    agent_id: str,
    money_tools: tuple[str, ...],
    per_action_minor: int | None,
    daily_cap_minor: int | None,
    approvers: list[str],
    now_ms: int,
    valid_days: int,
    max_calls_per_day: int,
    purpose: str | None = None,
    hold_above_minor: int | None | Literal["default"] = "default",
    payout: Payout | None = None,
) -> Mandate:
    """Turn the wizard's answers into a validated mandate (INR, 24h window, current pins). *hold_above_minor*: calls
    above it wait for an approver ("default": HOLD_FRACTION of the per-action maximum; None: none wait)."""
    grants: dict[str, Any] = {tool: {"reversibility": "reversible"} for tool in READ_GRANTS}
    data: dict[str, Any] = {
        "v": 1,
        "mandate_id": f"mnd_{agent_id}_{time.strftime('%Y%m%d', time.gmtime(now_ms // 1000))}"[:64],
        "merchant_id": merchant_id,
        "agent_id": agent_id,
        "issued_at": now_ms,
        "expires_at": now_ms + valid_days * DAY_MS,
        "purpose": purpose or _purpose(money_tools, per_action_minor, daily_cap_minor, approvers),
        "scope": {"grants": grants},
        "limits": {},
        "idempotency": {},
        "approval": {"approvers": approvers},
    }
    if money_tools and per_action_minor is not None and daily_cap_minor is not None:
        for tool in money_tools:
            grants[tool] = {
                "reversibility": "irreversible",
                "value": {
                    "min_amount_minor": min(100, per_action_minor),  # Rs 1: smaller calls are noise or probing
                    "max_amount_minor": per_action_minor,
                    "currencies": ["INR"],
                },
            }
        window = {"window_ms": DAY_MS, "max_calls": max_calls_per_day, "max_amount_minor": daily_cap_minor}
        data["limits"]["windows"] = [{**window, "currency": "INR"}]
        if hold_above_minor == "default":
            hold_above_minor = default_hold(per_action_minor)
        if hold_above_minor is not None:
            data["approval"]["hold_above_minor"] = hold_above_minor
            data["approval"]["hold_expiry_ms"] = DAY_MS
        if "create_payout" in money_tools:
            if payout is None:
                raise MandateError("payouts are granted, so the RazorpayX account and the payees must be given")
            grants["create_payout"]["payees"] = payout.payees()
            data["rail"] = {"account_number": payout.account_number}
            # The same amount to the same payee within one day is one payout (ADR 0028).
            data["idempotency"]["create_payout"] = {"window_ms": DAY_MS}
        fee = 0
        if "create_instant_settlement" in money_tools:
            # The same settlement amount within one day is one operation (SPEC §4).
            data["idempotency"]["create_instant_settlement"] = {"window_ms": DAY_MS}
            # Enough fees to settle the whole daily cap, plus the round-up G3 projects per call (at most 2 paise).
            fee += DEFAULT_FEE_RATE.project(daily_cap_minor) + 2 * max_calls_per_day
        if "create_payout" in money_tools:
            fee += DEFAULT_FEE_RATE.project_payout() * max_calls_per_day  # each payout's fee, every call of the day
        if fee:
            data["limits"]["fee_budgets"] = {"INR": {"window_ms": DAY_MS, "max_fee_minor": fee}}
    pins = current_pins()
    data["provenance"] = {
        "server_id": OWN_SERVER_ID,
        "pinned_manifests": {tool: {"sha256": pins[tool]} for tool in grants},
    }
    return validate_mandate(data, source="interlock init")


def default_hold(per_action_minor: int) -> int:
    """The hold threshold the wizard offers: HOLD_FRACTION of the per-action maximum (at least Rs 1)."""
    return max(min(100, per_action_minor), int(per_action_minor * HOLD_FRACTION))


@dataclass(frozen=True)
class Payout:
    """The wizard's payout answers: the RazorpayX account payouts are made from, whom they may pay (fund accounts
    and contacts), and what happens to a payee on neither list (`block`, or `hold` for an approver: ADR 0034)."""

    account_number: str
    payee_ids: tuple[str, ...]
    unlisted: str = "block"

    def payees(self) -> dict[str, Any]:
        section: dict[str, Any] = {
            "fund_account_ids": [p for p in self.payee_ids if p.startswith("fa_")],
            "contact_ids": [p for p in self.payee_ids if p.startswith("cont_")],
        }
        if self.unlisted != "block":
            section["unlisted"] = self.unlisted
        return section


def _purpose(tools: tuple[str, ...], per_action: int | None, daily: int | None, approvers: list[str]) -> str:
    if not tools or per_action is None or daily is None:
        return "Read-only: look up payments, refunds and the status of earlier operations"
    what = {"create_refund": "refunds", "create_instant_settlement": "instant settlements", "create_payout": "payouts"}
    return (
        f"{' and '.join(what[t] for t in tools).capitalize()} up to {rupees(per_action)} per action and "
        f"{rupees(daily)} per day (INR); exceptions approved by {', '.join(approvers)}"
    )


def mandate_yaml(mandate: Mandate) -> str:
    body = yaml.safe_dump(mandate.model_dump(mode="json", exclude_none=True), sort_keys=False, width=1000)
    header = (
        "# Written by `interlock init`. Amounts are integer paise (100 = Rs 1.00); times are epoch milliseconds.\n"
        "# Review every line: this file is the agent's whole permission to move money.\n"
    )
    return header + body


def _prompt(text: str, proc: Callable[[str], T], **kwargs: Any) -> T:
    return click.prompt(text, value_proc=proc, **kwargs)  # type: ignore[no-any-return]


@click.command("init")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="mandate file to write")
@click.option("--merchant-id", help="the merchant account id (asked when omitted)")
@click.option("--agent-id", help="the agent this mandate is for (asked when omitted)")
@click.option("--valid-days", default=90, show_default=True, type=click.IntRange(1, 3650))
@click.option("--max-calls-per-day", default=100, show_default=True, type=click.IntRange(1, 1_000_000))
@click.option("--purpose", help="one line saying what this agent is for (generated from the answers if omitted)")
def init_command(
    out: Path,
    merchant_id: str | None,
    agent_id: str | None,
    valid_days: int,
    max_calls_per_day: int,
    purpose: str | None,
) -> None:
    """Ask what the agent may do, how much, who decides exceptions (and for payouts, from which account to whom),
    show the resulting mandate and its hash, and write it only if you say yes."""
    click.echo("Interlock mandate wizard. Your answers become the agent's whole permission to move money.")
    merchant_id = _ident("merchant_id")(merchant_id) if merchant_id else _prompt(
        "Merchant account id (e.g. acc_DEMO000001)", _ident("merchant_id")
    )
    agent_id = _ident("agent_id")(agent_id) if agent_id else _prompt(
        "Agent id (e.g. agent_support_bot)", _ident("agent_id")
    )
    asked = iter(range(1, 100))  # every question is numbered as it is asked: a skipped one takes no number
    click.echo(
        f"\n{next(asked)}. What may the agent do?\n"
        "   refunds      refund customer payments\n"
        "   settlements  pay out the settlement balance instantly (costs a fee)\n"
        "   payouts      pay vendors or people you name from a RazorpayX account (costs a fee)\n"
        "   both         refunds and instant settlements\n"
        "   all          refunds, instant settlements and payouts\n"
        "   read-only    look things up; move no money"
    )
    choice = click.prompt("   Choose", type=click.Choice(list(CHOICES)))
    tools = CHOICES[choice]
    per_action = daily = None
    hold: int | None = None
    payout: Payout | None = None
    if tools:
        per_action = _prompt(f"\n{next(asked)}. The most it may move in ONE action, in RUPEES (e.g. 5000 or 4999.50; "
                             "add p for paise: 500000p)", parse_amount)  # fmt: skip
        click.echo(f"   = {per_action} paise ({rupees(per_action)})")
        number = next(asked)
        while True:
            daily = _prompt(f"\n{number}. The daily cap across everything it does, in RUPEES (or paise with p)",
                            parse_amount)  # fmt: skip
            if daily >= per_action:
                break
            click.echo(f"Error: the daily cap must be at least the per-action maximum ({rupees(per_action)})")
        click.echo(f"   = {daily} paise ({rupees(daily)}) per 24 hours")
        offered = default_hold(per_action)
        number = next(asked)
        while True:
            answer = click.prompt(f"\n{number}. A call above how much waits for a person to approve it? In RUPEES "
                                  "(or paise with p); `none`: no call waits for its amount",
                                  default=rupees(offered))  # fmt: skip
            if answer.strip().lower() == "none":
                hold = None
                break
            try:
                hold = parse_amount(answer)
            except click.BadParameter as exc:
                click.echo(f"Error: {exc.message}")
                continue
            if hold < per_action:
                break
            click.echo(f"Error: at or above the per-action maximum ({rupees(per_action)}) no call would ever wait; "
                       "give less, or `none`")  # fmt: skip
        click.echo(f"   = calls above {rupees(hold)} wait for a person" if hold is not None else "   = none wait")
    if "create_payout" in tools:
        account = _prompt(f"\n{next(asked)}. The RazorpayX account number payouts are made from (9-18 digits)",
                          _matching(ACCOUNT_NUMBER, "9-18 digits, e.g. 7878780080316316"))  # fmt: skip
        payees = _prompt(f"\n{next(asked)}. Whom may it pay? RazorpayX fund account ids (fa_...) or contact ids "
                         "(cont_..., every account of that contact), comma-separated", _payee_ids)  # fmt: skip
        unlisted = click.prompt(f"\n{next(asked)}. A payout to anyone else: refused (block), or held for a person "
                                "who may add the payee (hold)?", type=click.Choice(["block", "hold"]),
                                default="block")  # fmt: skip
        payout = Payout(account, tuple(payees), unlisted)
    approvers = _prompt(f"\n{next(asked)}. Who approves exceptions (held calls, quarantined ones)? (comma-separated, "
                        "e.g. ops_lead@example.com)", _approvers)  # fmt: skip

    try:
        mandate = build_mandate(
            merchant_id=merchant_id,
            agent_id=agent_id,
            money_tools=CHOICES[choice],
            per_action_minor=per_action,
            daily_cap_minor=daily,
            approvers=approvers,
            now_ms=int(time.time() * 1000),
            valid_days=valid_days,
            max_calls_per_day=max_calls_per_day,
            purpose=purpose,
            hold_above_minor=hold,
            payout=payout,
        )
        text = mandate_yaml(mandate)
        # What is written must be what was shown and hashed.
        if parse_mandate(text, source=str(out)).mandate_hash != mandate.mandate_hash:
            raise MandateError("internal error: the generated YAML does not reload to the same mandate")
    except MandateError as exc:
        raise click.ClickException(str(exc)) from None

    click.echo("\n" + text)
    if mandate.approval.hold_above_minor is not None:
        click.echo(f"Calls above {rupees(mandate.approval.hold_above_minor)} wait for {', '.join(approvers)}.")
    for warning in inert_settings(mandate):
        click.echo(f"Warning: {warning}")
    click.echo(f"mandate_hash: {mandate.mandate_hash}")
    if not click.confirm("Write this mandate?", default=False):
        click.echo("Nothing written.")
        raise SystemExit(1)
    if out.exists() and not click.confirm(f"{out} already exists. Overwrite it?", default=False):
        click.echo("Nothing written.")
        raise SystemExit(1)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    click.echo(f"Wrote {out}")
    if signature_path(out).exists():
        click.echo(f"Warning: {signature_path(out)} signed the old file; sign again with `interlock mandate sign`.")


@click.group("mandate")
def mandate_group() -> None:
    """Check, sign and verify mandates (Ed25519, detached `<mandate>.sig`)."""


@mandate_group.command("keygen")
@click.option("--out", "prefix", required=True, help="writes PREFIX.key (private, 0600) and PREFIX.pub")
def keygen_command(prefix: str) -> None:
    """Create an Ed25519 key pair for signing mandates."""
    private, public = Path(prefix + ".key"), Path(prefix + ".pub")
    with _mandate_errors():
        generate_keypair(private, public)
    click.echo(f"private key: {private} (keep it off the servers)\npublic key:  {public}")


@mandate_group.command("sign")
@click.option("--key", "key_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.argument("mandate_path", type=click.Path(dir_okay=False, path_type=Path))
def sign_command(key_path: Path, mandate_path: Path) -> None:
    """Sign MANDATE_PATH with a private key, writing MANDATE_PATH.sig."""
    with _mandate_errors():
        out = sign_mandate(mandate_path, key_path)
        mandate = load_mandate(mandate_path)
    click.echo(f"signed {mandate_path} (mandate_hash {mandate.mandate_hash}) -> {out}")


@mandate_group.command("verify")
@click.option("--pubkey", "pubkeys", required=True, multiple=True, type=click.Path(dir_okay=False, path_type=Path))
@click.argument("mandate_path", type=click.Path(dir_okay=False, path_type=Path))
def verify_command(pubkeys: tuple[Path, ...], mandate_path: Path) -> None:
    """Exit 0 when MANDATE_PATH.sig verifies with one of the public keys, 1 otherwise."""
    with _mandate_errors():
        mandate = load_mandate(mandate_path)
        problem = signature_problem(mandate, mandate_path, list(pubkeys))
    if problem is not None:
        click.echo(f"signature BAD: {problem}", err=True)
        raise SystemExit(1)
    click.echo(f"signature ok (mandate_hash {mandate.mandate_hash})")


@mandate_group.command("check")
@click.option("--pubkey", "pubkeys", multiple=True, type=click.Path(dir_okay=False, path_type=Path))
@click.argument("mandate_path", type=click.Path(dir_okay=False, path_type=Path))
def check_command(pubkeys: tuple[Path, ...], mandate_path: Path) -> None:
    """Validate MANDATE_PATH, print its hash, compare its pins with Interlock's current tools, and warn about each
    setting that can never act (a hold threshold no call reaches, a maximum a window never lets through, ...)."""
    with _mandate_errors():
        mandate = load_mandate(mandate_path, pubkeys=list(pubkeys) or None)
    click.echo(f"ok: {mandate.mandate_id} for agent {mandate.agent_id} of merchant {mandate.merchant_id}")
    click.echo(f"mandate_hash: {mandate.mandate_hash}")
    provenance = mandate.provenance
    if provenance.manifest_sha256 is not None:
        click.echo(f"manifest_sha256: {provenance.manifest_sha256} (recorded; G6 judges each tool's own pin)")
    click.echo(f"task_binding: {mandate.task_binding}" + (f", signers: {', '.join(sorted(mandate.task_signers))}"
                                                          if mandate.task_signers else ""))  # fmt: skip
    drift = False
    pins = current_pins()
    # Pins made for an upstream MCP server (proxy mode, e.g. the seed's razorpay-mcp) are of that server's
    # definitions: G6 compares them with what it serves; they say nothing about Interlock's own tools.
    upstream = provenance.server_id not in (None, OWN_SERVER_ID)
    for tool in mandate.scope.grants:
        pinned = mandate.pin(tool)
        tier = mandate.trust_tier(tool)
        suffix = f" (trust_tier {tier})" if tier is not None else ""
        if pinned is None:
            click.echo(f"  {tool}: unpinned")
        elif upstream:
            click.echo(f"  {tool}: pinned {pinned} for upstream {provenance.server_id}{suffix}")
        elif pinned != pins[tool]:
            drift = True
            click.echo(f"  {tool}: DRIFT, pinned {pinned} but the tool now hashes to {pins[tool]} (G6 would block)")
        else:
            click.echo(f"  {tool}: pinned{suffix}")
    for warning in inert_settings(mandate):
        click.echo(f"warning: {warning}")
    if drift:
        raise SystemExit(1)


@mandate_group.command("pins")
def pins_command() -> None:
    """Print the current pins of Interlock's own tools as a mandate `provenance` section."""
    pins = {name: {"sha256": digest} for name, digest in current_pins().items()}
    click.echo(yaml.safe_dump({"provenance": {"server_id": OWN_SERVER_ID, "pinned_manifests": pins}},
                              sort_keys=False), nl=False)


@contextmanager
def _mandate_errors() -> Iterator[None]:
    """Turn a MandateError into a clean CLI error (exit 1) instead of a traceback."""
    try:
        yield
    except MandateError as exc:
        raise click.ClickException(str(exc)) from None
