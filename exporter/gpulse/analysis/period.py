"""Dominant period of recurring stalls, from the start times of stall episodes.

    intervals d_k = s_{k+1} − s_k   over the retained episode starts
    period        = median(d)
    accepted when ≥ 2 intervals, median(|d − period|) ≤ tolerance · period (a steady
    rhythm), the whole span agrees with it — |span / period − len(d)| ≤ max(1, 0.2·len(d)),
    so pairs of stalls far apart are not a short period —, and the last episode started no longer
    than `stale_factor` periods before `now` (a rhythm that stopped is not reported).

Two episodes alone give a period only when they are alike — both at least 1 s and
neither more than twice the other (two checkpoints of a run that checkpoints twice).

Returns None when there is no steady rhythm; the exporter then omits the gauge.
"""
from __future__ import annotations

from statistics import median
from typing import Sequence


def stall_period(starts: Sequence[float], now: float | None = None,
                 durations: Sequence[float] | None = None,
                 tolerance: float = 0.2, stale_factor: float = 3.0) -> float | None:
    if len(starts) == 2 and durations is not None and len(durations) == 2:
        a, b = durations
        p = starts[1] - starts[0]
        if min(a, b) >= 1.0 and min(a, b) >= 0.5 * max(a, b) and p > 0:
            if now is None or now - starts[-1] <= stale_factor * p:
                return p
        return None
    if len(starts) < 3:
        return None
    d = [b - a for a, b in zip(starts, starts[1:]) if b > a]
    if len(d) < 2:
        return None
    p = median(d)
    if p <= 0:
        return None
    if median(abs(x - p) for x in d) > tolerance * p:
        return None
    span = starts[-1] - starts[0]
    if abs(span / p - len(d)) > max(1.0, 0.2 * len(d)):
        return None
    if now is not None and now - starts[-1] > stale_factor * p:
        return None
    return p
