"""How operator screens print money and times (display only; the ledger keeps integers)."""

from __future__ import annotations

import datetime as dt

from interlock.money import format_minor as format_minor  # how every screen prints money


def format_ms(epoch_ms: int | None) -> str:
    if epoch_ms is None:
        return "-"
    return dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
