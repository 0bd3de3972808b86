"""The console's lock and its /metrics endpoint, over HTTP against the console process."""

from __future__ import annotations

import re

import httpx

from ledger.states import State
from tests.console.conftest import APPROVER_TOKEN, TOKEN, Console
from tests.procs import wait_until

BEARER = {"Authorization": f"Bearer {TOKEN}"}


def test_a_request_without_the_token_is_refused(console: Console) -> None:
    _, sik = console.held()
    with httpx.Client(base_url=console.url, follow_redirects=False) as http:
        page = http.get("/holds", headers={"Accept": "text/html"})
        assert page.status_code == 401 and sik not in page.text and 'name="token"' in page.text
        assert http.get("/metrics").status_code == 401
        assert http.get("/holds", headers={"Authorization": "Bearer wrong-token-wrong-token"}).status_code == 401
        forged = http.post(f"/holds/acc_DEMO000001/{sik}/approve", data={"approver": "ops_lead@example.com"})
        assert forged.status_code == 401
        assert http.post("/login", data={"token": "not-the-token", "next": "/"}).status_code == 401
        assert "interlock_console" not in http.cookies
    assert console.engine.intent(sik).state is State.HELD  # type: ignore[union-attr]


def test_an_action_without_the_form_csrf_value_is_refused(console: Console) -> None:
    _, sik = console.held()
    with httpx.Client(base_url=console.url, follow_redirects=False) as http:
        login = http.post("/login", data={"token": APPROVER_TOKEN, "next": "/holds"})
        assert login.status_code == 303 and login.headers["location"] == "/holds"
        assert http.get("/holds").status_code == 200
        posted = http.post(f"/holds/acc_DEMO000001/{sik}/approve", data={"approver": "ops_lead@example.com"})
        assert posted.status_code == 403
    assert console.engine.intent(sik).state is State.HELD  # type: ignore[union-attr]


def test_metrics_expose_the_named_series_after_a_refund(console: Console) -> None:
    engine = console.engine
    outcome = engine.outcome(engine.propose({"payment_id": engine.payment(189_900), "amount": 50_000}))
    assert outcome.state == "APPLIED"
    body = httpx.get(f"{console.url}/metrics", headers=BEARER).text
    expected = [
        # every series names its shard (SPEC §15); a stack without a shard map is shard "0"
        r'^interlock_intents\{shard="0",state="APPLIED"\} 1\.0$',
        r'^interlock_decisions_total\{reason_code="[A-Z0-9_]+",shard="0",verdict="ALLOW"\} 1\.0$',
        r'^interlock_rail_call_duration_seconds_count\{outcome="APPLIED",shard="0",tool="create_refund"\} 1\.0$',
        r'^interlock_rail_call_duration_seconds_bucket\{le="\+Inf",outcome="APPLIED",shard="0",tool="create_refund"\} '
        r'1\.0$',
        r'^interlock_reconcile_passes_total\{outcome="INCONCLUSIVE",shard="0"\} 0\.0$',
        r'^interlock_queue_depth\{queue="rail",shard="0"\} \d+\.0$',
        r'^interlock_queue_depth\{queue="gates",shard="0"\} \d+\.0$',
        r'^interlock_oldest_unknown_age_seconds\{shard="0"\} 0\.0$',
        r'^interlock_ledger_up\{shard="0"\} 1\.0$',
    ]
    for pattern in expected:
        assert re.search(pattern, body, re.MULTILINE), f"{pattern} not in:\n{body}"


def test_an_applied_refunds_page_shows_what_the_rail_said_since(console: Console) -> None:
    engine = console.engine
    outcome = engine.outcome(engine.propose({"payment_id": engine.payment(189_900), "amount": 40_000}))
    assert outcome.state == "APPLIED" and outcome.sik is not None
    with httpx.Client(base_url=console.url, headers=BEARER, timeout=10) as http:
        def followed() -> str | None:  # the reconciler takes the answer's status on its next step
            text = http.get(f"/intents/acc_DEMO000001/{outcome.sik}").text
            return text if 'id="rail-history"' in text else None

        page = wait_until(followed, timeout=60, what="the refund followed by the reconciler")
        rail_status = re.search(r'<dd id="rail-status">(.*?)</dd>', page, re.DOTALL)
        assert rail_status is not None and "processed (final)" in rail_status.group(1)
        assert "a person must decide" not in page
        assert 'id="attention"' not in http.get("/").text  # nothing the bank failed: no list
