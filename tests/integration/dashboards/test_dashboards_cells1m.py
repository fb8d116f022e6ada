"""The heatmap's "1m rules" cells against its raw-counter cells, on a real trace.

The real 8xH100 ckpt1 trace is exported with `gpulse export` at a 15 s scrape,
backfilled into the Debian `prometheus` with the shipped recording rules
(`promtool tsdb create-blocks-from rules`), and the cluster dashboard's GPU
heatmap is queried as Grafana sends it for a 4 h range on a 1,600 px panel: a
1-minute cell, four scrapes each. At the 1m group's own evaluation instants the
two choices must give the same cells for every GPU and colouring, so the same
stall columns; at Grafana's step-aligned instants a "1m rules" cell is the raw
cell ending at the group's last evaluation (under a minute earlier).
"""
from __future__ import annotations

import json

import pytest
import requests

from backfill import NODE, backfilled
from bench import stall_visibility as sv

FOUR_HOURS = 4 * 3600
RECORD = 'node_gpu:gpulse_gpu_cell_seconds:cells1m{signal="sampled"}'


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with backfilled(tmp_path_factory, "cells1m", 600) as p:
        yield p


def _range(url: str, expr: str, start: float, end: float, step: float) -> dict[str, dict[float, float]]:
    r = requests.post(url + "/api/v1/query_range", data=dict(query=expr, start=start, end=end, step=step),
                      timeout=120).json()
    assert r["status"] == "success", r
    return {s["metric"]["device"]: {float(t): float(v) for t, v in s["values"]} for s in r["data"]["result"]}


def _evaluations(url: str, start: float, end: float) -> list[float]:
    """The instants the 1m cell group was evaluated at (its samples' timestamps)."""
    r = requests.get(url + "/api/v1/query", params=dict(query=f"{RECORD}[{int(end - start) + 1200}s]",
                                                      time=end + 600), timeout=60).json()
    assert r["status"] == "success" and r["data"]["result"], r
    return sorted({float(t) for s in r["data"]["result"] for t, _ in s["values"]})


def _dark_columns(cells: dict[str, dict[float, float]]) -> set[float]:
    times = set().union(*(c.keys() for c in cells.values()))
    return {t for t in times if all(t in c and c[t] <= sv.DARK + 1e-9 for c in cells.values())}


@pytest.mark.parametrize("metric", ["active|busy", "busy", "active"])
def test_whole_minute_cells_equal_the_raw_counter_cells(prom, metric):
    p, start, end = prom
    dash = json.loads(sv.DASHBOARD.read_text())
    raw, step = sv.grafana_request(dash, sv.HEATMAP, NODE, FOUR_HOURS, "15s", metric=metric,
                                   cells="seconds_total", order="natural")
    fast, _ = sv.grafana_request(dash, sv.HEATMAP, NODE, FOUR_HOURS, "15s", metric=metric,
                                 cells="cells1m", order="natural")
    assert step == 60, step
    evals = [t for t in _evaluations(p.url, start, end) if start + 60 <= t <= end]
    assert len(evals) >= 8, evals
    assert all(b - a == pytest.approx(60) for a, b in zip(evals, evals[1:])), evals

    want = _range(p.url, raw, evals[0], evals[-1], step)
    got = _range(p.url, fast, evals[0], evals[-1], step)
    assert len(want) == 8 and sorted(got) == sorted(want)
    for row, cells in want.items():
        assert sorted(got[row]) == sorted(cells), row
        for t, v in cells.items():
            assert got[row][t] == pytest.approx(v, abs=1e-9), (row, t)
    # the trace is not one flat tone: its stalls make cells differ
    values = [v for c in want.values() for v in c.values()]
    assert len({round(v, 3) for v in values}) >= 10 and min(values) < 0.05 < max(values)
    assert _dark_columns(got) == _dark_columns(want)

    # on Grafana's grid (whole minutes since the epoch) a cell shows the minute
    # ending at the group's last evaluation before it
    t0, t1 = (evals[0] // step + 1) * step, evals[-1] // step * step
    aligned = _range(p.url, fast, t0, t1, step)
    for row, cells in aligned.items():
        for t, v in cells.items():
            last = max(e for e in evals if e <= t)
            assert v == pytest.approx(want[row][last], abs=1e-9), (row, t, last)


def test_below_a_minute_the_rules_hold_one_cell_a_minute(prom):
    """Why the 1m rules are not the default: at 15 s cells (a 1 h range) only the cells
    that hold an evaluation of the 1m group have a value."""
    p, start, end = prom
    dash = json.loads(sv.DASHBOARD.read_text())
    fast, step = sv.grafana_request(dash, sv.HEATMAP, NODE, 3600, "15s", metric="active|busy",
                                    cells="cells1m", order="natural")
    raw, _ = sv.grafana_request(dash, sv.HEATMAP, NODE, 3600, "15s", metric="active|busy",
                                cells="seconds_total", order="natural")
    assert step == 15
    lo, hi = (start + 120) // step * step, end // step * step
    n_fast = sum(len(c) for c in _range(p.url, fast, lo, hi, step).values())
    n_raw = sum(len(c) for c in _range(p.url, raw, lo, hi, step).values())
    assert n_raw > 0 and n_fast == pytest.approx(n_raw / 4, rel=0.15), (n_fast, n_raw)
