"""A console session is what the server says it is (issue 46 item 3, ADR 0015): a random id in the cookie, checked
against the ledger on every request. Logout revokes it, so a kept copy of the cookie — and the CSRF value its pages
carried — opens nothing afterwards; the CSRF value is bound to one session, not to the person; every console
process over the ledger, and a restarted one, agrees on which sessions are open."""

from __future__ import annotations

import re

import httpx
from starlette.testclient import TestClient

from console.auth import COOKIE, SESSION_MS
from interlock.clock import now_ms
from ledger.db import open_ledger
from ledger.states import State
from ops.context import OpsContext
from tests.console.conftest import APPROVER, APPROVER_TOKEN, OTHER_TOKEN, TOKEN, Console, in_process
from tests.mandates import MERCHANT

HTML = {"accept": "text/html"}


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None, page
    return found.group(1)


def _hold_form(page: str, sik: str) -> dict[str, str]:
    row = page.split(f'id="hold-{sik}"', 1)[-1].split("</tr>", 1)[0]
    fields = {name: re.search(rf'name="{name}" value="([^"]*)"', row) for name in ("terms", "mandate_hash",
                                                                                  "amount_minor")}  # fmt: skip
    return {"csrf": _csrf(page), **{k: v.group(1) for k, v in fields.items() if v is not None}}


def _login(http: httpx.Client | TestClient, token: str) -> str:
    login = http.post("/login", data={"token": token, "next": "/holds"})
    assert login.status_code == 303, login.text
    cookie = http.cookies.get(COOKIE)
    assert cookie
    return cookie


def test_after_logout_the_old_cookie_and_csrf_value_open_nothing(console: Console) -> None:
    _, sik = console.held()
    with httpx.Client(base_url=console.url, follow_redirects=False) as http:
        kept = _login(http, APPROVER_TOKEN)
        form = _hold_form(http.get("/holds").text, sik)
        assert f"Approve as {APPROVER}" in http.get("/holds").text
        out = http.post("/logout")
        assert out.status_code == 303 and out.headers["location"] == "/login"
    with httpx.Client(base_url=console.url, follow_redirects=False, cookies={COOKIE: kept}) as thief:
        page = thief.get("/holds", headers=HTML)
        assert page.status_code == 401 and 'id="token"' in page.text and f"Approve as {APPROVER}" not in page.text
        approve = thief.post(f"/holds/{MERCHANT}/{sik}/approve", data={**form, "reason": "after logout"})
        assert approve.status_code == 401
    assert console.engine.intent(sik).state is State.HELD  # type: ignore[union-attr]
    assert console.engine.rail.count_stamped(sik) == 0


def test_a_csrf_value_from_one_session_is_refused_in_another_session_of_the_same_person(console: Console) -> None:
    _, sik = console.held()
    with httpx.Client(base_url=console.url, follow_redirects=False) as one, \
            httpx.Client(base_url=console.url, follow_redirects=False) as two:  # fmt: skip
        _login(one, APPROVER_TOKEN)
        _login(two, APPROVER_TOKEN)
        form_one, form_two = _hold_form(one.get("/holds").text, sik), _hold_form(two.get("/holds").text, sik)
        assert form_one["csrf"] != form_two["csrf"], "each session has its own CSRF value"
        crossed = two.post(f"/holds/{MERCHANT}/{sik}/approve", data={**form_two, "csrf": form_one["csrf"]})
        assert crossed.status_code == 403 and "CSRF" in crossed.text
        assert console.engine.intent(sik).state is State.HELD  # type: ignore[union-attr]
        own = two.post(f"/holds/{MERCHANT}/{sik}/approve", data={**form_two, "reason": "duplicate charge"})
        assert own.status_code == 303 and "approved%20by" in own.headers["location"]


def test_every_console_process_over_the_ledger_agrees_on_which_sessions_are_open(ledger_ops: OpsContext) -> None:
    # Two console processes, or one before and after a restart: they share only the ledger.
    with in_process(ledger_ops) as first, in_process(ledger_ops) as second:
        cookie = _login(first, APPROVER_TOKEN)
        second.cookies.set(COOKIE, cookie)
        page = second.get("/holds", headers=HTML)
        assert page.status_code == 200 and f'<span id="whoami">{APPROVER}<' in page.text
        assert _csrf(page.text) == _csrf(first.get("/holds").text), "the CSRF value is the session's, not the process's"
        assert second.post("/logout").status_code == 303
        assert first.get("/holds", headers=HTML).status_code == 401, "revoked on one, refused by the other"


def test_an_expired_session_a_forged_id_and_a_restored_ledger_open_nothing(ledger_ops: OpsContext) -> None:
    from ops import restore

    with in_process(ledger_ops) as http:
        auth = http.app.state.auth  # type: ignore[attr-defined]
        approver = auth.principal_for_token(APPROVER_TOKEN)
        expired = auth.open_session(approver, now=now_ms() - SESSION_MS)
        http.cookies.set(COOKIE, expired)
        assert http.get("/holds", headers=HTML).status_code == 401
        live = auth.open_session(approver)
        for forged in (live[:-1] + ("A" if live[-1] != "A" else "B"), f"a.{live}.1.0"):
            http.cookies.set(COOKIE, forged)
            assert http.get("/holds", headers=HTML).status_code == 401
        http.cookies.set(COOKIE, live)
        assert http.get("/holds", headers=HTML).status_code == 200
        # A ledger restored from its replica may have lost a logout (ADR 0029): the restore ends every session.
        conn = open_ledger(ledger_ops.ledger_path)
        try:
            restore.begin(conn, now=now_ms, actor="test")
        finally:
            conn.close()
        assert http.get("/holds", headers=HTML).status_code == 401


def test_a_session_is_kept_as_the_hash_of_its_id_and_names_its_credential(ledger_ops: OpsContext) -> None:
    with in_process(ledger_ops) as http:
        cookie = _login(http, OTHER_TOKEN)
        assert OTHER_TOKEN not in cookie and TOKEN not in cookie
    conn = open_ledger(ledger_ops.ledger_path, readonly=True)
    try:
        rows = [dict(r) for r in conn.execute("SELECT * FROM console_sessions")]
    finally:
        conn.close()
    assert len(rows) == 1 and cookie not in str(rows)
    assert rows[0]["kind"] == "approver" and rows[0]["revoked_at"] is None
    assert rows[0]["expires_at"] - rows[0]["issued_at"] == SESSION_MS
