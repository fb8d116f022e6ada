"""The Prometheus range reader's step grid and how a long range is split into queries."""
from __future__ import annotations


def test_step_and_chunks():
    from gpulse.sources.prom import chunks, choose_step
    assert choose_step(0, 3600, 15.0) == 15.0          # never finer than the scrape interval
    assert choose_step(0, 4 * 3600, 1.0) == 4.0        # about 4000 columns
    assert choose_step(0, 30 * 86400, None) == 60.0    # coarser ranges are split instead
    parts = chunks(0.0, 100.0, 1.0, 11)
    assert parts[0] == (0.0, 10.0) and parts[-1][1] == 100.0
    assert all(b < c for (_, b), (c, _) in zip(parts, parts[1:]))          # no step fetched twice
    assert sum(int(b - a) + 1 for a, b in parts) == 101                   # and none missed


def test_grid_reads_like_the_mapping_it_replaces():
    from gpulse.sources.prom import Grid
    g = Grid(1000.0, 15.0, 4)
    g.put_all([[1000, "1"], [1030.0, "3.5"], [1075, "9"], [985, "7"]])   # the last two: off the grid
    assert [g.get(t) for t in (1000.0, 1015.0, 1030.0, 1045.0)] == [1.0, None, 3.5, None]
    assert g.get(1015.0, -1.0) == -1.0 and g.get(5000.0) is None
    assert g.values() == [1.0, 3.5]
