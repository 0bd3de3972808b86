"""Guards of rail_worker/execute.py and rail_worker/lease.py that no other test would miss (issue 17, item 7):
each test here fails when the guard it names is deleted. In-process, over a real SQLite ledger, with the
scripted rail and the injectable clock of tests/engine/send_world.py.

Guards of these two files covered elsewhere, in tests/engine/test_send_side_fences.py (checked by deleting them):
* the lease fence at attempt start (`leases.heartbeat` in `_begin`):
  test_a_lock_wait_past_the_lease_starts_no_attempt_and_sends_nothing
* "state is not AUTHORIZED" (a redelivered execute job) and the fenced answer kept as evidence (`record_fenced`):
  test_a_fenced_applied_answer_settles_the_intent_instead_of_a_second_settlement
* boot recovery of an older epoch's IN_FLIGHT row:
  test_boot_takes_an_earlier_epochs_row_once_its_lease_and_deadline_are_over
"""

from __future__ import annotations

from typing import Any

import pytest

from interlock.errors import AuditChainBroken
from ledger import audit, leases
from ledger.db import open_ledger
from ledger.states import State
from rail_worker import execute as execute_module
from rail_worker import lease as lease_module
from rail_worker.execute import execute
from rails.models import Settlement
from rails.razorpay import RailError, RailErrorKind
from tests.engine import send_world
from tests.engine.send_world import REFUND, SETTLEMENT, ScriptedRail, World
from tests.mandates import MERCHANT

SIK = "S" * 32
world = send_world.world  # the fixture: one world per commit mode



class CountingRail(ScriptedRail):
    """Counts every request handed to the rail client, before the client's own send-window check."""

    handed: int = 0

    def create_instant_settlement(self, amount: int | None = None, **kwargs: Any) -> Settlement:
        self.handed += 1
        return super().create_instant_settlement(amount, **kwargs)


# -- the stall check between the IN_FLIGHT commit and the send ------------------------------------------------------


def test_a_worker_stalled_after_its_commit_does_not_hand_the_request_to_the_rail_client(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker decides first: the client's check at the first byte is a second line, not the only one (a rail
    # client that does not check, such as a future upstream, must never see a request whose window has closed).
    world.rail = rail = CountingRail()
    world.authorized(SETTLEMENT)
    s = world.settings
    monkeypatch.setattr("rail_worker.execute.failpoint", lambda name: world.clock.advance(
        s.lease_ttl_ms - s.rail_timeout_ms) if name == "rail.after_wal_before_call" else None)  # fmt: skip
    execute(world.runtime(), MERCHANT, SIK, request_id=None)
    assert rail.handed == 0, "the stalled worker handed its request to the rail client"
    assert world.attempts() == [(1, "NOT_SENT")]
    assert (world.intent().state, world.intent().reason_code) == (State.UNKNOWN, "RAIL_NOT_SENT_STALE")


# -- the fence on the outcome write: (lease_epoch, attempt_seq) ------------------------------------------------------


def test_a_superseded_workers_answer_does_not_overwrite_the_retry_in_flight(world: World) -> None:
    world.authorized(SETTLEMENT)
    a = world.runtime("rail:A")
    retry: dict[str, object] = {}

    def a_stalls_while_a_retry_starts() -> None:
        # A's request is out; A stalls for three TTLs. B takes the lease and recovers A's row, the reconciler
        # reads a lagging list (absent) and authorizes a retry, and B starts attempt 2: IN_FLIGHT under epoch 2.
        world.watch()
        world.clock.advance(3 * world.settings.lease_ttl_ms)
        b = world.runtime("rail:B", take_lease=False)
        lease_module.boot(b)
        world.rail.listed = False
        world.reconciler().sweep()
        world.rail.listed = True
        retry["started"] = execute_module.begin_attempt(b, MERCHANT, SIK, request_id=None)

    world.rail.during_call = a_stalls_while_a_retry_starts
    execute(a, MERCHANT, SIK, request_id=None)  # A wakes with the rail's APPLIED answer for attempt 1
    assert isinstance(retry["started"], execute_module.Started)
    intent = world.intent()
    assert (intent.state, intent.attempt_seq, intent.lease_epoch) == (State.IN_FLIGHT, 2, 2), (
        "A's answer for attempt 1 was written over attempt 2, which is still out")
    assert intent.rail_entity_id is None
    assert world.attempts() == [(1, "FENCED_APPLIED"), (2, None)], "A's answer is kept as evidence only"


# -- a receipt / idempotency-key 400 means an earlier attempt reached the rail ----------------------------------------


@pytest.mark.parametrize(("description", "field"), [
    ("The receipt has already been used for a refund of this payment", "receipt"),
    ("The idempotency key was already used with a different request body", "X-Refund-Idempotency"),
])  # fmt: skip
def test_a_400_naming_our_receipt_or_idempotency_key_is_ambiguous_not_terminal(
    world: World, description: str, field: str
) -> None:
    world.authorized(REFUND)
    world.rail.reject = RailError(RailErrorKind.REJECTED, f"400 {description}", method="POST", path="/x",
                                  http_status=400, code="BAD_REQUEST_ERROR", description=description,
                                  field=field)  # fmt: skip
    execute(world.runtime(), MERCHANT, SIK, request_id=None)
    intent = world.intent()
    assert intent.state is State.UNKNOWN, "a refusal of our own key says our refund may exist: reconcile, never fail"
    assert intent.reason_code == "RAIL_KEY_IN_USE", "and a list that does not show it yet is not absence"


def test_an_ordinary_400_on_a_first_attempt_is_terminal(world: World) -> None:
    # The control for the test above: the same 400 without our receipt or key in it is a definitive refusal.
    world.authorized(REFUND)
    world.rail.reject = RailError(RailErrorKind.REJECTED, "400", method="POST", path="/x", http_status=400,
                                  code="BAD_REQUEST_ERROR", description="The amount is invalid", field="amount")
    execute(world.runtime(), MERCHANT, SIK, request_id=None)
    assert (world.intent().state, world.intent().reason_code) == (State.FAILED_TERMINAL, "RAIL_REJECTED")


# -- boot refuses a broken audit chain --------------------------------------------------------------------------------


def test_a_rail_worker_refuses_to_boot_on_a_broken_audit_chain(world: World) -> None:
    world.authorized(SETTLEMENT)  # two audit rows: the intent proposed, then authorized
    conn = open_ledger(world.path)
    conn.execute("DROP TRIGGER audit_log_no_update")  # what someone editing the file by hand would do
    conn.execute("UPDATE audit_log SET payload_json = replace(payload_json, 'GATES_PASSED', 'GATES_HELD')")
    assert audit.verify_chain(conn) is not None
    rt = world.runtime(take_lease=False)
    with pytest.raises(AuditChainBroken):
        lease_module.boot(rt)
    assert leases.get_lease(conn, leases.RAIL_WORKER_LEASE) is None, "the lease was taken over a broken chain"
    assert world.rail.calls == []
