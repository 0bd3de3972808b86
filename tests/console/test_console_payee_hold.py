"""In the console, a payout held for a payee on no list (ADR 0034) shows the fund account as the rail reports it
beside the call's terms, and offers to add the payee for later calls only as an explicit checkbox: ticked, the
release records PAYEE_ALLOWED; a payout to a listed payee held for its amount shows its payee but no checkbox."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import httpx

from sandbox.rail import DEFAULT_ACCOUNT_NUMBER
from tests.console.conftest import APPROVER_TOKEN, TOKEN
from tests.engine.conftest import Engine
from tests.engine.test_payouts import _fund_account_id, payout
from tests.mandates import MERCHANT, write_mandate
from tests.ops.conftest import write_approvers


def test_the_hold_queue_shows_the_payee_and_its_checkbox_adds_it(engine_factory: Callable[..., Engine],
                                                                   tmp_path: Path) -> None:  # fmt: skip
    listed, stranger = _fund_account_id("L"), _fund_account_id("S")
    mandate = write_mandate(tmp_path / "hold-unlisted.yaml", {
        "scope.grants.create_payout.payees": {"fund_account_ids": [listed], "unlisted": "hold"},
        "rail.account_number": DEFAULT_ACCOUNT_NUMBER,
    })  # fmt: skip
    engine = engine_factory(env={"INTERLOCK_MANDATE": str(mandate), "INTERLOCK_CLOCK_SKEW_MS": "0"})
    engine.rail.add_fund_account(listed)
    engine.rail.add_fund_account(stranger)
    engine.rail.set_banking_balance(5_000_000)
    url = engine.stack.start_console(token=TOKEN, approvers=write_approvers(engine.stack.data_dir / "approvers.yaml"))
    unlisted = engine.outcome(engine.propose(payout(stranger, 48_000), tool="create_payout"))
    big = engine.outcome(engine.propose(payout(listed, 350_000), tool="create_payout"))
    assert (unlisted.state, unlisted.reason_code, big.state) == ("HELD", "G2_PAYEE_UNLISTED_HELD", "HELD")
    assert unlisted.sik is not None and big.sik is not None
    with httpx.Client(base_url=url, follow_redirects=False) as http:
        assert http.post("/login", data={"token": APPROVER_TOKEN, "next": "/holds"}).status_code == 303
        page = http.get("/holds").text
        row = page.split(f'id="hold-{unlisted.sik}"', 1)[1].split("</tr>", 1)[0]
        assert "Sandbox Payee " in row and "IFSC <span class=\"mono\">HDFC0000053</span>" in row
        assert "on no list of the mandate" in row and re.search(r"account <span class=\"mono\">x+\d{4}</span>", row)
        box = re.search(r'name="allow_payee" value="([0-9a-f]{16})"', row)
        assert box is not None, row
        big_row = page.split(f'id="hold-{big.sik}"', 1)[1].split("</tr>", 1)[0]
        assert "Sandbox Payee " in big_row and "allow_payee" not in big_row  # listed: nothing to add
        form = {name: re.search(rf'name="{name}" value="([^"]*)"', row).group(1)  # type: ignore[union-attr]
                for name in ("csrf", "terms", "mandate_hash", "amount_minor")}  # fmt: skip
        done = http.post(f"/holds/{MERCHANT}/{unlisted.sik}/approve",
                         data={**form, "allow_payee": box.group(1), "reason": "new vendor"})  # fmt: skip
        assert done.status_code == 303 and "added%20to%20the%20mandate" in done.headers["location"], done.headers
    engine.settle(unlisted.sik, {"APPLIED"})
    conn = engine.ledger()
    try:
        [record] = [json.loads(r[0]) for r in conn.execute(
            "SELECT payload_json FROM audit_log WHERE kind = 'PAYEE_ALLOWED'")]  # fmt: skip
    finally:
        conn.close()
    assert (record["fund_account_id"], record["payee_digest"]) == (stranger, box.group(1))
    later = engine.outcome(engine.propose(payout(stranger, 21_000), tool="create_payout"))
    assert later.state == "APPLIED", later
