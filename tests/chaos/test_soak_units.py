"""The soak's arithmetic (no processes): RSS read from /proc, growth as first-fifth vs last-fifth medians."""

from __future__ import annotations

import os

from chaos.soak import SoakResult, rss_kib


def test_growth_compares_the_medians_of_the_first_and_last_fifth() -> None:
    result = SoakResult(minutes=1)
    result.rss["rail"] = [(float(t), 1000 + (500 if t >= 40 else 0)) for t in range(50)]
    result.rss["briefly_alive"] = [(0.0, 100)] * 5  # too few samples to say anything
    assert result.growth_kib() == {"rail": (1000, 1500)}


def test_rss_is_read_for_a_live_process_and_none_for_a_gone_one() -> None:
    mine = rss_kib(os.getpid())
    assert mine is not None and mine > 1000  # a Python process holds more than a MiB
    assert rss_kib(2**22 + 12345) is None
