"""The verdict engine says what a trial's ledger and rail journal mean; the matrix covers every point."""

from __future__ import annotations

from chaos.cells import FAULTS, KILL_POINTS, build_cells
from chaos.verdict import Observation, judge

SIK = "S" * 32


def obs(intents: list[dict], stamped: dict[str, list[str]], *, bad: int | None = None, partition: bool = False):
    return Observation(intents, stamped, bad, partition)


def test_a_clean_applied_trial_has_no_violation() -> None:
    assert judge(obs([{"sik": SIK, "state": "APPLIED", "rail_entity_id": "rfnd_1"}], {SIK: ["rfnd_1"]})) == []


def test_two_entities_with_one_stamp_is_a_violation() -> None:
    found = judge(obs([{"sik": SIK, "state": "APPLIED", "rail_entity_id": "rfnd_1"}], {SIK: ["rfnd_1", "rfnd_2"]}))
    assert any(v.startswith("NEVER_TWO") for v in found)


def test_unknown_left_behind_is_a_violation_and_quarantine_only_under_partition() -> None:
    assert any(v.startswith("NEVER_UNKNOWN") for v in judge(obs([{"sik": SIK, "state": "UNKNOWN"}], {})))
    assert any(v.startswith("NEVER_UNKNOWN") for v in judge(obs([{"sik": SIK, "state": "QUARANTINED"}], {})))
    assert judge(obs([{"sik": SIK, "state": "QUARANTINED"}], {}, partition=True)) == []


def test_ledger_and_rail_must_agree() -> None:
    phantom = judge(obs([{"sik": SIK, "state": "APPLIED", "rail_entity_id": "rfnd_1"}], {}))
    assert any(v.startswith("PHANTOM_SUCCESS") for v in phantom)
    wrong = judge(obs([{"sik": SIK, "state": "APPLIED", "rail_entity_id": "rfnd_other"}], {SIK: ["rfnd_1"]}))
    assert any(v.startswith("WRONG_ENTITY") for v in wrong)
    lost = judge(obs([{"sik": SIK, "state": "FAILED_TERMINAL"}], {SIK: ["rfnd_1"]}))
    assert any(v.startswith("SILENT_LOSS") for v in lost)
    orphan = judge(obs([], {SIK: ["rfnd_1"]}))
    assert any(v.startswith("ORPHAN") for v in orphan)


def test_a_broken_chain_is_a_violation() -> None:
    assert judge(obs([], {}, bad=7)) == ["AUDIT_CHAIN: broken at seq 7"]


def test_every_kill_point_and_fault_is_covered_or_skipped_with_a_reason() -> None:
    cells, skipped = build_cells()
    assert {c.point for c in cells} == set(KILL_POINTS)
    assert {c.fault for c in cells} == set(FAULTS)
    assert len(cells) + len(skipped) == len(KILL_POINTS) * len(FAULTS)
    assert all(reason for _, _, reason in skipped)
    assert len(cells) * 10 >= 500, "the full matrix at 10 trials per cell must reach 500 trials"


def test_a_call_refused_before_the_rail_is_made_again_only_when_the_answer_says_so() -> None:
    from chaos.trial import _retryable_refusal

    blocked = {"state": "BLOCKED", "reason_code": "G2_RAIL_UNAVAILABLE", "caller_action": "RETRY_SAME_CALL"}
    assert _retryable_refusal(blocked) == "BLOCKED G2_RAIL_UNAVAILABLE"
    unavailable = {"error": {"code": "REDIS_UNAVAILABLE", "message": "x"}, "caller_action": "RETRY_SAME_CALL"}
    assert _retryable_refusal(unavailable) == "error REDIS_UNAVAILABLE"
    # No answer at all may be a call still on its way to the rail: waited on for the kill, never retried.
    assert _retryable_refusal({"error": "TimeoutError"}) is None
    assert _retryable_refusal({"error": {"code": "INVALID_INPUT"}, "caller_action": "DO_NOT_RETRY"}) is None
    final = {"state": "BLOCKED", "reason_code": "G3_OVER_LIMIT", "caller_action": "STOP"}
    assert _retryable_refusal(final) is None
    assert _retryable_refusal({"state": "IN_PROGRESS", "caller_action": "RETRY_SAME_CALL"}) is None
    assert _retryable_refusal({}) is None


def test_an_outcome_published_after_the_ingress_gave_up_is_read_once(redis_server, redis_client) -> None:  # type: ignore[no-untyped-def]
    import redis

    from chaos.trial import _published_outcome
    from interlock.messages import CallerAction, Outcome
    from interlock.outcomes import publish

    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    assert _published_outcome(client) == {}
    retry = CallerAction.RETRY_SAME_CALL
    publish(redis_client, Outcome(request_id="r1", state="BLOCKED", sik=None, intent=None,
                                  reason_code="G2_RAIL_UNAVAILABLE", caller_action=retry))  # fmt: skip
    seen = _published_outcome(client)
    assert (seen["state"], seen["reason_code"], seen["caller_action"]) == ("BLOCKED", "G2_RAIL_UNAVAILABLE",
                                                                          "RETRY_SAME_CALL")  # fmt: skip
    assert _published_outcome(client) == {}
    client.close()


class _Actor:
    """A process that dies at its failpoint on the call numbered *dies_on* (never when 0)."""

    def __init__(self, dies_on: int = 0) -> None:
        self.dies_on, self.calls = dies_on, 1

    def alive(self) -> bool:
        return not (self.dies_on and self.calls >= self.dies_on)

    def returncode(self) -> int | None:
        return None if self.alive() else -9

    def log(self) -> str:
        return "" if self.alive() else "failpoint rail.after_wal_before_call: SIGKILL pid 1"


def _kill_wait(monkeypatch, first, answers, actor, published=()):  # type: ignore[no-untyped-def]
    import itertools
    import types

    from chaos import trial

    clock = itertools.count(step=5.0)
    monkeypatch.setattr(trial, "time", types.SimpleNamespace(monotonic=lambda: next(clock), sleep=lambda _: None))
    def wait_for(predicate, **_):  # type: ignore[no-untyped-def]
        if not predicate():
            raise trial.StackError("not within the deadline")

    monkeypatch.setattr(trial, "wait_for", wait_for)
    late = list(published)
    monkeypatch.setattr(trial, "_published_outcome", lambda _client: late.pop(0) if late else {})
    made: list[int] = []

    async def call(_url, _arguments):  # type: ignore[no-untyped-def]
        actor.calls += 1
        made.append(actor.calls)
        return answers.pop(0)

    monkeypatch.setattr(trial, "_call", call)
    stack = types.SimpleNamespace(actors={"rail": actor}, redis_url="redis://127.0.0.1:1/0")  # never connected
    return trial._until_killed(stack, "rail", "rail.after_wal_before_call", "url", {}, first), made  # type: ignore[arg-type]


RETRY = {"state": "BLOCKED", "reason_code": "G2_RAIL_UNAVAILABLE", "caller_action": "RETRY_SAME_CALL"}


def test_a_call_that_reached_the_rail_and_did_not_die_there_is_not_excused(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for first in ({"state": "IN_PROGRESS", "caller_action": "RETRY_SAME_CALL"}, {"error": "TimeoutError"},
                  {"state": "APPLIED", "caller_action": "STOP"}):  # fmt: skip
        (landed, preempted), made = _kill_wait(monkeypatch, first, [], _Actor())
        assert (landed, preempted, made) == (False, None, []), first


def test_a_refused_call_is_made_again_until_the_kill_lands_or_the_attempts_run_out(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (landed, preempted), made = _kill_wait(monkeypatch, {"state": "IN_PROGRESS"}, [{"state": "IN_PROGRESS"}],
                                           _Actor(dies_on=2), published=[RETRY])  # fmt: skip
    assert (landed, preempted, made) == (True, None, [2])
    (landed, preempted), made = _kill_wait(monkeypatch, RETRY, [RETRY, RETRY], _Actor())
    assert (landed, made) == (False, [2, 3])
    assert preempted == "each of 3 calls was refused before the rail (BLOCKED G2_RAIL_UNAVAILABLE)"
    final = {"state": "BLOCKED", "reason_code": "G3_OVER_LIMIT", "caller_action": "STOP"}
    (landed, preempted), made = _kill_wait(monkeypatch, final, [], _Actor())
    assert (landed, made) == (False, []) and preempted is not None and "G3_OVER_LIMIT" in preempted
