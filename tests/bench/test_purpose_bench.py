"""`interlock bench purpose` on its labelled set: the set is what the issue asks for, and the section renders from
a real run of the shipped model (numbers go to RESULTS.md only; nothing about speed is asserted here)."""

from __future__ import annotations

from pathlib import Path

from bench.purpose import choose_threshold, evaluate_model, load_cases
from bench.purpose_report import render
from gate_workers.purpose_model import DEFAULT_MODEL
from interlock.mandate import load_mandate
from interlock.mandate_model import DEFAULT_MIN_SIMILARITY
from ledger.db import open_ledger
from tests.mandates import EXAMPLE


def test_the_labelled_set_has_benign_drifted_and_injected_cases_including_the_seeds_a14() -> None:
    data = load_cases()
    labels = [c.label for c in data.cases]
    assert len(labels) >= 40 and {"benign", "drift", "injected"} == set(labels)
    assert labels.count("benign") >= 20
    assert {c.label for c in data.cases if c.source == "seed A-14"} == {"drift", "injected"}


def test_the_mandate_default_is_the_threshold_the_set_chooses_for_the_shipped_model(tmp_path: Path) -> None:
    data = load_cases()
    ledger = open_ledger(tmp_path / "ledger.sqlite3")
    report = evaluate_model(DEFAULT_MODEL, data, ledger, load_mandate(EXAMPLE), rounds=1)
    assert report.error is None
    assert choose_threshold(report.scored) == report.chosen == DEFAULT_MIN_SIMILARITY
    text = render([report], data, command="test", chosen_model=DEFAULT_MODEL, package_mb={DEFAULT_MODEL: 1.0})
    assert "| precision | recall | false-hold rate |" in text and "(chosen here)" in text
    assert text.count("| d01 | drift | seed A-14 |") == 1
