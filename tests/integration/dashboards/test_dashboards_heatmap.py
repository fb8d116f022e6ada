"""The heatmaps: row order, colour language, data links and runbook links.

The order tests run the dashboards' queries, as Grafana sends them, against the
Debian `prometheus` scraping two simulated 12-GPU nodes (GPU indices past 9, so
"10" sorting before "2" would show), one of them with a hot straggler.
"""
from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest
import requests

from conftest import ROOT, Gpulse, require_binary
from testing.dashstack import all_panels as panels, dashboards as all_dashboards
from testing.dashstack import Request, load, start_prometheus

sys.path.insert(0, str(ROOT / "grafana"))
sys.path.insert(0, str(ROOT / "exporter"))
from gpulse import palette  # noqa: E402
from gpulse_dashboards.common import RUNBOOK_BASE  # noqa: E402
from testing.grafana_queries import (fixed_values, format_value, panel_queries,  # noqa: E402
                                     parse_duration_ms, substitute, variable_defaults)

DASHBOARDS = ROOT / "grafana" / "dashboards"
UIDS = {p.stem for p in DASHBOARDS.glob("*.json")}
GPUS = 12
WORST_FIRST = ".+"     # the "worst first" value of the order variable
STRAGGLER_NODE, STALL_NODE = "node-b", "node-a"   # named so that plain string order is not node order of rows


def dashboards() -> dict[str, dict]:
    """Every generated dashboard by uid."""
    return {Path(name).stem: d for name, d in all_dashboards().items()}


# ------------------------------------------------------------------ static

def test_one_palette_everywhere():
    """Every heatmap colours from palette.py: its viridis scheme for cells, its
    one stall colour for the strip; the status history in the same direction."""
    seen = {"scheme": 0, "stall": 0, "status": 0}
    for uid, d in dashboards().items():
        text = json.dumps(d)
        assert "Turbo" not in text and "RdYlGr" not in text, f"{uid}: a second palette"
        for p in panels(d):
            if p["type"] == "heatmap":
                color = p["options"]["color"]
                if color["mode"] == "scheme":
                    assert color["scheme"] == palette.GRAFANA_SCHEME, f"{uid} / {p['title']}"
                    seen["scheme"] += 1
                else:
                    assert (color["mode"], color["fill"]) == ("opacity", palette.STALL_HEX), f"{uid} / {p['title']}"
                    seen["stall"] += 1
                assert (color["min"], color["max"]) == (0, 1)
            if p["type"] == "status-history":
                mode = p["fieldConfig"]["defaults"]["color"]["mode"]
                assert mode == f"continuous-{palette.GRAFANA_SCHEME.lower()}", f"{uid} / {p['title']}: {mode}"
                seen["status"] += 1
    assert seen["scheme"] >= 4 and seen["stall"] >= 2 and seen["status"] >= 1, seen


def test_default_colouring_is_the_work_score():
    for uid in ("gpulse-cluster-heatmap", "gpulse-training-workload"):
        v = {x["name"]: x for x in dashboards()[uid]["templating"]["list"]}
        assert v["metric"]["current"]["value"] == "active|busy", uid
        assert v["order"]["current"]["value"] == "natural", uid


def _data_links():
    for uid, d in dashboards().items():
        for p in panels(d):
            for link in p.get("fieldConfig", {}).get("defaults", {}).get("links", []) or []:
                yield uid, p, link


def test_data_links_lead_to_existing_dashboards_with_node_and_time_range():
    links = list(_data_links())
    where = {(uid, p["title"]) for uid, p, _ in links}
    # overview row -> per-GPU heatmap of that node -> node detail; stragglers -> node detail
    assert ("gpulse-cluster-heatmap", "Nodes") in where
    assert ("gpulse-cluster-heatmap", "GPU heatmap") in where
    assert ("gpulse-cluster-heatmap", "Top stragglers now") in where
    assert ("gpulse-training-workload", "Top stragglers now") in where
    for uid, p, link in links:
        m = re.fullmatch(r"/d/([\w-]+)/\?(.*)", link["url"])
        assert m, f"{uid} / {p['title']}: {link['url']}"
        assert m.group(1) in UIDS, f"{uid} / {p['title']}: no dashboard {m.group(1)}"
        params = m.group(2).split("&")
        assert "${__url_time_range}" in params and "${datasource:queryparam}" in params
        # a heatmap or status-history row names its node in the series labels, a table row in a column
        node = "${__data.fields.node}" if p["type"] == "table" else "${__field.labels.node}"
        assert f"var-node={node}" in params, f"{uid} / {p['title']}: {params}"
        target = load(m.group(1))
        names = {v["name"] for v in target["templating"]["list"]}
        for prm in params:
            if prm.startswith("var-"):
                assert prm[4:].split("=")[0] in names, f"{uid} / {p['title']}: {prm} unknown to {m.group(1)}"


def test_runbook_links_come_from_the_runbook_base_variable():
    assert RUNBOOK_BASE == "https://github.com/gpulse/gpulse/blob/main/docs/runbooks"
    found = 0
    for uid, d in dashboards().items():
        (var,) = [v for v in d["templating"]["list"] if v["name"] == "runbook_base"]
        assert var["type"] == "constant" and var["query"] == RUNBOOK_BASE
        text = json.dumps(d)
        assert text.count(RUNBOOK_BASE) == 1, f"{uid}: the base URL is spelled outside the variable"
        for link in d.get("links", []):
            if link["type"] == "link":
                assert link["url"].startswith("${runbook_base}/"), link["url"]
                page = link["url"].rsplit("/", 1)[1]
                assert (ROOT / "docs" / "runbooks" / page).is_file()
                found += 1
    assert found >= 3


def test_every_selector_honours_the_cluster_variable():
    for uid, d in dashboards().items():
        for q in panel_queries(d):
            for sel in re.findall(r"\{([^{}]*)\}", q.expr):
                if "=" in sel and "$" in sel:     # a selector that takes dashboard variables
                    assert 'cluster=~"$cluster"' in sel, f"{q.where}: {{{sel}}}"


def test_node_detail_keeps_clusters_apart():
    """Node detail aggregates by GPU: with cluster = All, two clusters' nodes of
    the same name must stay two sets of GPUs, not be summed into one."""
    (d,) = [d for uid, d in dashboards().items() if uid == "gpulse-node-detail"]
    seen = 0
    for q in panel_queries(d):
        for by in re.findall(r"\bby \(([^)]*)\)", q.expr):
            assert "cluster" in [x.strip() for x in by.split(",")], f"{q.where}: by ({by})"
            seen += 1
    assert seen >= 6


def test_no_label_join_writes_one_of_its_sources():
    """VictoriaMetrics 1.79 garbles label_join(v, "x", sep, ..., "x", ...): every
    label_join of the dashboards and rules writes a label it does not read."""
    texts = [json.dumps(d) for d in dashboards().values()]
    texts += [f.read_text() for f in (ROOT / "prometheus" / "rules").glob("*.yml")]
    joins = 0
    for text in texts:
        text = text.replace('\\"', '"')
        for m in re.finditer(r'label_join\(', text):
            depth, i = 1, m.end()
            while depth:        # to the call's closing parenthesis
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            call = text[m.start():i]
            args = re.findall(r'"([^"]*)"', call[call.rfind(")", 0, len(call) - 1):])
            dst, srcs = args[0], args[2:]
            assert dst not in srcs, call[-120:]
            joins += 1
    assert joins >= 4


# ------------------------------------------------------------------ against Prometheus

class Stack:
    def __init__(self, tmp: Path):
        require_binary("prometheus")
        self.procs = []
        self.prom = None
        try:
            self.procs = [
                Gpulse("--source", "sim", "--sim.scenario", "straggler", "--sim.gpus", str(GPUS),
                       "--node-name", STRAGGLER_NODE),
                Gpulse("--source", "sim", "--sim.scenario", "sync-stall", "--sim.gpus", str(GPUS),
                       "--node-name", STALL_NODE),
            ]
            self.prom = start_prometheus(tmp, self.procs, "1s")
            self.url = self.prom.url
        except BaseException:
            self.close()
            raise

    def range(self, req: Request, end: float | None = None) -> list:
        end = end if end is not None else time.time()
        r = requests.post(self.url + "/api/v1/query_range", timeout=30, data=dict(
            query=req.expr, start=end - req.range_ms / 1000, end=end, step=req.step_s)).json()
        assert r["status"] == "success", f"{req.where}: {r.get('error')}"
        return r["data"]["result"]

    def close(self):
        if self.prom is not None:
            self.prom.stop()
        for g in self.procs:
            g.stop()


def request(uid: str, title: str, **choice: str) -> Request:
    """The panel's target as Grafana sends it for a 2-minute range at a 1 s scrape."""
    d = load(uid)
    defs = variable_defaults(d)
    values = {**fixed_values(d), **{k: format_value(v, "$__all") for k, v in defs.items() if v["type"] == "query"}}
    values.update(choice)
    (q,) = [q for q in panel_queries(d) if q.panel == title]
    timing = q.timing(parse_duration_ms("2m"), width_px=1600, scrape_interval="1s")
    return Request(where=f"{uid} / {title} {choice}", expr=substitute(q.expr, timing, values), instant=False,
                   step_s=timing.step_ms / 1000, range_ms=timing.range_ms)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("heatmap"))
    try:
        want = request("gpulse-cluster-heatmap", "GPU heatmap", order=WORST_FIRST)
        deadline = time.monotonic() + 90
        # enough scrapes for every GPU to have a cell and the straggler to stand out
        while time.monotonic() < deadline:
            rows = s.range(want)
            if len(rows) == 2 * GPUS and all(len(r["values"]) >= 8 for r in rows):
                break
            time.sleep(1)
        yield s
    finally:
        s.close()


def _rows(series: list) -> list[tuple[str, str]]:
    return [(x["metric"]["node"], x["metric"]["gpu"]) for x in series]


@pytest.mark.parametrize("metric", ["active|busy", "busy", "active", "power"])
def test_gpu_rows_come_in_node_then_numeric_gpu_order(stack, metric):
    rows = _rows(stack.range(request("gpulse-cluster-heatmap", "GPU heatmap", metric=metric)))
    want = [(n, str(g)) for n in sorted((STALL_NODE, STRAGGLER_NODE)) for g in range(GPUS)]
    assert rows == want, rows


def test_worst_first_puts_the_straggler_on_top(stack):
    rows = _rows(stack.range(request("gpulse-cluster-heatmap", "GPU heatmap", order=WORST_FIRST)))
    assert len(rows) == 2 * GPUS
    # the straggler scenario runs GPU 1 at 99 % while its peers run at 60 %
    assert rows[0] == (STRAGGLER_NODE, "1"), rows


@pytest.mark.parametrize("cells", ["seconds_total", "cells1m", "ratio_rate5m"])
def test_worst_first_ranks_every_cells_choice(stack, cells):
    """Worst first reads its rank from the data the chosen cells come from, so
    every "Cells from" choice keeps every row and puts the straggler on top."""
    req = request("gpulse-cluster-heatmap", "GPU heatmap", order=WORST_FIRST, cells=cells)
    deadline = time.monotonic() + 60      # the 1m and 5m rules need a few evaluations
    while True:
        rows = _rows(stack.range(req))
        if (len(rows) == 2 * GPUS and rows[0] == (STRAGGLER_NODE, "1")) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert len(rows) == 2 * GPUS, rows
    assert rows[0] == (STRAGGLER_NODE, "1"), rows


def _selects(selector: str, name: str) -> bool:
    """Whether every __name__ matcher of a PromQL selector accepts `name`."""
    ok = True
    for op, value in re.findall(r'__name__\s*(=~|!~|!=|=)\s*"([^"]*)"', selector):
        hit = re.fullmatch(value, name) is not None if "~" in op else value == name
        ok = ok and (hit if op in ("=", "=~") else not hit)
    return ok


def test_worst_first_over_the_records_reads_no_raw_counter():
    """With the default cells (the 15 s records) no branch of a worst-first
    heatmap or overview selects a raw per-GPU counter: a rank branch that did
    would read every GPU's counters over the whole range for a join that
    matches nothing."""
    checked = 0
    for uid in ("gpulse-cluster-heatmap",):
        for title in ("GPU heatmap", "Nodes"):
            expr = request(uid, title, order=WORST_FIRST).expr
            selectors = re.findall(r"\{([^{}]*__name__[^{}]*)\}", expr)
            assert selectors, title
            for sel in selectors:
                for counter in ("gpulse_gpu_active_seconds_total", "gpulse_gpu_sampled_seconds_total"):
                    assert not _selects(sel, counter), f"{title}: {{{sel}}} reads {counter}"
            checked += 1
    assert checked == 2


def test_node_overview_has_one_row_per_node_in_order(stack):
    series = stack.range(request("gpulse-cluster-heatmap", "Nodes"))
    assert [x["metric"]["node"] for x in series] == sorted((STALL_NODE, STRAGGLER_NODE))
    for x in series:
        assert all(0 <= float(v) <= 1.0001 for _, v in x["values"])


def test_work_score_sits_between_active_and_busy(stack):
    """mean(active, busy): a spin-waiting GPU is mid-tone, not bright like busy
    nor dark like active."""
    end = time.time() - 2     # one end for all three, in the past so no scrape lands in between

    def cells(metric: str) -> dict:
        return {(x["metric"]["node"], x["metric"]["gpu"]): dict(x["values"])
                for x in stack.range(request("gpulse-cluster-heatmap", "GPU heatmap", metric=metric), end)}
    work, busy, active = cells("active|busy"), cells("busy"), cells("active")
    n = 0
    for key, values in work.items():
        for t, w in values.items():
            if t in busy[key] and t in active[key]:
                b, a = float(busy[key][t]), float(active[key][t])
                assert float(w) == pytest.approx((a + b) / 2, abs=1e-9)
                n += 1
    assert n > 2 * GPUS
