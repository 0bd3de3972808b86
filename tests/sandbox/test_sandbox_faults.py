"""Every fault profile does what it says, measured against the journal (what the rail really did)."""

from __future__ import annotations

import time

import httpx
import pytest

from sandbox.testing import SandboxProcess, wait_for


def stamped_body(sik: str, amount: int = 500) -> dict[str, object]:
    return {"amount": amount, "notes": {"interlock_sik": sik}, "receipt": "ilk_" + sik}


def refund(http: httpx.Client, payment_id: str, body: dict[str, object], key: str | None = None) -> httpx.Response:
    headers = {"X-Refund-Idempotency": key} if key else {}
    return http.post(f"/v1/payments/{payment_id}/refund", json=body, headers=headers)


@pytest.mark.parametrize("html", [0, 1])
def test_ambiguous_504_applies_then_answers_504(sandbox: SandboxProcess, http, new_payment, new_sik, html: int):
    payment_id, sik = new_payment(), new_sik()
    sandbox.set_faults([{"name": "ambiguous_504", "rate": 1.0, "params": {"html": html}}])
    response = refund(http, payment_id, stamped_body(sik), key="ilk_" + sik)
    assert response.status_code == 504
    assert response.headers["content-type"].startswith("text/html" if html else "application/json")
    assert sandbox.count_stamped(sik) == 1
    # The idempotency key was recorded with the entity: the same retry finds it and creates nothing.
    sandbox.clear_faults()
    assert refund(http, payment_id, stamped_body(sik), key="ilk_" + sik).json()["notes"]["interlock_sik"] == sik
    assert sandbox.count_stamped(sik) == 1


def test_fail_504_answers_504_without_applying(sandbox: SandboxProcess, http, new_payment, new_sik):
    payment_id, sik = new_payment(), new_sik()
    sandbox.set_faults([{"name": "fail_504", "rate": 1.0}])
    assert refund(http, payment_id, stamped_body(sik), key="ilk_" + sik).status_code == 504
    assert (
        http.post("/v1/settlements/ondemand", json={"amount": 1000, "notes": {"interlock_sik": sik}}).status_code == 504
    )
    assert sandbox.count_stamped(sik) == 0
    assert http.get(f"/v1/payments/{payment_id}").json()["amount_refunded"] == 0  # reads are out of its scope


def test_slow_applies_after_the_client_gave_up(sandbox: SandboxProcess, new_payment, new_sik):
    payment_id, sik = new_payment(), new_sik()
    with sandbox.slow_held():  # held until the block ends, however long the client takes to give up
        with httpx.Client(base_url=sandbox.url, auth=(sandbox.key_id, sandbox.key_secret), timeout=0.3) as impatient:
            with pytest.raises(httpx.ReadTimeout):
                refund(impatient, payment_id, stamped_body(sik))
        wait_for(lambda: sandbox.health()["slow_waiting"] == 1, timeout=60)  # it reached the rail ...
        assert sandbox.count_stamped(sik) == 0  # ... and is not applied yet: the apply is still being held
    wait_for(lambda: sandbox.count_stamped(sik) == 1, timeout=60)


def test_dup_response_answers_with_an_earlier_entity(sandbox: SandboxProcess, http, new_payment, new_sik):
    payment_id, earlier_sik, sik = new_payment(), new_sik(), new_sik()
    earlier = refund(http, payment_id, stamped_body(earlier_sik)).json()
    sandbox.set_faults([{"name": "dup_response", "rate": 1.0}])
    answered = refund(http, payment_id, stamped_body(sik)).json()
    [created] = [e for e in sandbox.entities("refund") if e["stamp_sik"] == sik]
    assert answered["id"] != created["id"]
    assert answered["id"] == earlier["id"]  # the response of an earlier, different refund
    assert answered["notes"]["interlock_sik"] != sik and answered["receipt"] != "ilk_" + sik
    assert sandbox.count_stamped(sik) == 1


def test_partition_resets_reads_and_money_then_heals(sandbox: SandboxProcess, http, new_payment, new_sik):
    payment_id, sik = new_payment(), new_sik()
    # A partition longer than the test runs: it is still on when the test gets to look, however busy the machine.
    sandbox.set_faults([{"name": "partition", "rate": 1.0, "params": {"duration_ms": 600_000}}])
    with pytest.raises(httpx.TransportError):
        http.get(f"/v1/payments/{payment_id}")
    with pytest.raises(httpx.TransportError):
        refund(http, payment_id, stamped_body(sik))
    assert sandbox.faults()["partition_remaining_ms"] > 0  # the control surface stays reachable
    assert sandbox.count_stamped(sik) == 0  # a dropped money call is not applied
    # A short one heals by itself once its duration has passed.
    sandbox.clear_faults()
    sandbox.set_faults([{"name": "partition", "rate": 1.0, "params": {"duration_ms": 300}}])
    with pytest.raises(httpx.TransportError):
        http.get(f"/v1/payments/{payment_id}")
    sandbox.set_faults([{"name": "partition", "rate": 0.0}])  # no new partition once this one ends
    wait_for(lambda: _reachable(http, payment_id), timeout=60)
    assert refund(http, payment_id, stamped_body(sik)).status_code == 200


def _reachable(http: httpx.Client, payment_id: str) -> bool:
    try:
        return http.get(f"/v1/payments/{payment_id}").status_code == 200
    except httpx.TransportError:
        return False


def test_partition_clears_when_faults_are_cleared(sandbox: SandboxProcess, http, new_payment):
    payment_id = new_payment()
    sandbox.set_faults([{"name": "partition", "rate": 1.0, "params": {"duration_ms": 60_000}}])
    with pytest.raises(httpx.TransportError):
        http.get(f"/v1/payments/{payment_id}")
    sandbox.clear_faults()
    assert http.get(f"/v1/payments/{payment_id}").status_code == 200


def test_replica_lag_hides_a_fresh_refund_then_shows_it(sandbox: SandboxProcess, http, new_payment, new_sik):
    payment_id, sik = new_payment(), new_sik()
    # A lag longer than the test runs hides the refund however slowly it gets to look ...
    sandbox.set_faults([{"name": "replica_lag", "rate": 1.0, "params": {"lag_ms": 600_000}}])
    made = refund(http, payment_id, stamped_body(sik)).json()
    made_by = time.time()
    assert http.get(f"/v1/payments/{payment_id}/refunds").json()["items"] == []
    assert http.get(f"/v1/refunds/{made['id']}").status_code == 400
    assert sandbox.count_stamped(sik) == 1  # hidden from reads, but it happened
    # ... and a lag shorter than its age shows it.
    wait_for(lambda: time.time() > made_by + 0.2, timeout=60)
    sandbox.set_faults([{"name": "replica_lag", "rate": 1.0, "params": {"lag_ms": 100}}])
    listed = http.get(f"/v1/payments/{payment_id}/refunds").json()["items"]
    assert [r["id"] for r in listed] == [made["id"]]
    assert http.get(f"/v1/refunds/{made['id']}").status_code == 200


def test_deep_page_lists_the_newest_refund_past_page_one(sandbox: SandboxProcess, http, new_payment, new_sik):
    payment_id, sik = new_payment(100_000, prior_refunds=12), new_sik()
    ours = refund(http, payment_id, stamped_body(sik)).json()["id"]
    assert http.get(f"/v1/payments/{payment_id}/refunds").json()["items"][0]["id"] == ours  # without the fault
    sandbox.set_faults([{"name": "deep_page", "rate": 1.0}])
    page_one = http.get(f"/v1/payments/{payment_id}/refunds", params={"count": 10}).json()["items"]
    page_two = http.get(f"/v1/payments/{payment_id}/refunds", params={"count": 10, "skip": 10}).json()["items"]
    assert ours not in [r["id"] for r in page_one]
    assert ours in [r["id"] for r in page_two]
    every = [r["id"] for r in page_one + page_two]
    assert len(every) == len(set(every)) == 13  # still each exactly once across pages


def test_rate_zero_never_fires_and_a_seed_replays_the_same_pattern(sandbox: SandboxProcess, http):
    sandbox.set_faults([{"name": "fail_504", "rate": 0.0, "scope": "all"}])
    assert all(http.get("/v1/balance").status_code == 200 for _ in range(20))

    def pattern() -> list[int]:
        sandbox.set_faults([{"name": "fail_504", "rate": 0.5, "scope": "reads"}], seed=7)
        return [http.get("/v1/balance").status_code for _ in range(24)]

    first = pattern()
    assert set(first) == {200, 504}
    assert pattern() == first


def test_read_scope_faults_leave_money_calls_alone(sandbox: SandboxProcess, http, new_payment, new_sik):
    payment_id, sik = new_payment(), new_sik()
    sandbox.set_faults([{"name": "fail_504", "rate": 1.0, "scope": "reads"}])
    assert http.get(f"/v1/payments/{payment_id}").status_code == 504
    assert refund(http, payment_id, stamped_body(sik)).status_code == 200


@pytest.mark.parametrize(
    "faults",
    [
        [{"name": "meteor_strike", "rate": 1.0}],
        [{"name": "slow", "rate": 1.5}],
        [{"name": "slow", "rate": True}],
        [{"name": "slow", "rate": 1.0, "scope": "everything"}],
        [{"name": "slow", "rate": 1.0, "params": {"delay": 5}}],
        [{"name": "partition", "rate": 1.0, "params": {"mode": "sulk"}}],
    ],
)
def test_fault_profiles_are_validated(http: httpx.Client, faults: list[dict[str, object]]):
    response = http.post("/__sandbox/faults", json={"faults": faults})
    assert response.status_code == 400
    assert http.get("/__sandbox/faults").json()["faults"] == []


def test_faults_round_trip_and_an_empty_list_clears(http: httpx.Client):
    profile = {"name": "slow", "rate": 0.25, "scope": "reads", "params": {"delay_ms": 10}}
    assert http.post("/__sandbox/faults", json=[profile]).json()["faults"] == [profile]
    assert http.get("/__sandbox/faults").json()["faults"] == [profile]
    assert http.post("/__sandbox/faults", json=[]).json()["faults"] == []
