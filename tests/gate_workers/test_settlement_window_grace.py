"""ADR 0009: a settlement repeated just after its idempotency window's boundary is the same settlement —
at the gate, and authoritatively at admit when two gate workers race or one stalls."""

from __future__ import annotations

import sqlite3

import pytest

from gate_workers.context import GateContext, ResolvedAction
from gate_workers.jobs import GateRuntime, build_decision, decide
from gate_workers.resolve import resolve
from interlock.clock import now_ms
from interlock.config import Settings
from interlock.mandate import Mandate, MandateStore
from interlock.messages import Decision, Proposal, Verdict
from interlock.sik import compute_sik
from interlock.tools import current_pins
from ledger import intents
from ledger.db import open_ledger, transaction
from ledger.intents import get_intent
from ledger.states import Event
from rail_worker.admit import admit
from rail_worker.runtime import RailRuntime
from rails.models import Balance, Payment
from tests.ledger.helpers import put_intent
from tests.mandates import AGENT, MERCHANT, make_mandate

DAY = 86_400_000
BOUNDARY = 20_000 * DAY  # a midnight UTC inside the example mandate's validity
GRACE = 900_000
TOOL = "create_instant_settlement"


class BalanceRail:
    """The rail's read side as the gate sees it: a balance, and no payments."""

    def __init__(self, balance: int = 900_000) -> None:
        self.balance = balance

    def fetch_balance(self) -> Balance:
        result: Balance = Balance.from_raw({"balance": self.balance, "currency": "INR"})
        return result

    def fetch_payment(self, payment_id: str) -> Payment:
        raise AssertionError("a settlement reads no payment")


def proposal(request_id: str, *, received_at_ms: int = 0, **arguments: object) -> Proposal:
    arguments = arguments if "settle_full_balance" in arguments else {"amount": 30_000, **arguments}
    return Proposal(request_id=request_id, agent_id=AGENT, merchant_id=MERCHANT, tool=TOOL, arguments=arguments,
                    received_at_ms=received_at_ms)  # fmt: skip


def sik_in(window: int, amount: int = 30_000, distinct: str | None = None) -> str:
    return compute_sik(merchant_id=MERCHANT, tool=TOOL, subject="balance", amount_minor=amount, currency="INR",
                       window=window, distinct=distinct)  # fmt: skip


def settle_at(ledger: sqlite3.Connection, at_ms: int, *, grace_ms: int = GRACE, mandate: Mandate | None = None,
              balance: int = 900_000, **extra: object) -> ResolvedAction:  # fmt: skip
    return resolve(proposal("r", **extra), BalanceRail(balance), ledger, mandate or make_mandate(), at_ms,
                   grace_ms=grace_ms)  # fmt: skip


def put_settlement(ledger: sqlite3.Connection, sik: str, state: str) -> None:
    put_intent(ledger, sik, state, amount=30_000, subject="balance", tool=TOOL)


PREVIOUS, CURRENT = BOUNDARY // DAY - 1, BOUNDARY // DAY


@pytest.mark.parametrize("state", ["APPLIED", "UNKNOWN", "HELD", "FAILED_TERMINAL", "BLOCKED"])
def test_a_repeat_10_s_after_the_boundary_lands_on_the_first_intent_in_any_state(
    ledger: sqlite3.Connection, state: str
) -> None:
    # The repro: the first call began 5 s before midnight, was told RETRY_SAME_CALL, and has since APPLIED.
    first = settle_at(ledger, BOUNDARY - 5_000)
    assert (first.sik, first.window) == (sik_in(PREVIOUS), PREVIOUS)
    put_settlement(ledger, sik_in(PREVIOUS), state)
    repeat = settle_at(ledger, BOUNDARY + 10_000)
    assert (repeat.sik, repeat.window, repeat.grace_siks) == (first.sik, PREVIOUS, ())


def test_after_the_grace_a_settled_first_intent_no_longer_captures_the_call(ledger: sqlite3.Connection) -> None:
    put_settlement(ledger, sik_in(PREVIOUS), "APPLIED")
    last_in_grace = settle_at(ledger, BOUNDARY + GRACE - 1)
    assert last_in_grace.sik == sik_in(PREVIOUS)
    later = settle_at(ledger, BOUNDARY + GRACE)
    assert (later.sik, later.window) == (sik_in(CURRENT), CURRENT), "a new day's identical settlement is new"


def test_after_the_grace_an_unsettled_first_intent_still_captures_its_repeat(ledger: sqlite3.Connection) -> None:
    # The caller was told RETRY_SAME_CALL and still is: its repeat hours later must not pay again.
    put_settlement(ledger, sik_in(PREVIOUS), "UNKNOWN")
    assert settle_at(ledger, BOUNDARY + 6 * 3_600_000).sik == sik_in(PREVIOUS)


def test_the_grace_is_configurable_and_at_most_half_the_window(ledger: sqlite3.Connection) -> None:
    put_settlement(ledger, sik_in(PREVIOUS), "APPLIED")
    assert settle_at(ledger, BOUNDARY + 10_000, grace_ms=0).sik == sik_in(CURRENT)
    assert settle_at(ledger, BOUNDARY + 10_000, grace_ms=5_000).sik == sik_in(CURRENT)
    assert settle_at(ledger, BOUNDARY + 10_000, grace_ms=20_000).sik == sik_in(PREVIOUS)
    # A one-minute window keeps its second half for new operations, whatever the configured grace.
    minute = make_mandate({"idempotency.create_instant_settlement.window_ms": 60_000})
    minute_sik = compute_sik(merchant_id=MERCHANT, tool=TOOL, subject="balance", amount_minor=30_000,
                             currency="INR", window=BOUNDARY // 60_000 - 1)  # fmt: skip
    put_settlement(ledger, minute_sik, "APPLIED")
    assert settle_at(ledger, BOUNDARY + 29_999, mandate=minute).sik == minute_sik
    assert settle_at(ledger, BOUNDARY + 30_000, mandate=minute).sik != minute_sik


def test_a_distinct_reason_right_after_the_boundary_is_a_new_operation(ledger: sqlite3.Connection) -> None:
    put_settlement(ledger, sik_in(PREVIOUS), "APPLIED")
    second = settle_at(ledger, BOUNDARY + 10_000, interlock_distinct_reason="second payout for the new day")
    assert second.sik == sik_in(CURRENT, distinct="second payout for the new day")


def test_a_full_balance_repeat_after_the_grace_settles_the_balance_now(ledger: sqlite3.Connection) -> None:
    first = settle_at(ledger, BOUNDARY - 5_000, settle_full_balance=True)
    assert first.sik is not None and first.amount_minor == 900_000
    put_intent(ledger, first.sik, "APPLIED", amount=900_000, subject="balance", tool=TOOL, now=BOUNDARY - 4_000,
               params=first.params)  # fmt: skip
    # The balance is lower now (the first one paid out); its repeat is still that settlement.
    repeat = settle_at(ledger, BOUNDARY + 10_000, balance=400_000, settle_full_balance=True)
    assert (repeat.sik, repeat.amount_minor) == (first.sik, 900_000)
    # Next day, past the grace: "everything" is today's balance read, not yesterday's amount.
    later = settle_at(ledger, BOUNDARY + 2 * GRACE, balance=400_000, settle_full_balance=True)
    assert (later.amount_minor, later.window) == (400_000, CURRENT)


def test_a_decision_names_the_same_call_in_the_adjacent_window(ledger: sqlite3.Connection) -> None:
    # The previous window's SIK always — in the grace or past it, the rail worker judges which applies at admit
    # (the first call may still be queued) — and the next one always: a first call may stall past the boundary.
    in_grace, past_grace = settle_at(ledger, BOUNDARY + 10_000), settle_at(ledger, BOUNDARY + 6 * 3_600_000)
    for action in (in_grace, past_grace):
        assert (action.previous_sik, action.grace_siks) == (sik_in(PREVIOUS), (sik_in(CURRENT + 1),))
    before = settle_at(ledger, BOUNDARY - 5_000)
    assert (before.previous_sik, before.grace_siks) == (sik_in(PREVIOUS - 1), (sik_in(CURRENT),))
    assert (in_grace.received_at_ms, before.received_at_ms) == (BOUNDARY + 10_000, BOUNDARY - 5_000)


def gate_runtime(ledger: sqlite3.Connection) -> GateRuntime:
    mandate = make_mandate()
    return GateRuntime(settings=Settings(), mandates=MandateStore({AGENT: mandate}), rail=BalanceRail(),
                       ledger=ledger, redis=None, tool_hashes=current_pins())  # type: ignore[arg-type]


def test_the_window_is_the_calls_received_time_not_the_gate_workers_clock(ledger: sqlite3.Connection) -> None:
    # Received 5 s before a boundary long past; the gate worker only gets to it now (days later).
    decision = decide(proposal("r_late", received_at_ms=BOUNDARY - 5_000), gate_runtime(ledger))
    assert decision.verdict is Verdict.ALLOW, decision.reason_code
    assert (decision.sik, decision.window) == (sik_in(PREVIOUS), PREVIOUS)
    assert decision.decided_at_ms >= now_ms() - 60_000  # the gates themselves judged by the worker's clock


# -- admit: the rail worker's answer when two gate workers raced, with a real ledger file ------------------


def gated(rt: RailRuntime, request_id: str, at_ms: int) -> Decision:
    """What a gate worker decides for the call received at *at_ms*, reading the ledger as it is now."""
    gate_ledger = open_ledger(rt.ledger_path, readonly=True)
    try:
        mandate = rt.mandates.require(AGENT)
        action = resolve(proposal(request_id, received_at_ms=at_ms), BalanceRail(), gate_ledger, mandate, at_ms)
        ctx = GateContext(mandate=mandate, now_ms=now_ms(), ledger=gate_ledger, tool_hashes=current_pins())
        return build_decision(action, ctx, mandate)
    finally:
        gate_ledger.close()


def intent_count(rt: RailRuntime) -> int:
    return int(rt.ledger.execute("SELECT COUNT(*) FROM intents").fetchone()[0])


class AdmitClock:
    """The rail worker's clock at admission, set by each test: the calls' received times are around BOUNDARY."""

    def __init__(self) -> None:
        self.at = BOUNDARY + 60_000

    def __call__(self) -> int:
        return self.at


@pytest.fixture(autouse=True)
def admit_clock(monkeypatch: pytest.MonkeyPatch) -> AdmitClock:
    clock = AdmitClock()
    monkeypatch.setattr("rail_worker.admit.now_ms", clock)
    return clock


def settle_intent(rt: RailRuntime, sik: str, *, at_ms: int, state: str = "APPLIED") -> None:
    """The admitted intent's call ends in *state* at *at_ms* (what the rail worker records)."""
    steps = {"APPLIED": ["RAIL_APPLIED"], "UNKNOWN": ["RAIL_AMBIGUOUS"]}[state]
    with transaction(rt.ledger):
        intents.start_attempt(rt.ledger, MERCHANT, sik, now=at_ms, lease_owner="w", lease_epoch=1,
                              lease_expires_at=at_ms + 1000, request={})  # fmt: skip
        for step in steps:
            intents.transition(rt.ledger, MERCHANT, sik, Event(step), now=at_ms)


def test_admit_answers_a_raced_repeat_with_the_previous_windows_intent(rail_rt: RailRuntime) -> None:
    first = gated(rail_rt, "r_first", BOUNDARY - 5_000)
    repeat = gated(rail_rt, "r_repeat", BOUNDARY + 10_000)  # resolved before the first call was admitted
    assert (first.sik, repeat.sik, repeat.previous_sik) == (sik_in(PREVIOUS), sik_in(CURRENT), sik_in(PREVIOUS))
    admitted = admit(rail_rt, first)
    assert admitted.execute is not None and admitted.execute.sik == first.sik
    answer = admit(rail_rt, repeat)
    assert answer.execute is None and answer.outcome is not None
    assert (answer.outcome.sik, answer.outcome.replayed, answer.outcome.state) == (first.sik, True, "AUTHORIZED")
    assert get_intent(rail_rt.ledger, MERCHANT, sik_in(CURRENT)) is None and intent_count(rail_rt) == 1


def test_admit_answers_a_stalled_first_call_with_the_intent_its_repeat_made(rail_rt: RailRuntime) -> None:
    # The first call's gate worker stalled past the boundary; the agent's repeat was keyed and admitted first.
    first = gated(rail_rt, "r_first", BOUNDARY - 5_000)
    repeat = gated(rail_rt, "r_repeat", BOUNDARY + 10_000)
    assert admit(rail_rt, repeat).execute is not None
    late = admit(rail_rt, first)
    assert late.execute is None and late.outcome is not None
    assert (late.outcome.sik, late.outcome.replayed) == (repeat.sik, True)
    assert get_intent(rail_rt.ledger, MERCHANT, sik_in(PREVIOUS)) is None and intent_count(rail_rt) == 1


def test_admit_creates_the_new_windows_intent_when_there_is_no_earlier_one(rail_rt: RailRuntime) -> None:
    fresh = gated(rail_rt, "r_new", BOUNDARY + 10_000)
    admitted = admit(rail_rt, fresh)
    assert admitted.execute is not None and admitted.execute.sik == sik_in(CURRENT)


def test_a_first_call_in_its_own_grace_stalled_past_the_next_boundary_is_still_one_settlement(
    rail_rt: RailRuntime, admit_clock: AdmitClock,
) -> None:
    # A one-minute window (grace capped at 30 s): the first call is received 5 s into window N (inside N's own
    # grace), its Decision stalls; the agent's repeat comes 5 s into N+1 and is admitted first.
    short = make_mandate({"idempotency.create_instant_settlement.window_ms": 60_000})
    rail_rt.mandates = MandateStore({AGENT: short})

    def decided(request_id: str, at_ms: int) -> Decision:
        gate_ledger = open_ledger(rail_rt.ledger_path, readonly=True)
        try:
            action = resolve(proposal(request_id, received_at_ms=at_ms), BalanceRail(), gate_ledger, short, at_ms)
            ctx = GateContext(mandate=short, now_ms=now_ms(), ledger=gate_ledger, tool_hashes=current_pins())
            return build_decision(action, ctx, short)
        finally:
            gate_ledger.close()

    first = decided("r_first", BOUNDARY + 5_000)
    repeat = decided("r_repeat", BOUNDARY + 65_000)
    assert first.sik != repeat.sik
    admit_clock.at = BOUNDARY + 66_000  # in the window after the first call's: not yet expired
    assert admit(rail_rt, repeat).execute is not None
    answer = admit(rail_rt, first)
    assert answer.execute is None and answer.outcome is not None and answer.outcome.replayed
    assert intent_count(rail_rt) == 1


# -- past the grace: the first call still queued, or unsettled, when its repeat was received (issue 25, item 1) --


MINUTE = 60_000


def test_a_repeat_past_the_grace_while_the_first_call_was_still_queued_lands_on_the_first(
    rail_rt: RailRuntime, admit_clock: AdmitClock
) -> None:
    # The repro: 23:55 the first call is judged and queued; the rail worker is down. 00:16 (past the 15-minute
    # grace) the agent, told RETRY_SAME_CALL, repeats it; its gate sees no intent yet. The worker comes back.
    first = gated(rail_rt, "r_2355", BOUNDARY - 5 * MINUTE)
    repeat = gated(rail_rt, "r_0016", BOUNDARY + 16 * MINUTE)
    assert (repeat.sik, repeat.previous_sik) == (sik_in(CURRENT), first.sik)
    admit_clock.at = BOUNDARY + 30 * MINUTE
    admitted = admit(rail_rt, first)
    assert admitted.execute is not None
    settle_intent(rail_rt, sik_in(PREVIOUS), at_ms=BOUNDARY + 31 * MINUTE)  # APPLIED before the repeat is admitted
    answer = admit(rail_rt, repeat)
    assert answer.execute is None and answer.outcome is not None
    assert (answer.outcome.sik, answer.outcome.state, answer.outcome.replayed) == (first.sik, "APPLIED", True)
    assert intent_count(rail_rt) == 1, "one settlement for one call and its repeat"


def test_a_repeat_past_the_grace_of_a_first_call_unsettled_when_it_was_received_lands_on_it(
    rail_rt: RailRuntime, admit_clock: AdmitClock
) -> None:
    # Admitted before midnight and still UNKNOWN when the repeat was received; APPLIED before its admission.
    first = gated(rail_rt, "r_2355", BOUNDARY - 5 * MINUTE)
    admit_clock.at = BOUNDARY - 4 * MINUTE
    assert admit(rail_rt, first).execute is not None
    settle_intent(rail_rt, first.sik or "", at_ms=BOUNDARY - 4 * MINUTE, state="UNKNOWN")
    # The repeat's gate worker judged it from a snapshot taken before the first call was admitted (a lagging reader).
    repeat = Decision.model_validate({**gated(rail_rt, "r_0020", BOUNDARY + 20 * MINUTE).model_dump(),
                                      "sik": sik_in(CURRENT), "window": CURRENT})  # fmt: skip
    with transaction(rail_rt.ledger):
        intents.transition(rail_rt.ledger, MERCHANT, first.sik or "", Event.RECONCILE_STARTED, now=BOUNDARY)
    with transaction(rail_rt.ledger):
        intents.transition(rail_rt.ledger, MERCHANT, first.sik or "", Event.RECONCILE_FOUND_APPLIED,
                           now=BOUNDARY + 25 * MINUTE)  # fmt: skip
    admit_clock.at = BOUNDARY + 26 * MINUTE
    answer = admit(rail_rt, repeat)
    assert answer.outcome is not None and (answer.outcome.sik, answer.outcome.replayed) == (first.sik, True)
    assert intent_count(rail_rt) == 1


def test_a_repeat_past_the_grace_of_a_first_call_settled_before_it_was_received_is_a_new_settlement(
    rail_rt: RailRuntime, admit_clock: AdmitClock
) -> None:
    # The other side of the rule: the first was APPLIED at 23:56, the identical call at 00:16 is the new day's.
    first = gated(rail_rt, "r_2355", BOUNDARY - 5 * MINUTE)
    repeat = gated(rail_rt, "r_0016", BOUNDARY + 16 * MINUTE)  # keyed before the first was admitted
    admit_clock.at = BOUNDARY - 5 * MINUTE
    assert admit(rail_rt, first).execute is not None
    settle_intent(rail_rt, first.sik or "", at_ms=BOUNDARY - 4 * MINUTE)
    admit_clock.at = BOUNDARY + 17 * MINUTE
    answer = admit(rail_rt, repeat)
    assert answer.execute is not None and answer.execute.sik == sik_in(CURRENT)
    assert intent_count(rail_rt) == 2


@pytest.mark.parametrize(("clock_skew_ms", "settlements"), [(0, 2), (2_000, 1)])
def test_finding_f8_a_repeat_past_the_grace_received_before_its_queued_first_call_was_admitted_lands_on_it_whatever_the_clocks(  # noqa: E501
    rail_rt: RailRuntime, admit_clock: AdmitClock, clock_skew_ms: int, settlements: int,
) -> None:
    """Finding F8 (docs/simulation.md, ADR 0009 amended, ADR 0032). The rule of ADR 0009 past the grace compares the
    repeat's received_at_ms (the ingress's clock) with the first intent's first_seen_at and updated_at (the clocks
    of the rail worker and the reconciler that wrote them). Here the rail worker's clock runs 2 s behind the
    ingress's: the repeat is received at 00:16:00.000 by the ingress's clock, past the grace; the first call, queued
    since 23:55, is admitted 500 ms later (00:15:58.500 on the worker's clock) and APPLIED 100 ms after that
    (00:15:58.600), before the repeat is admitted. On the true clock the first was not yet admitted when the repeat
    was received: the repeat is that call. Compared stamp to stamp, it was admitted and applied before: a second
    settlement. The rule: an admission or a settling stamped up to INTERLOCK_CLOCK_SKEW_MS before the repeat was
    received counts as after it (the safe direction: a false merge delays money, a false split pays twice). With the
    deployment told its clocks agree (0), the stamps are the truth and the repeat is the new day's settlement."""
    rail_rt.settings = rail_rt.settings.model_copy(update={"clock_skew_ms": clock_skew_ms})
    received = BOUNDARY + 16 * MINUTE  # the ingress's clock
    first = gated(rail_rt, "r_2355", BOUNDARY - 5 * MINUTE)
    repeat = gated(rail_rt, "r_0016", received)
    admit_clock.at = received - 2_000 + 500  # the worker's clock, 2 s behind the ingress's
    assert admit(rail_rt, first).execute is not None
    settle_intent(rail_rt, first.sik or "", at_ms=received - 2_000 + 600)
    admit_clock.at = received - 2_000 + 700
    admit(rail_rt, repeat)
    assert intent_count(rail_rt) == settlements


def test_finding_f8_the_gate_keys_the_repeat_onto_a_first_intent_stamped_by_a_clock_behind_the_ingresss(
    ledger: sqlite3.Connection,
) -> None:
    """F8 at the gate, which keys with the same predicate from its snapshot: the first intent admitted and APPLIED
    after the repeat was received, stamped 1 s before it by a rail worker whose clock runs behind."""
    received = BOUNDARY + 16 * MINUTE
    put_intent(ledger, sik_in(PREVIOUS), "APPLIED", amount=30_000, subject="balance", tool=TOOL, now=received - 1_000)
    assert resolve(proposal("r"), BalanceRail(), ledger, make_mandate(), received, grace_ms=GRACE,
                   clock_skew_ms=0).sik == sik_in(CURRENT)  # fmt: skip
    assert resolve(proposal("r"), BalanceRail(), ledger, make_mandate(), received, grace_ms=GRACE,
                   clock_skew_ms=1_000).sik == sik_in(PREVIOUS)  # fmt: skip


def test_the_gate_keys_a_repeat_past_the_grace_onto_a_first_intent_settled_only_after_it_was_received(
    ledger: sqlite3.Connection,
) -> None:
    received = BOUNDARY + 16 * MINUTE
    # Admitted after the repeat was received (the first call waited in the rail queue), APPLIED since.
    put_intent(ledger, sik_in(PREVIOUS), "APPLIED", amount=30_000, subject="balance", tool=TOOL, now=received + 1)
    assert settle_at(ledger, received).sik == sik_in(PREVIOUS)
    # Admitted before, settled after the repeat was received.
    put_intent(ledger, sik_in(PREVIOUS, amount=40_000), "UNKNOWN", amount=40_000, subject="balance", tool=TOOL,
               now=received - 1)  # fmt: skip
    with transaction(ledger):
        for event, at in ((Event.RECONCILE_STARTED, received - 1), (Event.RECONCILE_FOUND_APPLIED, received + 5)):
            intents.transition(ledger, MERCHANT, sik_in(PREVIOUS, amount=40_000), event, now=at)
    assert settle_at(ledger, received, amount=40_000).sik == sik_in(PREVIOUS, amount=40_000)


def test_a_full_balance_repeat_past_the_grace_lands_on_the_queued_first_whatever_the_balance_reads_now(
    rail_rt: RailRuntime, admit_clock: AdmitClock
) -> None:
    gate_ledger = open_ledger(rail_rt.ledger_path, readonly=True)
    mandate = rail_rt.mandates.require(AGENT)

    def full(request_id: str, at_ms: int, balance: int) -> Decision:
        call = proposal(request_id, received_at_ms=at_ms, settle_full_balance=True)
        action = resolve(call, BalanceRail(balance), gate_ledger, mandate, at_ms)
        return build_decision(action, GateContext(mandate=mandate, now_ms=at_ms, ledger=gate_ledger,
                                                  tool_hashes=current_pins()), mandate)  # fmt: skip

    first = full("r_2355", BOUNDARY - 5 * MINUTE, 200_000)
    # More money came in meanwhile: "everything" reads higher now, so the amounts — and the SIKs — differ.
    repeat = full("r_0016", BOUNDARY + 16 * MINUTE, 250_000)
    assert repeat.previous_sik != first.sik
    admit_clock.at = BOUNDARY + 30 * MINUTE
    assert admit(rail_rt, first).execute is not None
    settle_intent(rail_rt, first.sik or "", at_ms=BOUNDARY + 31 * MINUTE)
    answer = admit(rail_rt, repeat)
    assert answer.outcome is not None and (answer.outcome.sik, answer.outcome.replayed) == (first.sik, True)
    assert intent_count(rail_rt) == 1
    gate_ledger.close()


def test_a_full_balance_repeat_finds_a_first_admitted_by_a_clock_behind_the_ingresss_as_its_window_began(
    ledger: sqlite3.Connection,
) -> None:
    """ADR 0032: the earlier full-balance request is looked for among intents admitted since the previous window
    began, a time on the ingress's clock compared with first_seen_at, the admitting worker's. A first call received
    500 ms into yesterday, admitted by a worker whose clock ran 1.5 s behind, is stamped before yesterday began:
    it is looked for INTERLOCK_CLOCK_SKEW_MS further back, or its unsettled first is missed and "everything" is
    settled again at today's balance."""
    yesterday = BOUNDARY - DAY
    first = sik_in(PREVIOUS, amount=200_000)
    put_intent(ledger, first, "UNKNOWN", amount=200_000, subject="balance", tool=TOOL, now=yesterday - 1_000,
               params={"amount": 200_000, "full": True})  # fmt: skip
    received = BOUNDARY + 16 * MINUTE  # past the grace; the first is still UNKNOWN
    keyed = [resolve(proposal("r", settle_full_balance=True), BalanceRail(250_000), ledger, make_mandate(), received,
                     grace_ms=GRACE, clock_skew_ms=skew).sik for skew in (0, 2_000)]  # fmt: skip
    assert keyed == [sik_in(CURRENT, amount=250_000), first]


def test_a_distinct_reason_past_the_grace_is_not_captured_by_the_queued_first(
    rail_rt: RailRuntime, admit_clock: AdmitClock
) -> None:
    first = gated(rail_rt, "r_2355", BOUNDARY - 5 * MINUTE)
    gate_ledger = open_ledger(rail_rt.ledger_path, readonly=True)
    mandate = rail_rt.mandates.require(AGENT)
    at = BOUNDARY + 16 * MINUTE
    action = resolve(proposal("r_new", received_at_ms=at, interlock_distinct_reason="a second payout"),
                     BalanceRail(), gate_ledger, mandate, at)  # fmt: skip
    second = build_decision(action, GateContext(mandate=mandate, now_ms=at, ledger=gate_ledger,
                                                tool_hashes=current_pins()), mandate)  # fmt: skip
    gate_ledger.close()
    admit_clock.at = BOUNDARY + 30 * MINUTE
    assert admit(rail_rt, first).execute is not None
    assert admit(rail_rt, second).execute is not None and intent_count(rail_rt) == 2
