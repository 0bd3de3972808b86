"""How the rail's answer to a money call is classified (rail_worker/classify.py, SPEC §8 step 4): the event applied
to the intent, the outcome written on the attempt row, the status, code, response and detail kept as evidence, and
the reason code an operator reads. A stamped 2xx is APPLIED; an unstamped 2xx, a 5xx, a timeout and a refusal that
names our receipt or idempotency key are ambiguous; a definitive 4xx is terminal only on a first attempt."""

from __future__ import annotations

import pytest

from ledger.states import Event
from rail_worker.classify import KEY_IN_USE, REJECTED_AFTER_RETRY, Classified, classify_entity, classify_error
from rails.models import Refund, Settlement
from rails.razorpay import RailError, RailErrorKind

SIK = "K" * 32


def _rejected(description: str | None = "The amount is invalid", field: str | None = "amount",
              body: str | None = '{"error": "BAD_REQUEST_ERROR"}') -> RailError:  # fmt: skip
    return RailError(RailErrorKind.REJECTED, "400", method="POST", path="/refunds", http_status=400,
                     code="BAD_REQUEST_ERROR", description=description, field=field, body=body)  # fmt: skip


def test_a_definitive_refusal_of_a_first_attempt_is_terminal_with_the_rails_description_and_field() -> None:
    assert classify_error(_rejected(), attempt_seq=1) == Classified(
        Event.RAIL_REJECTED, "REJECTED", http_status=400, error_code="BAD_REQUEST_ERROR", reason_code="RAIL_REJECTED",
        response='{"error": "BAD_REQUEST_ERROR"}', detail={"description": "The amount is invalid", "field": "amount"})


def test_a_refusal_classified_without_an_attempt_number_is_judged_as_a_first_attempt() -> None:
    assert classify_error(_rejected()).event is Event.RAIL_REJECTED


def test_a_definitive_refusal_of_a_retry_is_ambiguous_until_the_stamp_is_confirmed_absent() -> None:
    assert classify_error(_rejected(description="Insufficient balance", field=None), attempt_seq=2) == Classified(
        Event.RAIL_AMBIGUOUS, REJECTED_AFTER_RETRY, http_status=400, error_code="BAD_REQUEST_ERROR",
        reason_code="RAIL_REJECTED_AFTER_RETRY", response='{"error": "BAD_REQUEST_ERROR"}',
        detail={"description": "Insufficient balance", "field": None})  # fmt: skip
    assert REJECTED_AFTER_RETRY == "REJECTED_AFTER_RETRY"


@pytest.mark.parametrize(("description", "field"), [
    ("Receipt already used", None),
    (None, "receipt"),
    ("The IDEMPOTENCY key was used with another body", None),
    (None, "X-Refund-Idempotency"),
])  # fmt: skip
def test_a_refusal_naming_our_receipt_or_idempotency_key_in_its_description_or_field_is_ambiguous(
    description: str | None, field: str | None
) -> None:
    exc = _rejected(description=description, field=field, body=None)
    assert classify_error(exc, attempt_seq=1) == Classified(
        Event.RAIL_AMBIGUOUS, "REJECTED", http_status=400, error_code="BAD_REQUEST_ERROR", reason_code=KEY_IN_USE,
        response=None, detail={"error": str(exc)})  # fmt: skip


def test_a_refusal_with_neither_description_nor_field_is_terminal() -> None:
    assert classify_error(_rejected(description=None, field=None)).reason_code == "RAIL_REJECTED"


def test_a_gateway_timeout_is_ambiguous_with_its_status_code_and_body_kept() -> None:
    exc = RailError(RailErrorKind.AMBIGUOUS, "504 upstream timed out", method="POST", path="/settlements/ondemand",
                    http_status=504, code="GATEWAY_TIMEOUT", body="<html>504</html>")  # fmt: skip
    assert classify_error(exc, attempt_seq=3) == Classified(
        Event.RAIL_AMBIGUOUS, "AMBIGUOUS", http_status=504, error_code="GATEWAY_TIMEOUT", reason_code="RAIL_AMBIGUOUS",
        response="<html>504</html>", detail={"error": "AMBIGUOUS POST /settlements/ondemand: 504 upstream timed out"})


def test_a_request_that_never_left_is_ambiguous_and_says_it_was_not_sent() -> None:
    exc = RailError(RailErrorKind.NOT_SENT, "send window closed", method="POST", path="/refunds")
    assert classify_error(exc) == Classified(
        Event.RAIL_AMBIGUOUS, "NOT_SENT", reason_code="RAIL_NOT_SENT",
        detail={"error": "NOT_SENT POST /refunds: send window closed"})  # fmt: skip


def test_the_kept_response_and_error_text_are_cut_to_their_bounds() -> None:
    long = RailError(RailErrorKind.AMBIGUOUS, "x" * 900, method="POST", path="/refunds", body="b" * 2500)
    classified = classify_error(long)
    assert classified.response == "b" * 2000
    assert classified.detail == {"error": str(long)[:500]} and len(str(long)) > 500
    refused = classify_error(_rejected(body="r" * 2500))
    assert refused.response == "r" * 2000
    after_retry = classify_error(_rejected(body="r" * 2500), attempt_seq=2)
    assert after_retry.response == "r" * 2000


def test_an_empty_error_body_is_kept_as_no_response() -> None:
    assert classify_error(_rejected(body="")).response is None


def _refund(sik: str) -> Refund:
    return Refund.from_raw({"id": "rfnd_00000000000001", "amount": 500, "currency": "INR", "payment_id": "pay_1",
                            "receipt": None, "notes": {"interlock_sik": sik}, "status": "processed"})  # fmt: skip


def test_a_2xx_carrying_our_stamp_is_applied_with_the_entity_id() -> None:
    refund = _refund(SIK)
    assert refund.carries_stamp(SIK)
    assert classify_entity(refund, SIK) == Classified(Event.RAIL_APPLIED, "APPLIED", rail_entity_id=refund.id,
                                                      http_status=200, response=refund.raw)  # fmt: skip


def test_a_stamped_settlement_is_applied_with_its_fee_and_tax() -> None:
    settlement = Settlement.from_raw({"id": "setlod_00000000000001", "amount_requested": 500, "amount_settled": 0,
                                      "fees": 3, "tax": 1, "currency": "INR", "status": "created",
                                      "notes": {"interlock_sik": SIK}})  # fmt: skip
    assert classify_entity(settlement, SIK) == Classified(
        Event.RAIL_APPLIED, "APPLIED", rail_entity_id=settlement.id, http_status=200, fee_minor=3, tax_minor=1,
        response=settlement.raw)  # fmt: skip


def test_a_2xx_for_an_entity_without_our_stamp_is_a_replayed_response_never_ours() -> None:
    foreign = _refund("F" * 32)
    assert classify_entity(foreign, SIK) == Classified(
        Event.RAIL_AMBIGUOUS, "REPLAYED_RESPONSE", http_status=200, reason_code="RAIL_REPLAYED_RESPONSE",
        response=foreign.raw, detail={"foreign_entity_id": foreign.id})  # fmt: skip
