"""Applied money followed to the bank's final word (issue 27 item 3), as real processes: the sandbox answers a refund
`pending` and a settlement `created` and moves each on later (--lifecycle-ms), delivering its webhooks to the real
receiver; the reconciler follows every APPLIED intent from its answer, the webhooks and its own fetches, and records
the rail's status in the ledger, where interlock_status, `interlock status` and the metrics read it.

A refund the bank failed stays APPLIED (the rail accepted the call: the money machine's word stands) and is raised for
a person: interlock_status answers ESCALATE_TO_OPERATOR and the attention gauge counts it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from ingress.status import _lookup
from ledger import lifecycle
from ops.metrics import ShardSource, build_registry
from sandbox.testing import SandboxProcess, start_sandbox
from tests.engine.conftest import Engine
from tests.engine.test_webhook_settles import SECRET, receiver  # noqa: F401 (the module's receiver process)
from tests.mandates import MERCHANT
from tests.procs import wait_until

LIFECYCLE_MS = 400


@pytest.fixture(scope="module")
def rail_sandbox(tmp_path_factory: pytest.TempPathFactory, receiver: tuple[str, Path]) -> Iterator[SandboxProcess]:  # noqa: F811
    url, _ = receiver
    env = {"INTERLOCK_SANDBOX_WEBHOOK_URL": url, "INTERLOCK_WEBHOOK_SECRETS": SECRET,
           "INTERLOCK_SANDBOX_LIFECYCLE_MS": str(LIFECYCLE_MS)}  # fmt: skip
    with start_sandbox(tmp_path_factory.mktemp("rail"), env=env) as rail:
        yield rail


def followed(engine: Engine, sik: str, statuses: set[str], timeout_s: float = 60) -> lifecycle.RailStatus:
    def seen() -> lifecycle.RailStatus | None:
        conn = engine.ledger()
        try:
            row = lifecycle.current(conn, MERCHANT, sik)
        finally:
            conn.close()
        return row if row is not None and row.status in statuses else None

    try:
        result: lifecycle.RailStatus = wait_until(seen, timeout=timeout_s, what=f"{sik} followed to {statuses}")
    except AssertionError:
        raise AssertionError(f"{sik} not followed to {statuses}; logs:\n{engine.logs()}") from None
    return result


def history(engine: Engine, sik: str) -> list[tuple[str, str]]:
    conn = engine.ledger()
    try:
        return [(h["status"], h["source"]) for h in lifecycle.history(conn, MERCHANT, sik) if h["taken"] == "moved"]
    finally:
        conn.close()


def test_refunds_followed_by_webhook_to_processed_and_failed(engine_factory: Callable[..., Engine],
                                                             receiver: tuple[str, Path]) -> None:  # noqa: F811
    engine = engine_factory(env={"INTERLOCK_WEBHOOK_SECRETS": SECRET, "INTERLOCK_WEBHOOK_INBOX": str(receiver[1])})
    ok = engine.outcome(engine.propose({"payment_id": engine.payment(), "amount": 10000}))
    assert ok.state == "APPLIED" and ok.sik is not None
    done = followed(engine, ok.sik, {"processed", "failed"})
    assert (done.status, done.final, done.attention) == ("processed", True, None)
    # The answer said pending; the webhook (first, long before the poller's first fetch a minute on) said processed.
    assert history(engine, ok.sik) == [("pending", "answer"), ("processed", "webhook")]

    engine.rail.set_faults([{"name": "refund_bank_failure", "rate": 1.0}])
    bad = engine.outcome(engine.propose({"payment_id": engine.payment(), "amount": 20000}))
    assert bad.state == "APPLIED" and bad.sik is not None
    failed = followed(engine, bad.sik, {"processed", "failed"})
    assert (failed.status, failed.attention) == ("failed", lifecycle.REFUND_FAILED)
    assert engine.intent(bad.sik).state.value == "APPLIED"  # type: ignore[union-attr]

    answer = _lookup(engine.stack.ledger_path, MERCHANT, bad.sik, None)
    assert answer["state"] == "APPLIED" and answer["caller_action"] == "ESCALATE_TO_OPERATOR"
    assert answer["rail_status"]["attention"] == "REFUND_FAILED"
    exposition = generate_latest(build_registry([ShardSource("s0", engine.stack.ledger_path, None)])).decode()
    assert 'interlock_rail_attention{reason="REFUND_FAILED",shard="s0"} 1.0' in exposition


def test_settlements_followed_by_polling_alone_to_processed_and_reversed(
        engine_factory: Callable[..., Engine]) -> None:  # fmt: skip
    engine = engine_factory(env={"INTERLOCK_LIFECYCLE_POLL_MS": "200"})  # no inbox: the poller is all there is
    engine.rail.set_balance(10_000_000)
    ok = engine.outcome(engine.propose({"amount": 50000}, tool="create_instant_settlement"))
    assert ok.state == "APPLIED" and ok.sik is not None
    done = followed(engine, ok.sik, {"processed", "reversed"})
    assert (done.status, done.attention, done.source) == ("processed", None, "poll")
    assert done.amounts["amount_settled"] > 0

    engine.rail.set_faults([{"name": "settlement_reversed", "rate": 1.0}])
    back = engine.outcome(engine.propose({"amount": 60000}, tool="create_instant_settlement"))
    assert back.state == "APPLIED" and back.sik is not None
    reversed_ = followed(engine, back.sik, {"processed", "reversed"})
    assert (reversed_.status, reversed_.attention) == ("reversed", lifecycle.SETTLEMENT_REVERSED)
    assert reversed_.amounts["amount_reversed"] > 0
