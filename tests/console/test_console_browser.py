"""The console end to end in a real headless chromium: log in with the approver's own token, find the held
refund, approve it as that approver, and watch it become APPLIED — with exactly one refund on the rail. Pictures
the intent with `interlock console screenshot` (the console token: it may look) into a temporary file: the
tracked docs/console.png is rewritten only by running that command on purpose, never by a test run (which must
leave the tree clean)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect, sync_playwright

from console.cli import CHROMIUM, CHROMIUM_ARGS
from ops.holds import terms_digest
from tests.console.conftest import APPROVER, APPROVER_TOKEN, TOKEN, Console
from tests.procs import INTERLOCK

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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


def test_log_in_approve_a_held_refund_and_see_it_applied(console: Console, browser: Browser, tmp_path: Path) -> None:
    pid, sik = console.held()
    page = browser.new_page(viewport={"width": 1360, "height": 900})
    refused = page.goto(f"{console.url}/holds")
    assert refused is not None and refused.status == 401  # no token, no console
    expect(page.locator("#token")).to_be_visible()
    page.fill("#token", APPROVER_TOKEN)
    page.click("#login")
    expect(page).to_have_url(f"{console.url}/holds")
    expect(page.locator("#whoami")).to_have_text(APPROVER)
    row = page.locator(f"#hold-{sik}")
    expect(row).to_contain_text("3,500.00 INR")
    expect(row).to_contain_text(pid)
    intent = console.engine.intent(sik)
    assert intent is not None
    expect(row.locator(".terms")).to_contain_text(terms_digest(intent))  # what the approval is bound to
    approve = row.locator("form").filter(has=page.locator("button.approve"))
    expect(approve.locator("input[name=approver]")).to_have_count(0)  # nobody types who they are
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
    # The picture in docs/, taken the way a person refreshes it, but into a temporary file.
    token_file = tmp_path / "console.token"
    token_file.write_text(TOKEN, encoding="utf-8")
    out = tmp_path / "console.png"
    shot = subprocess.run([*INTERLOCK, "console", "screenshot", "--url", console.url, "--token-file", str(token_file),
                           "--page", f"/intents/acc_DEMO000001/{sik}", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert shot.returncode == 0, shot.stderr
    assert out.read_bytes().startswith(PNG_MAGIC)
