"""The stall a record's end cuts (analysis.coidle, End of a log), on hand-made runs."""
from __future__ import annotations

import pytest

from gpulse.analysis.coidle import Run, StallTracker
from gpulse.analysis.thresholds import value

DT = 0.1
WARM = "#" * 60      # 6 s of work: the job has started


def runs(pattern: str, holds: str | None = None) -> list[Run]:
    """'#' active, '.' inactive, one char per DT; holds: 'h' held, '-' released (default all held)."""
    holds = holds or "h" * len(pattern)
    return [Run(i * DT, (i + 1) * DT, c == ".", h == "h") for i, (c, h) in enumerate(zip(pattern, holds))]


def track(*members: str, holds: list[str] | None = None) -> StallTracker:
    tr = StallTracker(min_stall=0.2)
    rs = [runs(m, (holds or [None] * len(members))[i]) for i, m in enumerate(members)]
    tr.advance(rs, until=len(members[0]) * DT)
    return tr


def test_stall_in_progress_at_the_end_is_an_open_episode():
    tr = track(WARM + "." * 30, WARM + "." * 30)
    assert tr.in_stall and tr.stalls_total == 0
    [ep] = tr.final_episodes()
    assert ep.open and ep.start == pytest.approx(6.0) and ep.duration == pytest.approx(3.0)
    assert ep.stalled == pytest.approx(tr.stall_seconds)       # the live counter's seconds


def test_open_stall_merges_with_the_stretch_before_it():
    # 2 s stalled, 0.3 s of work (under stall_merge_ratio of the longer), 2 s stalled to the end
    p = WARM + "." * 20 + "###" + "." * 20
    tr = track(p, p)
    eps = tr.final_episodes()
    assert [e.open for e in eps] == [True]
    assert eps[0].start == pytest.approx(6.0) and eps[0].duration == pytest.approx(4.3)
    assert eps[0].stalled == pytest.approx(4.0)


def test_closed_episodes_before_the_open_one_stay_closed():
    p = WARM + "." * 5 + "#" * 80 + "." * 5
    tr = track(p, p)
    eps = tr.final_episodes()
    assert [e.open for e in eps] == [False, True]
    assert tr.recent_episodes() == eps[:1]        # the live rhythm never sees the open one


def test_a_member_that_released_its_memory_is_the_job_ending():
    p = WARM + "." * 30
    tr = track(p, p, holds=["h" * len(p), "h" * (len(p) - 10) + "-" * 10])
    assert not any(e.open for e in tr.final_episodes())


def test_idle_with_memory_held_longer_than_a_stall_lasts_is_no_stall():
    n = int((value("stall_open_max_seconds") + 1.0) / DT)
    tr = track(WARM + "." * n, WARM + "." * n)
    assert tr.in_stall and tr.final_episodes() == []


def test_too_short_to_count_is_not_an_episode_yet():
    tr = track(WARM + ".", WARM + ".")
    assert tr.in_stall and tr.final_episodes() == []
