"""In the console, a person decides as themselves (issue 25 item 9, ADR 0015): the console token only looks, an
approver logs in with their own token, the record names who logged in (never a form field), the approval names
the terms digest and mandate on the page it was made from, and a second submission is refused."""

from __future__ import annotations

import base64
import json
import re

import httpx

from ledger.states import State
from ops.holds import terms_digest
from tests.console.conftest import APPROVER, APPROVER_TOKEN, OTHER, OTHER_TOKEN, TOKEN, Console

MERCHANT = "acc_DEMO000001"


def _login(http: httpx.Client, token: str) -> None:
    login = http.post("/login", data={"token": token, "next": "/holds"})
    assert login.status_code == 303, login.text


def _form_of(page: str, sik: str) -> dict[str, str]:
    """The hidden fields of the hold's approve form, as the page drew them (or just the CSRF value)."""
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert csrf is not None, page
    fields = {"csrf": csrf.group(1)}
    row = page.split(f'id="hold-{sik}"', 1)[-1].split("</tr>", 1)[0]
    for name in ("terms", "mandate_hash", "amount_minor"):
        found = re.search(rf'name="{name}" value="([^"]*)"', row)
        if found:
            fields[name] = found.group(1)
    return fields


def _released_by(console: Console, sik: str) -> list[dict]:
    conn = console.engine.ledger()
    try:
        rows = conn.execute("SELECT payload_json FROM audit_log WHERE json_extract(payload_json, '$.sik') = ? AND "
                            "json_extract(payload_json, '$.event') = 'HOLD_RELEASED'", (sik,)).fetchall()
        return [json.loads(r[0]) for r in rows]
    finally:
        conn.close()


def test_the_console_token_looks_but_cannot_approve_as_anyone(console: Console) -> None:
    pid, sik = console.held()
    with httpx.Client(base_url=console.url, follow_redirects=False) as http:
        _login(http, TOKEN)
        page = http.get("/holds").text
        intent = console.engine.intent(sik)
        assert intent is not None
        # Everything the old form sent, with the approver the mandate names typed in.
        posted = http.post(f"/holds/{MERCHANT}/{sik}/approve",
                           data={**_form_of(page, sik), "terms": terms_digest(intent), "amount_minor": "350000",
                                 "approver": APPROVER, "reason": "trust me"})  # fmt: skip
        assert posted.status_code == 403 and "approver token" in posted.text
        assert sik in page and "approver login needed" in page  # and the page offered no form to try
    assert console.engine.intent(sik).state is State.HELD  # type: ignore[union-attr]
    assert _released_by(console, sik) == [] and console.engine.rail.count_stamped(sik) == 0
    assert [e for e in console.engine.rail.entities("refund") if e["entity"]["payment_id"] == pid] == []


def test_an_approver_decides_as_themselves_and_a_second_submission_is_refused(console: Console) -> None:
    _, sik = console.held()
    with httpx.Client(base_url=console.url, follow_redirects=False) as http:
        _login(http, APPROVER_TOKEN)
        page = http.get("/holds").text
        assert f"Approve as {APPROVER}" in page
        form = {**_form_of(page, sik), "reason": "duplicate charge", "approver": "someone.else@example.com"}
        done = http.post(f"/holds/{MERCHANT}/{sik}/approve", data=form)
        assert done.status_code == 303 and "approved%20by%20ops_lead%40example.com" in done.headers["location"]
        again = http.post(f"/holds/{MERCHANT}/{sik}/approve", data=form)  # the same form, submitted twice
        assert again.status_code == 303 and "not%20HELD" in again.headers["location"]
    console.engine.settle(sik, {"APPLIED"})
    [release] = _released_by(console, sik)
    assert release["actor"] == APPROVER and release["detail"]["credential"].startswith("approver-token:")
    assert console.engine.rail.count_stamped(sik) == 1


def test_an_approver_the_mandate_does_not_name_and_a_stale_page_are_refused(console: Console) -> None:
    _, sik = console.held()
    with httpx.Client(base_url=console.url, follow_redirects=False) as http:
        _login(http, OTHER_TOKEN)
        form = _form_of(http.get("/holds").text, sik)
        refused = http.post(f"/holds/{MERCHANT}/{sik}/approve", data=form)
        assert refused.status_code == 303 and "is%20not%20an%20approver" in refused.headers["location"]
    with httpx.Client(base_url=console.url, follow_redirects=False) as http:
        _login(http, APPROVER_TOKEN)
        form = _form_of(http.get("/holds").text, sik)
        stale_terms = http.post(f"/holds/{MERCHANT}/{sik}/approve", data={**form, "terms": "0" * 16})
        assert "terms%20digest" in stale_terms.headers["location"]
        stale_mandate = http.post(f"/holds/{MERCHANT}/{sik}/approve", data={**form, "mandate_hash": "0" * 64})
        assert "mandate_hash" in stale_mandate.headers["location"]
        no_terms = http.post(f"/holds/{MERCHANT}/{sik}/approve", data={"csrf": form["csrf"]})
        assert "names%20the%20terms%20digest" in no_terms.headers["location"]
    assert console.engine.intent(sik).state is State.HELD  # type: ignore[union-attr]
    assert _released_by(console, sik) == []


def test_a_session_cookie_names_nobody_and_cannot_be_turned_into_another_approver(console: Console) -> None:
    _, sik = console.held()
    with httpx.Client(base_url=console.url, follow_redirects=False) as http:
        _login(http, OTHER_TOKEN)
        cookie = http.cookies["interlock_console"]
        # A random session id: no token, no approver id, nothing to edit into someone else's session.
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", cookie) and OTHER_TOKEN not in cookie and TOKEN not in cookie
        assert OTHER not in cookie and base64.urlsafe_b64encode(OTHER.encode()).decode().rstrip("=") not in cookie
        assert http.get("/holds").status_code == 200
        http.cookies.clear()
        forged = APPROVER.encode().hex()[:43].ljust(43, "0")
        http.cookies.set("interlock_console", forged)
        assert http.get("/holds").status_code == 401
        http.cookies.set("interlock_console", f"c.-.1.{cookie}")  # nor into the console token's old cookie shape
        assert http.get("/holds").status_code == 401
    bearer = {"Authorization": f"Bearer {APPROVER_TOKEN}"}
    assert f"Approve as {APPROVER}" in httpx.get(f"{console.url}/holds", headers=bearer).text
    assert console.engine.intent(sik).state is State.HELD  # type: ignore[union-attr]


def test_an_approver_acknowledges_what_the_bank_said_after_applied_and_nothing_moves(console: Console) -> None:
    from ledger import lifecycle
    from ledger.db import open_ledger, transaction
    from tests.procs import wait_until

    engine = console.engine
    sik = engine.outcome(engine.propose({"payment_id": engine.payment(189_900), "amount": 30_000})).sik
    assert sik is not None

    def rail_status() -> lifecycle.RailStatus | None:
        conn = open_ledger(engine.stack.ledger_path, readonly=True)
        try:
            return lifecycle.current(conn, MERCHANT, sik)
        finally:
            conn.close()

    followed = wait_until(lambda: (r := rail_status()) is not None and r.final and r, timeout=60,
                          what="the refund followed to processed")  # fmt: skip
    conn = open_ledger(engine.stack.ledger_path)
    try:  # the bank then says the opposite: a second final status, for a person (as a webhook would bring it)
        with transaction(conn):
            lifecycle.observe(conn, merchant_id=MERCHANT, sik=sik, tool=followed.tool, entity_id=followed.entity_id,
                              status="failed", entity={"id": followed.entity_id, "status": "failed"},
                              source=lifecycle.WEBHOOK, ref="evt_console", now=followed.updated_at + 1,
                              next_poll_at=None, actor="test")  # fmt: skip
    finally:
        conn.close()
    page_url = f"/intents/{MERCHANT}/{sik}"
    with httpx.Client(base_url=console.url, follow_redirects=False) as http:
        _login(http, TOKEN)
        assert sik in http.get("/").text.split('id="attention"', 1)[-1], "listed as waiting for a person"
        page = http.get(page_url).text
        assert "CONFLICTING_FINAL: a person must decide" in page and "approver login needed to acknowledge" in page
        looked = http.post(f"{page_url}/acknowledge", data={**_form_of(page, sik), "attention": "CONFLICTING_FINAL",
                                                            "note": "the console token tries"})  # fmt: skip
        assert looked.status_code == 403
    with httpx.Client(base_url=console.url, follow_redirects=False) as http:
        _login(http, APPROVER_TOKEN)
        page = http.get(page_url).text
        raised = re.search(r'name="raised_seq" value="(\d+)"', page)
        assert raised is not None, "the form names the raising the page shows"
        form = {**_form_of(page, sik), "attention": "CONFLICTING_FINAL", "raised_seq": raised.group(1)}
        stale = http.post(f"{page_url}/acknowledge", data={**form, "raised_seq": str(int(raised.group(1)) - 1),
                                                            "note": "from a page drawn before"})  # fmt: skip
        assert stale.status_code == 303 and "raised%20again%20since" in stale.headers["location"]
        blank = http.post(f"{page_url}/acknowledge", data=form)
        assert blank.status_code == 303 and "says%20what%20is%20being%20done" in blank.headers["location"]
        done = http.post(f"{page_url}/acknowledge", data={**form, "note": "asked the bank which is true, ticket 7"})
        assert done.status_code == 303 and "acknowledged%20by%20ops_lead" in done.headers["location"]
        page = http.get(page_url).text
        assert f"CONFLICTING_FINAL, acknowledged by {APPROVER}" in page and 'id="acknowledge"' not in page
        assert 'id="attention"' not in http.get("/").text, "no longer waiting for a person"
    assert engine.intent(sik).state is State.APPLIED  # type: ignore[union-attr]
    assert engine.rail.count_stamped(sik) == 1
    conn = open_ledger(engine.stack.ledger_path, readonly=True)
    try:
        [record] = [json.loads(r[0]) for r in conn.execute(
            "SELECT payload_json FROM audit_log WHERE kind = 'RAIL_ATTENTION_ACK'")]
        assert record["operator"] == APPROVER and record["credential"].startswith("approver-token:")
    finally:
        conn.close()
