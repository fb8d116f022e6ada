"""bench/stall_visibility.py, shortened: 5 minutes of the real ckpt50 trace exported
with `gpulse export`, backfilled into the Debian `prometheus` with the recording rules,
and the cluster dashboard's heatmap and stall strip queried as Grafana would.

Its checkpoint stalls (GPU 0 writes, GPUs 1-7 spin at 100 % busy and ~150 W) must be
dark columns across all 8 GPUs in the default colouring, while busy alone hides them;
and at a 60 s scrape the stalls shorter than a scrape must show in the strip.
"""
from __future__ import annotations


import pytest

from conftest import require_binary
from realtrace import cut_trace
from bench import stall_visibility as sv  # noqa: E402

WORK = "active|busy"


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    require_binary("prometheus")
    require_binary("promtool")
    return cut_trace(tmp_path_factory.mktemp("trace") / "ckpt50-cut.csv", 100, 300)


def test_stalls_longer_than_two_scrapes_are_dark_columns(trace, tmp_path):
    rows = sv.measure([trace], "15s", tmp_path, ranges=("15m", "run"), metrics=[WORK, "busy"],
                      cells_modes=["seconds_total"], progress=lambda _: None)
    assert len(rows) == 2
    for r in rows:
        assert r["step"] == 15, r          # a cell is one scrape interval at these ranges
        assert r["long"] >= 1, r
        assert r[f"dark {WORK}"] >= 0.95, r
        # busy reads ~100 % on the spinning GPUs: the stall is not a dark column there
        assert r["dark busy"] < 0.5, r


def test_stalls_shorter_than_a_scrape_show_in_the_strip(trace, tmp_path):
    (row,) = sv.measure([trace], "60s", tmp_path, ranges=("run",), metrics=[WORK],
                        cells_modes=["seconds_total"], progress=lambda _: None)
    assert row["short"] >= 3 and row["short_s"] > 10, row
    assert row["strip"] >= 0.95, row
