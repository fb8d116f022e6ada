"""Every dashboard query against a real Prometheus that scrapes running gpulse exporters
(the stack of testing/dashstack.py), each panel target sent the way Grafana sends it.
A target that returns no data fails with its dashboard and panel title.
"""
from __future__ import annotations

import re
import time

import pytest
import requests

from testing.dashstack import (ALL, HEATMAP, STALL_JOB, STALL_NODE, STRAGGLER_JOB, STRAGGLER_NODE, VARIABLES, Stack,
                               empty_targets, find, grafana_requests, heatmap_requests, heatmap_rows_missing, load,
                               run)
from testing.grafana_queries import fixed_values, format_value, parse_duration_ms, variable_defaults

WAIT_FOR_DATA_S = 90       # the 5m recording rules need a few evaluations first


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("dashboards-prometheus"))
    try:
        # Wait until every target of every dashboard has data (or give up and
        # let the tests name the ones that do not). A target asked again only while
        # it has none: once a series is scraped it stays in the range.
        deadline = time.monotonic() + WAIT_FOR_DATA_S
        waiting = [r for uid in VARIABLES for r in grafana_requests(uid)]
        while time.monotonic() < deadline:
            waiting = [r for r in waiting if not run(s, r)]
            if not waiting and not heatmap_rows_missing(s):
                break
            time.sleep(2)
        yield s
    finally:
        s.close()


@pytest.mark.parametrize("uid", sorted(VARIABLES))
def test_every_panel_query_returns_data(stack, uid):
    empty = empty_targets(stack, uid)
    assert not empty, "panel queries that returned no data:\n  " + "\n  ".join(empty)


def test_cluster_dashboard_with_several_nodes_and_workloads_selected(stack):
    """Multi-value variables reach Prometheus as regex alternations, (a|b)."""
    choice = {"node": [STALL_NODE, STRAGGLER_NODE], "workload": [STALL_JOB, STRAGGLER_JOB]}
    reqs = grafana_requests("gpulse-cluster-heatmap", choice)
    assert any('node=~"(sim-stall|sim-straggler)"' in r.expr for r in reqs)
    empty = empty_targets(stack, "gpulse-cluster-heatmap", choice)
    assert not empty, "panel queries that returned no data:\n  " + "\n  ".join(empty)
    heatmap = next(r for r in reqs if r.where.startswith(HEATMAP))
    assert {s["metric"]["node"] for s in run(stack, heatmap)} == {STALL_NODE, STRAGGLER_NODE}


def test_heatmap_has_one_row_per_gpu_labelled_node_and_gpu_in_node_order(stack):
    gpus = {(s["metric"]["node"], s["metric"]["gpu"]) for s in stack.api("query", query="gpulse_gpu_up")}
    assert len(gpus) == 8 + 8 + 1
    heatmap = heatmap_requests()
    assert len(heatmap) == 4 * 4 * 2     # metric x cells (15 s records, counters, 1m rules, 5m rules) x order
    for req in heatmap:
        where, series = req.where, run(stack, req)
        rows = [(s["metric"].get("node"), s["metric"].get("gpu")) for s in series]
        assert len(rows) == len(set(rows)) == len(gpus), f"{where}: {rows}"
        assert set(rows) == gpus, where
        if "order=natural" in where:
            # rows come back grouped by node, GPUs in index order within a node
            assert rows == sorted(rows, key=lambda r: (r[0], int(r[1]))), f"{where}: {rows}"
        values = [float(v) for s in series for _, v in s["values"]]
        assert all(v >= 0 for v in values), f"{where}: value below 0"
        assert_shares(where, values)


def assert_shares(where: str, values: list[float]) -> None:
    """Cells within 0..1: strictly for the recorded cells, whose work and sampled
    time come from one rule, so from the same scrapes however loaded the machine;
    with a margin for the others (a power draw can overshoot its limit)."""
    recorded = "cells=increase15s" in where or "cells=cells1m" in where
    over = [v for v in values if v > (1 + 1e-9 if recorded else 1.05) or v < 0]
    assert not over, f"{where}: value outside 0..1: {over[:5]}"


def test_overview_cells_are_shares(stack):
    rows = [r for r in grafana_requests("gpulse-cluster-heatmap")
            if r.where.startswith(("GPU cluster heatmap / Nodes", "GPU cluster heatmap / Workloads"))]
    assert {"Nodes", "Workloads"} == {r.where.split(" / ")[1].split(" ")[0] for r in rows}
    for req in rows:
        series = run(stack, req)
        assert series, req.where
        assert_shares(req.where, [float(v) for s in series for _, v in s["values"]])


def test_workloads_overview_honours_the_node_filter(stack):
    """All nodes: one row per job. One node picked: only the jobs on it, whatever the
    colouring and the cells' data, from that node's GPUs."""
    def workloads(node) -> dict[str, set[str]]:
        rows = [r for r in grafana_requests("gpulse-cluster-heatmap", {"node": node})
                if r.where.startswith("GPU cluster heatmap / Workloads")]
        assert len(rows) == 4 * 4, [r.where for r in rows]      # metric x cells
        return {r.where: {s["metric"]["workload"] for s in run(stack, r)} for r in rows}
    assert set(map(frozenset, workloads(ALL).values())) == {frozenset({STALL_JOB, STRAGGLER_JOB})}
    picked = workloads([STALL_NODE])
    assert set(map(frozenset, picked.values())) == {frozenset({STALL_JOB})}, picked


def test_straggler_and_stall_panels_show_the_simulated_failures(stack):
    uid = "gpulse-cluster-heatmap"
    outliers = run(stack, find(uid, "GPU cluster heatmap / Outliers: gap to peers over time [A]"))
    flagged = {(s["metric"]["node"], s["metric"]["gpu"], s["metric"]["signal"]) for s in outliers}
    # the straggler scenario runs GPU 1 at 99 % while its peers run at 60 %
    assert (STRAGGLER_NODE, "1", "active") in flagged
    assert all(node == STRAGGLER_NODE for node, _, _ in flagged), flagged
    period = run(stack, find(uid, "GPU cluster heatmap / Stall period [A]"))
    assert {s["metric"].get("workload") for s in period} == {STALL_JOB}
    # the sync-stall scenario stalls every 2 s
    assert abs(float(period[0]["values"][-1][1]) - 2.0) < 0.5


def test_variable_queries_list_values(stack):
    """Each `label_values(selector, label)` variable, sent as Grafana does it."""
    for uid, choice in VARIABLES.items():
        d = load(uid)
        defs = variable_defaults(d)
        formatted = {k: format_value(defs[k], v) for k, v in choice.items()}
        for v in defs.values():
            if v["name"] == "cluster":
                continue   # these exporters carry no cluster label: an empty list is right
            if v["type"] != "query":
                continue
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", v["query"])
            assert m, f"{uid} ${v['name']}: unexpected variable query {v['query']!r}"
            selector = re.sub(r"\$(\w+)", lambda x: formatted[x.group(1)], m.group(1))
            r = requests.get(f"{stack.url}/api/v1/label/{m.group(2)}/values",
                             params={"match[]": selector}, timeout=10).json()
            assert r["status"] == "success" and r["data"], f"{uid} ${v['name']}: no values for {v['query']}"


def test_alert_annotation_queries_are_valid(stack):
    for uid in VARIABLES:
        d = load(uid)
        defs = variable_defaults(d)
        formatted = {**fixed_values(d), **{k: format_value(defs[k], v) for k, v in VARIABLES[uid].items()}}
        annotations = d.get("annotations", {}).get("list", [])
        assert annotations, f"{uid}: no alert annotation"
        for a in annotations:
            expr = re.sub(r"\$(\w+)", lambda x: formatted[x.group(1)], a["expr"])
            # ALERTS is empty until an alert has been pending; the query must still parse and run
            stack.api("query_range", query=expr, start=time.time() - 600, end=time.time(),
                      step=parse_duration_ms(a["step"]) / 1000)
