"""A Prometheus that scrapes gpulse without gpulse's recording rules.

The heatmaps' "Cells from" starts at the 15 s cell records, which only the rules
write: with a real Prometheus holding the raw series alone, those panels' default
queries (as Grafana sends them) return nothing, and the panel says why and what to
pick instead (its no-data text); the choice it names, raw counters, draws the cells.
"""
from __future__ import annotations

import sys
import time

import requests

from conftest import ROOT
from testing.promutil import Prometheus
from testing.dashstack import grafana_requests, load, run

sys.path.insert(0, str(ROOT / "grafana"))
from gpulse_dashboards.common import CELLS_CHOICES, CELLS_NO_DATA, DEFAULT_CELLS  # noqa: E402

RAW = "seconds_total"


def cell_panels(uid: str) -> list[dict]:
    d = load(uid)
    panels = [p for top in d["panels"] for p in (top, *(top.get("panels") or []))]
    return [p for p in panels if any("${cells}" in t.get("expr", "") for t in p.get("targets", []))]


def test_every_panel_reading_cells_says_what_is_missing():
    assert DEFAULT_CELLS != RAW and dict((v, t) for t, v in CELLS_CHOICES)[RAW].startswith("raw counters")
    for uid in ("gpulse-cluster-heatmap", "gpulse-training-workload"):
        panels = cell_panels(uid)
        assert panels, uid
        for p in panels:
            assert p["fieldConfig"]["defaults"].get("noValue") == CELLS_NO_DATA, (uid, p["title"])
    assert "gpulse-recording.rules.yml" in CELLS_NO_DATA and "'raw counters'" in CELLS_NO_DATA


class _Api:
    def __init__(self, url: str):
        self.url = url

    def api(self, path: str, **params) -> list:
        body = requests.post(self.url + "/api/v1/" + path, data=params, timeout=30).json()
        assert body.get("status") == "success", body
        return body["data"]["result"]


def test_without_the_rules_the_default_is_empty_and_raw_counters_draw(tmp_path, gpulse_proc):
    g = gpulse_proc("--source", "sim", "--sim.scenario", "sync-stall", "--sim.gpus", "4", "--node-name", "n1")
    prom = Prometheus(tmp_path, [g.url.removeprefix("http://")], rules=[])
    try:
        stack = _Api(prom.url)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:        # a few scrapes of every GPU stored
            got = stack.api("query", query="count_over_time(gpulse_gpu_sampled_seconds_total[1m])")
            if len(got) == 4 and min(float(s["value"][1]) for s in got) >= 6:
                break
            time.sleep(0.5)
        reqs = [r for r in grafana_requests("gpulse-cluster-heatmap")
                if r.where.split(" / ")[1].split(" [")[0] in ("GPU heatmap", "Nodes heatmap")
                and " metric=active|busy" in r.where and " order=.+" not in r.where]
        default = [r for r in reqs if f" cells={DEFAULT_CELLS}" in r.where]
        raw = [r for r in reqs if f" cells={RAW}" in r.where]
        assert default and len(default) == len(raw), [r.where for r in reqs]
        for r in default:
            assert run(stack, r) == [], f"{r.where}: data without the recording rules"
        for r in raw:
            assert len(run(stack, r)) >= 1, f"{r.where}: no cells from the raw counters"
    finally:
        prom.stop()
