"""The console end to end in a real headless chromium: log in with the token, find the held refund,
approve it, and watch it become APPLIED — with exactly one refund on the rail. Saves docs/console.png."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect, sync_playwright

from tests.console.conftest import APPROVER, TOKEN, Console

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "console.png"


@pytest.fixture
def browser() -> Iterator[Browser]:
    if shutil.which(CHROMIUM) is None:
        # Not a skip: CI installs it (`make browser`), and a skipped browser check is a missing check.
        pytest.fail(f"{CHROMIUM} is missing; run `make browser` (apt-get install chromium)")
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()


def test_log_in_approve_a_held_refund_and_see_it_applied(console: Console, browser: Browser) -> None:
    pid, sik = console.held()
    page = browser.new_page(viewport={"width": 1360, "height": 900})
    refused = page.goto(f"{console.url}/holds")
    assert refused is not None and refused.status == 401  # no token, no console
    expect(page.locator("#token")).to_be_visible()
    page.fill("#token", TOKEN)
    page.click("#login")
    expect(page).to_have_url(f"{console.url}/holds")
    row = page.locator(f"#hold-{sik}")
    expect(row).to_contain_text("3,500.00 INR")
    expect(row).to_contain_text(pid)
    approve = row.locator("form").filter(has=page.locator("button.approve"))
    approve.locator("input[name=approver]").fill(APPROVER)
    approve.locator("input[name=reason]").fill("duplicate charge confirmed with the customer")
    approve.locator("button.approve").click()
    expect(page.locator("#msg")).to_contain_text("approved")
    # The timeline reloads itself while the intent is on its way to the rail.
    expect(page.locator("#intent-state")).to_have_text("APPLIED", timeout=30_000)
    entity = page.locator("#rail-entity").inner_text().strip()
    assert entity.startswith("rfnd_")
    expect(page.locator("#audit")).to_contain_text(APPROVER)
    expect(page.locator("#audit")).to_contain_text("HOLD_RELEASED: HELD → AUTHORIZED")
    assert console.engine.rail.count_stamped(sik) == 1
    page.goto(f"{console.url}/audit")
    expect(page.locator("#chain-status")).to_have_text("chain ok")
    page.goto(f"{console.url}/intents/acc_DEMO000001/{sik}")
    expect(page.locator("#intent-state")).to_have_text("APPLIED")
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
