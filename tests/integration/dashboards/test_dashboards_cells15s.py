"""The heatmap's default cells (the 15 s cell records) against its raw-counter
cells, on a real trace.

The real 8xH100 ckpt1 trace is exported with `gpulse export` at a 15 s scrape,
backfilled into the Debian `prometheus` with the shipped recording rules
(`promtool tsdb create-blocks-from rules`), and the cluster dashboard's GPU
heatmap and node overview are queried as Grafana sends them. At the 15 s group's
own evaluation instants:

- 15 s cells (a 1 h range on a 1,600 px panel) equal the raw cells exactly;
- 1-minute cells (4 h) equal the raw 1-minute cells exactly: the four
  increments ending within the cell, none from the cell before;
- rows come node by node, GPUs in index order, with no label function in the
  query, and the node overview row is the sum of its GPUs' increments.
"""
from __future__ import annotations

import json

import pytest
import requests

from backfill import NODE, backfilled
from bench import stall_visibility as sv

RECORD = 'node_gpu:gpulse_gpu_cell_seconds:increase15s{signal="sampled"}'
RECORDS, RAW = "increase15s", "seconds_total"


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    # a start off the 15 s grid, as a live ruler's evaluations are
    with backfilled(tmp_path_factory, "cells15s", 607) as p:
        yield p


def _range(url: str, expr: str, start: float, end: float, step: float, key: str = "device"):
    r = requests.post(url + "/api/v1/query_range", data=dict(query=expr, start=start, end=end, step=step),
                      timeout=120).json()
    assert r["status"] == "success", r
    return [(s["metric"][key], {float(t): float(v) for t, v in s["values"]}) for s in r["data"]["result"]]


def _evaluations(url: str, start: float, end: float, record: str = RECORD) -> list[float]:
    r = requests.get(url + "/api/v1/query", params=dict(query=f"{record}[{int(end - start) + 1200}s]",
                                                      time=end + 600), timeout=60).json()
    assert r["status"] == "success" and r["data"]["result"], r
    return sorted({float(t) for s in r["data"]["result"] for t, _ in s["values"]})


def _request(range_s: int, panel: str = sv.HEATMAP, **choice):
    dash = json.loads(sv.DASHBOARD.read_text())
    return sv.grafana_request(dash, panel, NODE, range_s, "15s", order="natural", **choice)


def _assert_equal(got: dict, want: dict) -> None:
    assert len(want) == 8 and sorted(got) == sorted(want)
    n = 0
    for row, cells in got.items():
        for t, v in cells.items():
            assert want[row][t] == pytest.approx(v, abs=1e-9), (row, t)
            n += 1
    assert n >= 8 * 8
    # the trace is not one flat tone: its stalls make cells differ
    values = [v for c in got.values() for v in c.values()]
    assert len({round(v, 3) for v in values}) >= 10 and min(values) < 0.05 < max(values)


@pytest.mark.parametrize("metric", ["active|busy", "busy", "active"])
def test_15s_cells_equal_the_raw_counter_cells(prom, metric):
    p, start, end = prom
    fast, step = _request(3600, metric=metric, cells=RECORDS)
    raw, _ = _request(3600, metric=metric, cells=RAW)
    assert step == 15
    evals = [t for t in _evaluations(p.url, start, end) if start + 30 <= t <= end]
    assert len(evals) >= 20 and all(b - a == pytest.approx(15) for a, b in zip(evals, evals[1:]))
    got = dict(_range(p.url, fast, evals[0], evals[-1], step))
    want = dict(_range(p.url, raw, evals[0], evals[-1], step))
    assert {len(c) for c in got.values()} == {len(evals)}      # a cell at every evaluation
    _assert_equal(got, want)


@pytest.mark.parametrize("metric", ["active|busy", "busy", "active"])
def test_minute_cells_equal_the_raw_counter_cells(prom, metric):
    p, start, end = prom
    fast, step = _request(4 * 3600, metric=metric, cells=RECORDS)
    raw, _ = _request(4 * 3600, metric=metric, cells=RAW)
    assert step == 60
    evals = [t for t in _evaluations(p.url, start, end) if start + 90 <= t <= end]
    t0, t1 = evals[0], evals[0] + (evals[-1] - evals[0]) // 60 * 60
    got = dict(_range(p.url, fast, t0, t1, step))
    want = dict(_range(p.url, raw, t0, t1, step))
    _assert_equal(got, want)


def test_rows_in_node_then_gpu_order_and_the_node_row_sums_its_gpus(prom):
    p, start, end = prom
    evals = [t for t in _evaluations(p.url, start, end) if start + 30 <= t <= end]
    rows = _range(p.url, _request(3600, cells=RECORDS)[0], evals[0], evals[-1], 15)
    assert [d for d, _ in rows] == [f"{NODE}/{g:02d}" for g in range(8)]
    # the node row at the node sums' own evaluations (promtool evaluates each
    # level of rules at its own offset): its GPUs' latest increments, summed
    node_evals = [t for t in _evaluations(p.url, start, end, 'node:gpulse_gpu_cell_seconds:increase15s{signal="sampled"}')
                  if start + 30 <= t <= end]
    (node, got), = _range(p.url, _request(3600, "Nodes", cells=RECORDS)[0], node_evals[0], node_evals[-1], 15,
                          "node")
    gpus = ('sum(last_over_time(node_gpu:gpulse_gpu_cell_seconds:increase15s{signal="active|busy"}[14999ms]))'
            ' / sum(last_over_time(node_gpu:gpulse_gpu_cell_seconds:increase15s{signal="sampled"}[14999ms]))')
    (_, want), = _range(p.url, f'label_replace({gpus}, "node", "{NODE}", "", "")', node_evals[0], node_evals[-1],
                        15, "node")
    assert node == NODE and len(got) == len(node_evals) and sorted(got) == sorted(want)
    values = list(got.values())
    assert min(values) < 0.05 < max(values)
    for t, v in got.items():
        assert v == pytest.approx(want[t], abs=1e-9), t


@pytest.mark.parametrize("panel", [sv.HEATMAP, "Nodes"])
def test_one_evaluation_gpu_cells_read_the_recorded_shares_and_other_cells_divide(prom, panel):
    """The GPU rows' 15 s cells read the shares recorded already divided
    (gpulse_gpu_cell_ratio, whose series keep their `signal`); their 1-minute cells,
    and the node rows' cells at any length, sum the increments and divide (the
    division drops `signal`). Exactly one branch answers."""
    p, start, end = prom
    for range_s, step_s in ((3600, 15), (4 * 3600, 60)):
        expr, step = _request(range_s, panel, cells=RECORDS)
        assert step == step_s
        r = requests.post(p.url + "/api/v1/query_range",
                          data=dict(query=expr, start=start + 120, end=end, step=step), timeout=120).json()
        series = r["data"]["result"]
        assert len(series) == (8 if panel == sv.HEATMAP else 1), (range_s, [s["metric"] for s in series])
        recorded = panel == sv.HEATMAP and step_s == 15
        assert {s["metric"].get("signal") for s in series} == ({"active|busy"} if recorded else {None}), range_s
