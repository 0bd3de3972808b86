"""Approvers authenticate individually (issue 25 item 9, ADR 0015): an approval comes from a person who proved who
they are with their own credential, records that identity, names the terms digest and mandate it approves, and
is used once."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from interlock.errors import ConfigError, OperatorRefused
from ledger.db import open_ledger
from ledger.states import State
from ops import holds
from ops.approvers import ApproverTable, token_sha256
from tests.ops.conftest import (
    APPROVER,
    APPROVER_TOKEN,
    HELD_AMOUNT,
    OTHER,
    OTHER_TOKEN,
    Operated,
    write_approvers,
)


def _transitions(operated: Operated, sik: str, event: str) -> list[dict]:
    conn = open_ledger(operated.engine.stack.ledger_path, readonly=True)
    try:
        rows = conn.execute("SELECT payload_json FROM audit_log WHERE json_extract(payload_json, '$.sik') = ? "
                            "AND json_extract(payload_json, '$.event') = ? ORDER BY seq", (sik, event)).fetchall()
        return [json.loads(r[0]) for r in rows]
    finally:
        conn.close()


def _cli(operated: Operated, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    approvers = operated.engine.stack.data_dir / "approvers.yaml"  # written by ops_context_for
    env = {**operated.engine.stack.base_env(), "INTERLOCK_APPROVERS": str(approvers)}
    env.pop("INTERLOCK_APPROVER_TOKEN", None)
    if token is not None:
        env["INTERLOCK_APPROVER_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "interlock.cli", *args], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)  # fmt: skip


def test_the_cli_refuses_a_listed_approver_who_does_not_present_their_own_credential(operated: Operated) -> None:
    pid, sik = operated.held()
    approve = ("holds", "approve", sik, "--as", APPROVER, "--terms", operated.digest(sik), "--reason", "checked")
    bare = _cli(operated, *approve)  # the name alone: what `--as` used to be enough for
    assert bare.returncode == 2 and "must authenticate" in bare.stderr, bare.stderr
    # Another person's real credential does not make them the approver the mandate names.
    borrowed = _cli(operated, *approve, token=OTHER_TOKEN)
    assert borrowed.returncode == 2 and f"not {APPROVER!r}'s credential" in borrowed.stderr, borrowed.stderr
    guessed = _cli(operated, *approve, token="x" * 43)
    assert guessed.returncode == 2 and "not" in guessed.stderr
    assert operated.engine.intent(sik).state is State.HELD  # type: ignore[union-attr]
    assert operated.refunds_of(pid) == [] and _transitions(operated, sik, "HOLD_RELEASED") == []

    approved = _cli(operated, *approve, token=APPROVER_TOKEN)
    assert approved.returncode == 0 and "handed to the rail worker" in approved.stdout, approved.stderr
    operated.engine.settle(sik, {"APPLIED"})
    assert operated.engine.rail.count_stamped(sik) == 1
    [release] = _transitions(operated, sik, "HOLD_RELEASED")
    assert release["actor"] == APPROVER
    assert release["detail"]["credential"] == f"approver-token:{token_sha256(APPROVER_TOKEN)[:12]}"


def test_the_recorded_identity_is_the_one_the_credential_proves(operated: Operated) -> None:
    _, sik = operated.held()
    mallory = operated.approver(OTHER_TOKEN)
    assert mallory.approver_id == OTHER  # she has a credential, but the mandate does not name her
    with pytest.raises(OperatorRefused, match=f"{OTHER!r} is not an approver of mandate"):
        operated.approve(sik, approver=mallory)
    with pytest.raises(OperatorRefused, match="not an approver"):
        holds.reject(operated.ops, sik, approver=mallory, reason="no")
    operated.approve(sik, reason="checked")
    [release] = _transitions(operated, sik, "HOLD_RELEASED")
    assert release["actor"] == APPROVER and release["detail"]["credential"].startswith("approver-token:")


def test_a_removed_or_rotated_credential_decides_nothing(operated: Operated) -> None:
    _, sik = operated.held()
    presented = operated.approver()
    rotated = {APPROVER: "rotated-" + APPROVER_TOKEN, OTHER: OTHER_TOKEN}
    write_approvers(Path(str(operated.ops.settings.approvers)), rotated)
    with pytest.raises(OperatorRefused, match="no longer in INTERLOCK_APPROVERS"):
        operated.approve(sik, approver=presented)
    with pytest.raises(OperatorRefused, match="no longer in INTERLOCK_APPROVERS"):
        holds.reject(operated.ops, sik, approver=presented, reason="no")
    assert operated.engine.intent(sik).state is State.HELD  # type: ignore[union-attr]


def test_an_approval_names_the_terms_it_approves_and_another_calls_digest_is_refused(operated: Operated) -> None:
    pid, sik = operated.held(payment_amount=900_000)
    other = operated.engine.outcome(operated.engine.propose({"payment_id": pid, "amount": HELD_AMOUNT + 1}))
    assert other.state == "HELD" and other.sik is not None
    with pytest.raises(OperatorRefused, match="names the terms digest"):
        operated.approve(sik, terms_digest=" ")
    with pytest.raises(OperatorRefused, match="terms digest"):
        operated.approve(sik, terms_digest=operated.digest(other.sik))  # what the approver saw was the other call
    wrong_mandate = holds.Expected(mandate_hash="0" * 64)
    with pytest.raises(OperatorRefused, match="mandate_hash"):
        operated.approve(sik, expected=wrong_mandate)
    assert {operated.engine.intent(s).state for s in (sik, other.sik)} == {State.HELD}  # type: ignore[union-attr]
    assert operated.refunds_of(pid) == []


def test_a_held_call_changed_since_the_approver_saw_it_is_refused(operated: Operated) -> None:
    pid, sik = operated.held()
    seen = operated.digest(sik)
    conn = open_ledger(operated.engine.stack.ledger_path)
    try:  # the row under the SIK is not the call that was shown (edited behind Interlock's back)
        with conn:
            conn.execute("UPDATE intents SET params_hash = ? WHERE sik = ?", ("f" * 64, sik))
    finally:
        conn.close()
    with pytest.raises(OperatorRefused, match="terms digest"):
        operated.approve(sik, terms_digest=seen)
    assert operated.engine.intent(sik).state is State.HELD  # type: ignore[union-attr]
    assert operated.refunds_of(pid) == []


def test_an_approval_is_used_once_even_when_two_arrive_together(operated: Operated) -> None:
    pid, sik = operated.held()
    digest, approver = operated.digest(sik), operated.approver()
    start = threading.Barrier(2)
    outcomes: list[str] = []

    def decide() -> None:
        start.wait()
        try:
            operated.approve(sik, approver=approver, terms_digest=digest, reason="same click, twice")
            outcomes.append("released")
        except OperatorRefused as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=decide) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(o if o == "released" else "refused" for o in outcomes) == ["refused", "released"], outcomes
    assert "not HELD" in next(o for o in outcomes if o != "released")
    operated.engine.settle(sik, {"APPLIED"})
    with pytest.raises(OperatorRefused, match="not HELD"):  # and again later: the hold was left once
        operated.approve(sik, approver=approver, terms_digest=digest)
    assert len(_transitions(operated, sik, "HOLD_RELEASED")) == 1
    assert operated.engine.rail.count_stamped(sik) == 1 and len(operated.refunds_of(pid)) == 1


def test_without_an_approvers_file_nobody_can_decide(operated: Operated) -> None:
    _, sik = operated.held()
    bare = operated.ops.__class__(operated.ops.settings.model_copy(update={"approvers": None}))
    with pytest.raises(ConfigError, match="INTERLOCK_APPROVERS is not set"):
        operated.approve(sik, ops=bare)
    assert operated.engine.intent(sik).state is State.HELD  # type: ignore[union-attr]


# -- the credentials file ------------------------------------------------------------------------------------


def test_the_file_keeps_only_hashes_and_a_token_proves_exactly_one_approver(tmp_path: Path) -> None:
    path = write_approvers(tmp_path / "approvers.yaml")
    assert APPROVER_TOKEN not in path.read_text() and token_sha256(APPROVER_TOKEN) in path.read_text()
    table = ApproverTable.load(path)
    assert table.authenticate(APPROVER_TOKEN).approver_id == APPROVER  # type: ignore[union-attr]
    assert table.authenticate(OTHER_TOKEN).approver_id == OTHER  # type: ignore[union-attr]
    assert table.authenticate(APPROVER_TOKEN + "x") is None and table.authenticate("") is None


@pytest.mark.parametrize(("text", "problem"), [
    (f"approvers:\n  a@x: {{token_sha256: {'a' * 64}}}\n  a@x: {{token_sha256: {'b' * 64}}}\n", "duplicate key 'a@x'"),
    (f"approvers:\n  a@x: {{token_sha256: {'a' * 64}}}\n  b@x: {{token_sha256: {'a' * 64}}}\n", "same token"),
    ("approvers:\n  a@x: {token_sha256: abc}\n", "64 lower-case hex"),
    (f"approvers:\n  a@x: {{token: {'a' * 64}}}\n", "exactly {token_sha256"),
    ("approvers: {}\n", "lists no approvers"),
    (f"agents:\n  a: {{token_sha256: {'a' * 64}}}\n", "exactly one top-level key"),
])  # fmt: skip
def test_a_malformed_credentials_file_is_refused_naming_it(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "approvers.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=problem) as caught:
        ApproverTable.load(path)
    assert str(path) in str(caught.value) and caught.value.variable == "INTERLOCK_APPROVERS"


def test_approver_new_prints_a_token_once_and_the_line_that_authenticates_it(tmp_path: Path) -> None:
    made = subprocess.run([sys.executable, "-m", "interlock.cli", "approver", "new", APPROVER], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert made.returncode == 0, made.stderr
    token = made.stdout.splitlines()[0].removeprefix("token: ")
    line = made.stdout.strip().splitlines()[-1]
    path = tmp_path / "approvers.yaml"
    path.write_text("approvers:\n" + line + "\n", encoding="utf-8")
    assert token not in path.read_text()
    assert ApproverTable.load(path).authenticate(token).approver_id == APPROVER  # type: ignore[union-attr]
