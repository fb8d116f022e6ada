"""The dashboards' stack, for tests and benchmarks: three `gpulse serve` processes (a
simulated node with periodic sync stalls, a simulated node with a straggler, both
attributed to Slurm jobs, and a `--source dcgm` node reading a fake dcgm-exporter
that serves a real capture), the Debian `prometheus` scraping them every second with
the shipped rule files for Prometheus (prometheus/rules-prometheus) evaluated every
second; and each panel target as Grafana sends it (step, $__interval, $__rate_interval,
$__range and dashboard variables substituted, testing/grafana_queries.py)."""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import requests
import yaml

from testing import ROOT
from testing.daemons import Gpulse, require_binary, require_data
from testing.fakedcgm import node_exporter
from testing.grafana_queries import (choices, fixed_values, format_value, panel_queries, parse_duration_ms,
                                     substitute, variable_defaults)
from testing.promutil import Prometheus


DASHBOARDS = ROOT / "grafana" / "dashboards"


RULES = ROOT / "prometheus" / "rules-prometheus"     # the variant for Prometheus (prometheus/README.md)


SCRAPE = "1s"              # the test datasource's scrape interval (Grafana's timeInterval)


DASHBOARD_RANGE = "15m"    # the dashboards' time picker in this test


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


def start_prometheus(tmp: Path, procs: list[Gpulse], scrape: str) -> Prometheus:
    """A real Prometheus scraping `procs` every `scrape` and evaluating the shipped
    rules every second, ready."""
    rules_dir = tmp / "rules"
    rules_dir.mkdir()
    return Prometheus(tmp, [g.url.removeprefix("http://") for g in procs], fast_rules(rules_dir), scrape=scrape,
                      scrape_timeout="900ms")


class Stack:
    def __init__(self, tmp: Path):
        require_binary("prometheus")
        capture = require_data("captures/dcgm-exporter/l4-gpu-operator.prom").read_text()
        self.procs: list[Gpulse] = []
        self.dcgm = node_exporter(capture)
        self.prom: Prometheus | None = None
        try:
            self.procs = [
                Gpulse("--source", "sim", "--sim.scenario", "sync-stall", "--node-name", STALL_NODE,
                       "--slurm.job-map-dir", job_map(tmp, STALL_JOB)),
                Gpulse("--source", "sim", "--sim.scenario", "straggler", "--node-name", STRAGGLER_NODE,
                       "--slurm.job-map-dir", job_map(tmp, STRAGGLER_JOB)),
                Gpulse("--source", "dcgm", "--dcgm.url", self.dcgm.url, "--node-name", DCGM_NODE),
            ]
            self.prom = start_prometheus(tmp, self.procs, SCRAPE)
            self.url = self.prom.url
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
        if self.prom is not None:
            self.prom.stop()
        for g in self.procs:
            g.stop()
        self.dcgm.stop()


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
    """A request as Grafana sends it with the dashboard's range ending now, or at the
    stack's `at` (a store of series recorded in virtual time, looked at as they end)."""
    end = getattr(stack, "at", None) or time.time()
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


def dashboards() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def all_panels(d: dict):
    for p in d.get("panels", []):
        yield p
        yield from p.get("panels", []) or []
