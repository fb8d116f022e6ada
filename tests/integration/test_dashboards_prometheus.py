"""Every dashboard query against a real Prometheus that scrapes running gpulse exporters.

The stack: three `gpulse serve` processes (a simulated node with periodic sync
stalls, a simulated node with a straggler, both attributed to Slurm jobs, and a
`--source dcgm` node reading a dcgm-exporter endpoint), the Debian `prometheus`
scraping them every second with the shipped rule files for Prometheus
(prometheus/rules-prometheus) evaluated every second,
and each panel target sent the way Grafana sends it (step, $__interval,
$__rate_interval, $__range and dashboard variables substituted). A target that
returns no data fails with its dashboard and panel title.
"""
from __future__ import annotations

import http.server
import json
import math
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
import yaml

from conftest import ROOT, Gpulse, free_port, require_binary, require_data, wait_http

sys.path.insert(0, str(ROOT / "grafana"))
from gpulse_dashboards.grafana_queries import (choices, fixed_values, format_value, panel_queries,  # noqa: E402
                                               parse_duration_ms, substitute, variable_defaults)

DASHBOARDS = ROOT / "grafana" / "dashboards"
RULES = ROOT / "prometheus" / "rules-prometheus"     # the variant for Prometheus (prometheus/README.md)
SCRAPE = "1s"              # the test datasource's scrape interval (Grafana's timeInterval)
DASHBOARD_RANGE = "15m"    # the dashboards' time picker in this test
WAIT_FOR_DATA_S = 90       # the 5m recording rules need a few evaluations first

STALL_NODE, STRAGGLER_NODE, DCGM_NODE = "sim-stall", "sim-straggler", "dcgm-l4"
STALL_JOB, STRAGGLER_JOB = "stall-job", "straggler-job"
ALL = "$__all"

# Which variable values each dashboard is checked with. `metric` is tried with
# every choice, so each branch of the heatmap's metric switch must return data.
# The node detail looks at the dcgm node: it reports every family (the
# simulated GPUs have no NVLink, ECC or PCIe counters).
VARIABLES = {
    "gpulse-cluster-heatmap": {"cluster": ALL, "node": ALL, "workload": ALL},
    "gpulse-training-workload": {"cluster": ALL, "workload": STALL_JOB},
    "gpulse-node-detail": {"cluster": ALL, "node": DCGM_NODE, "gpu": ALL},
    "gpulse-exporter-health": {"cluster": ALL, "job": ALL, "instance": ALL},
}
# Variables tried with every choice, so each branch of a switch must return
# data: the heatmaps' colour, where cells come from, and row order.
SWITCHES = ("metric", "cells", "order")
HEATMAP = "GPU cluster heatmap / GPU heatmap"

# Families the L4 capture lacks, added the way dcgm-exporter writes them on an
# H100 so the node-detail panels (ECC, NVLink, XID, power limit) have data too.
EXTRA_DCGM_FIELDS = (
    "DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES", "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
)


class FakeDcgmExporter:
    """Serves a real dcgm-exporter capture (plus EXTRA_DCGM_FIELDS) over HTTP.
    Two early requests get 503, so the exporter's error counter exists; after
    that it answers, so the node's series do not flap in and out."""

    FAILING = (3, 4)

    def __init__(self, capture: str):
        labels = re.search(r"^DCGM_\w+(\{[^}]*\})", capture, re.M).group(1)
        self.capture, self.labels, self.requests = capture, labels, 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests += 1
                if outer.requests in outer.FAILING:
                    self.send_error(503)
                    return
                body = outer.body(outer.requests).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def body(self, n: int) -> str:
        values = (72, n // 3, 0, 2.0e9 + 1e7 * (n % 5), 1.9e9, 13 if n > 2 else 0, 1)
        extra = "".join(f"{name}{self.labels} {v}\n" for name, v in zip(EXTRA_DCGM_FIELDS, values))
        return self.capture.rstrip("\n") + "\n" + extra

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def job_map(tmp: Path, job: str, gpus: int = 8) -> str:
    d = tmp / job
    d.mkdir()
    for i in range(gpus):
        (d / str(i)).write_text(job + "\n")
    return str(d)


def fast_rules(dest: Path) -> list[str]:
    """The shipped rule files with every group evaluated each second. A group
    that differences readings one evaluation apart (`offset` equal to its
    interval: the heatmap's 15 s cell records) reads 1 s back instead, so its
    increments still tile the time axis."""
    out = []
    for f in sorted(RULES.glob("*.yml")):
        doc = yaml.safe_load(f.read_text())
        for g in doc.get("groups", []):
            if "interval" in g:
                for r in g["rules"]:
                    r["expr"] = r["expr"].replace(f"offset {g['interval']})", "offset 1s)")
            g["interval"] = "1s"
        p = dest / f.name
        p.write_text(yaml.safe_dump(doc, sort_keys=False))
        out.append(str(p))
    return out


def start_prometheus(prometheus: str, tmp: Path, procs: list[Gpulse], scrape: str) -> tuple[str, subprocess.Popen]:
    """A real Prometheus scraping `procs` every `scrape` and evaluating the shipped
    rules every second; returns its URL once ready, and its process."""
    rules_dir = tmp / "rules"
    rules_dir.mkdir()
    config = {
        "global": {"scrape_interval": scrape, "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "rule_files": fast_rules(rules_dir),
        "scrape_configs": [{"job_name": "gpulse", "static_configs": [
            {"targets": [g.url.removeprefix("http://") for g in procs]}]}],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [prometheus, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_http(url + "/-/ready", timeout=30)
    except BaseException:
        proc.terminate()
        proc.wait(timeout=10)
        raise
    return url, proc


class Stack:
    def __init__(self, tmp: Path):
        prometheus = require_binary("prometheus")
        capture = require_data("captures/dcgm-exporter/l4-gpu-operator.prom").read_text()
        self.procs: list[Gpulse] = []
        self.dcgm = FakeDcgmExporter(capture)
        self.prom: subprocess.Popen | None = None
        try:
            self.procs = [
                Gpulse("--source", "sim", "--sim.scenario", "sync-stall", "--node-name", STALL_NODE,
                       "--slurm.job-map-dir", job_map(tmp, STALL_JOB)),
                Gpulse("--source", "sim", "--sim.scenario", "straggler", "--node-name", STRAGGLER_NODE,
                       "--slurm.job-map-dir", job_map(tmp, STRAGGLER_JOB)),
                Gpulse("--source", "dcgm", "--dcgm.url", self.dcgm.url, "--node-name", DCGM_NODE),
            ]
            self.url, self.prom = start_prometheus(prometheus, tmp, self.procs, SCRAPE)
        except BaseException:
            self.close()
            raise

    def api(self, path: str, **params) -> list:
        r = requests.post(self.url + "/api/v1/" + path, data=params, timeout=30)
        body = r.json()
        if body.get("status") != "success":
            raise AssertionError(f"{body.get('errorType')}: {body.get('error')} for {params}")
        return body["data"]["result"] if isinstance(body["data"], dict) else body["data"]

    def close(self):
        if self.prom is not None and self.prom.poll() is None:
            self.prom.terminate()
            self.prom.wait(timeout=10)
        for g in self.procs:
            g.stop()
        self.dcgm.close()


def load(uid: str) -> dict:
    return json.loads((DASHBOARDS / f"{uid}.json").read_text())


@dataclass(frozen=True)
class Request:
    where: str          # dashboard / panel [ref] (metric=N)
    expr: str           # variables substituted
    instant: bool
    step_s: float
    range_ms: int


def grafana_requests(uid: str, choice: dict[str, str | list[str]] | None = None) -> list[Request]:
    """Every target of a dashboard as Grafana would send it, for one choice of
    the dashboard's variables (VARIABLES[uid] by default)."""
    d = load(uid)
    defs = variable_defaults(d)
    chosen = dict(fixed_values(d))
    chosen.update({k: format_value(defs[k], v) for k, v in {**VARIABLES[uid], **(choice or {})}.items()})
    dash_range = parse_duration_ms(DASHBOARD_RANGE)
    out = []
    for q in panel_queries(d):
        timing = q.timing(dash_range, scrape_interval=SCRAPE)
        combos = [{}]
        for name in SWITCHES:
            if "${" + name + "}" in q.expr:
                combos = [dict(c, **{name: v}) for c in combos for v in choices(d, name)]
        for combo in combos:
            out.append(Request(where=q.where + "".join(f" {k}={v}" for k, v in combo.items()),
                               expr=substitute(q.expr, timing, dict(chosen, **combo)), instant=q.instant,
                               step_s=timing.step_ms / 1000, range_ms=timing.range_ms))
    return out


def empty_targets(stack: "Stack", uid: str, choice: dict | None = None) -> list[str]:
    """Targets that return no data."""
    return [r.where for r in grafana_requests(uid, choice) if not run(stack, r)]


def run(stack: Stack, req: Request) -> list:
    end = time.time()
    if req.instant:
        return stack.api("query", query=req.expr, time=end)
    # whole steps ending now, so the newest point falls inside the short run
    start = end - math.ceil(req.range_ms / 1000 / req.step_s) * req.step_s
    return stack.api("query_range", query=req.expr, start=start, end=end, step=req.step_s)


def find(uid: str, where: str) -> Request:
    return next(r for r in grafana_requests(uid) if r.where == where)


def heatmap_requests() -> list[Request]:
    return [r for r in grafana_requests("gpulse-cluster-heatmap") if r.where.startswith(HEATMAP)]


def heatmap_rows_missing(stack: "Stack") -> bool:
    """Some GPU has no heatmap row yet (a source's first 5m rule value comes a
    few evaluations after its first scrape)."""
    gpus = len(stack.api("query", query="gpulse_gpu_up"))
    return any(len(run(stack, r)) < gpus for r in heatmap_requests())


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("dashboards-prometheus"))
    try:
        # Wait until every target of every dashboard has data (or give up and
        # let the tests name the ones that do not).
        deadline = time.monotonic() + WAIT_FOR_DATA_S
        while time.monotonic() < deadline and (any(empty_targets(s, uid) for uid in VARIABLES)
                                               or heatmap_rows_missing(s)):
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
