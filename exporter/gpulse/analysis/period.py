"""Dominant period of recurring stalls, from the start times of stall episodes.

Real rhythms are not clean: a long stall (a checkpoint that runs late, an
evaluation) swallows a few cycles, a stall that falls under --min-stall or merges
with its neighbour drops one, and the steps jitter. So the period is found by
clustering the intervals between stall starts, knowing about harmonics:

    intervals d_k = s_{k+1} − s_k
    for each candidate c taken from the intervals themselves:
        direct(c)    = { d : |d − c| ≤ tol · c }                     one cycle
        explained(c) = direct(c) ∪ { d : |d − m·c| ≤ tol · c, 2 ≤ m ≤ M }
                                                  cycles merged, missed or swallowed
    best c: the most explained intervals, then the most direct ones, then the
            longest (so 2·p never beats p, and p/2 is never a candidate unless seen)
    accepted when |direct| ≥ 2, |direct| ≥ ½·|d| and |explained| ≥ fit · |d|
    period = Σ explained d / Σ m                 (a least-squares fit of the grid)

tol = period_tolerance_ratio, fit = period_fit_ratio, M = period_max_cycles (see
analysis/thresholds.py). Intervals that fit no multiple — the way out of a long stall,
which restarts the rhythm at another phase — are simply outvoted.

Two episodes alone give a period only when they are alike — both at least
period_pair_min_seconds (1 s) and neither more than period_pair_factor (2) times the
other: two checkpoints of a run that checkpoints twice.

A rhythm whose last stall started more than period_stale_periods periods before
`now` has stopped. Returns None when there is no rhythm; the exporter then omits the
gauge.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Sequence

from .thresholds import value


def rhythm(starts: Sequence[float], durations: Sequence[float] | None = None) -> float | None:
    """The period of `starts` (sorted episode starts) regardless of `now`; None without one."""
    if len(starts) == 2:
        if durations is None or len(durations) != 2:
            return None
        a, b = durations
        p = starts[1] - starts[0]
        if p > 0 and min(a, b) >= value("period_pair_min_seconds") \
                and value("period_pair_factor") * min(a, b) >= max(a, b):
            return p
        return None
    if len(starts) < 3:
        return None
    d = sorted(b - a for a, b in zip(starts, starts[1:]) if b > a)
    n = len(d)
    if n < 2:
        return None
    tol = value("period_tolerance_ratio")
    max_m = int(value("period_max_cycles"))
    best: tuple[int, int, float] | None = None
    best_p = None
    seen: set[float] = set()
    for c in d:
        c = round(c, 3)
        if c in seen or c <= 0:
            continue
        seen.add(c)
        direct = bisect_right(d, c + tol * c) - bisect_left(d, c - tol * c)
        total, cycles, count = 0.0, 0, 0
        for m in range(1, max_m + 1):
            lo, hi = bisect_left(d, m * c - tol * c), bisect_right(d, m * c + tol * c)
            if hi > lo:
                total += sum(d[lo:hi])
                cycles += m * (hi - lo)
                count += hi - lo
        score = (count, direct, c)
        if best is None or score > best:
            best, best_p = score, total / cycles
    assert best is not None
    count, direct, _ = best
    if direct < 2 or 2 * direct < n or count < value("period_fit_ratio") * n:
        return None
    return best_p


def families(durations: Sequence[float]) -> list[list[int]]:
    """Indices of episodes grouped by length: sorted by duration, a family takes every
    episode up to stall_family_factor × its shortest one. Frequent short stalls and
    rare long checkpoints each get their own rhythm. Each family is in input order."""
    order = sorted(range(len(durations)), key=lambda i: durations[i])
    out: list[list[int]] = []
    for i in order:
        if out and durations[i] <= value("stall_family_factor") * max(durations[out[-1][0]], 1e-9):
            out[-1].append(i)
        else:
            out.append([i])
    return [sorted(f) for f in out]


def dominant_rhythm(starts: Sequence[float], durations: Sequence[float]) -> tuple[float, float] | None:
    """(period, last start) of the family with a rhythm and the most episodes."""
    best: tuple[int, float, float] | None = None
    for fam in families(durations):
        st = [starts[i] for i in fam]
        p = rhythm(st, [durations[i] for i in fam])
        if p is not None and (best is None or len(fam) > best[0]):
            best = (len(fam), p, st[-1])
    return None if best is None else (best[1], best[2])


def stall_period(starts: Sequence[float], now: float | None = None,
                 durations: Sequence[float] | None = None) -> float | None:
    """rhythm(), or None when that rhythm stopped before `now`."""
    p = rhythm(starts, durations)
    return None if p is None or stopped(starts[-1], p, now) else p


def stopped(last_start: float, period: float, now: float | None) -> bool:
    """Whether a rhythm whose last stall started at last_start has stopped by `now`."""
    return now is not None and now - last_start > value("period_stale_periods") * period
