"""A straggler whose deviating runs are short but recur (analysis.verdict): a rank
off the GPU for ~16 s every few minutes while its peers spin-wait costs them over
5 % of every 5 minutes, and is named, live (Persistence) and afterwards
(straggler_spans) alike; one such run alone is a pause of the job, not a straggler."""
from __future__ import annotations

import pytest

from gpulse.analysis.thresholds import value
from gpulse.analysis.verdict import Persistence, straggler_spans

IV = 1.0
COST = value("straggler_cost_ratio")
RECUR = value("straggler_recur_seconds")
MIN_SPAN = value("straggler_min_span_seconds")


def windows(starts, length=16.0, end=900, window=30.0):
    """Per 1 s tick, the cold cost of a rank off the GPU for `length` s from each of
    `starts` over the trailing 30 s window (its peers spin-wait all of it), and
    whether that window deviates (cost over straggler_cost_ratio; z stands out)."""
    out = []
    for t in range(end):
        lost = sum(max(0.0, min(t, s + length) - max(t - window, s)) for s in starts)
        cost = lost / window
        out.append((t, cost, cost >= COST))
    return out


def live(series):
    p = Persistence()
    confirmed = []
    for t, cost, dev in series:
        c, _ = p.update(float(t), IV, ("busy", -9.0) if dev else None, 0.0, cost)
        if c is not None:
            confirmed.append(t)
    return confirmed


def report(series):
    flags = [d for _, _, d in series]
    costs = [c if d else float("nan") for _, c, d in series]
    return straggler_spans(flags, list(range(len(series))), IV, costs)[1]


def test_checkpoints_every_250_s_make_a_straggler_at_the_second():
    series = windows([300, 552])
    confirmed = live(series)
    # one 16 s checkpoint costs its peers 16/300 of 5 minutes: the second recurs
    assert confirmed and 552 <= confirmed[0] <= 560
    # it stays one until straggler_recur_seconds pass without a deviating window
    last_dev = max(t for t, _, d in series if d)
    assert confirmed[-1] == pytest.approx(last_dev + RECUR - 1, abs=1)
    # the report: one span from the first checkpoint's window to the last's
    [(a, b)] = report(series)
    assert 300 <= a <= 302 and b == last_dev


def test_one_pause_is_no_straggler():
    # 90 s: a run of deviating windows under straggler_min_span_seconds
    series = windows([400], length=90.0)
    assert max(t for t, _, d in series if d) - min(t for t, _, d in series if d) + 1 < MIN_SPAN
    assert live(series) == []
    assert report(series) == []


def test_runs_further_apart_than_the_recurrence_window_do_not_recur():
    series = windows([100, 100 + RECUR + 60], end=int(2 * RECUR + 300))
    assert live(series) == [] and report(series) == []


def test_short_runs_that_cost_too_little_over_5_minutes_do_not_recur():
    # 4 s off the GPU every 100 s: 1.3 % of 5 minutes, though each window deviates
    series = windows(list(range(200, 800, 100)), length=4.0)
    assert any(d for _, _, d in series)
    assert live(series) == [] and report(series) == []


def test_without_costs_the_report_keeps_the_span_rule_only():
    series = windows([300, 552])
    flags = [d for _, _, d in series]
    assert straggler_spans(flags, list(range(len(series))), IV)[1] == []


def test_a_hot_gpu_flickering_in_runs_is_not_asked_to_recur():
    # the same runs in `active`: its cost is continuous, the span rule judges it
    series = windows([300, 552])
    p = Persistence()
    assert all(p.update(float(t), IV, ("active", 9.0) if d else None, 0.0, c)[0] is None for t, c, d in series)
    flags = [d for _, _, d in series]
    assert straggler_spans(flags, list(range(len(series))), IV, None)[1] == []
