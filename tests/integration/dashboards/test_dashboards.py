"""The generated Grafana dashboards: up to date with the generator, and well formed.

The queries themselves run against a real Prometheus in test_dashboards_prometheus.py.
"""
from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import IN_CI, ROOT

sys.path.insert(0, str(ROOT / "grafana"))
from gpulse_dashboards.common import PROVISIONED_DATASOURCE_UID, SdkMissing, require_sdk  # noqa: E402
from testing.grafana_queries import (go_duration, grafana_timing, panel_queries,  # noqa: E402
                                     parse_duration_ms)
from testing.dashstack import all_panels, dashboards

GENERATE = ROOT / "grafana" / "generate.py"
DASHBOARDS = ROOT / "grafana" / "dashboards"
PROVISIONING = ROOT / "grafana" / "provisioning"
EXPECTED_UIDS = {"gpulse-cluster-heatmap", "gpulse-training-workload", "gpulse-node-detail",
                 "gpulse-exporter-health"}
DS_VAR = "${datasource}"
# Series Prometheus itself makes; everything else must be documented or recorded.
PROMETHEUS_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped", "ALERTS"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def sdk_or_skip() -> None:
    try:
        require_sdk()
    except SdkMissing as e:
        if IN_CI:
            pytest.fail(f"{e} (CI=true: .ci/run must install it)")
        pytest.skip(str(e))


def walk(node, path=""):
    """(path, key, value) of every mapping entry in a JSON document."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield path, k, v
            yield from walk(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, f"{path}[{i}]")


# ------------------------------------------------------------------ generation

def test_committed_json_is_what_the_generator_produces(tmp_path):
    sdk_or_skip()
    p = subprocess.run([sys.executable, str(GENERATE), "--check"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, str(GENERATE), "--out", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    for f in DASHBOARDS.glob("*.json"):
        assert (out / f.name).read_text() == f.read_text(), f.name
    assert {f.name for f in out.iterdir()} == {f.name for f in DASHBOARDS.glob("*.json")}


def test_check_names_the_stale_file_in_one_line(tmp_path):
    sdk_or_skip()
    out = tmp_path / "dash"
    shutil.copytree(DASHBOARDS, out)
    f = out / "gpulse-node-detail.json"
    d = json.loads(f.read_text())
    d["title"] = "edited by hand"
    f.write_text(json.dumps(d))
    (out / "stray.json").write_text("{}")
    p = subprocess.run([sys.executable, str(GENERATE), "--check", "--out", str(out)], capture_output=True, text=True)
    assert p.returncode == 1
    assert p.stderr.count("\n") == 1 and "gpulse-node-detail.json" in p.stderr and "stray.json" in p.stderr
    assert "Traceback" not in p.stderr


def test_missing_sdk_is_one_line_not_a_traceback(tmp_path):
    # -S: no site-packages, so the SDK cannot be found
    p = subprocess.run([sys.executable, "-S", str(GENERATE), "--check"], capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "grafana-foundation-sdk" in p.stderr and "pip install" in p.stderr
    assert "Traceback" not in p.stderr


# ------------------------------------------------------------------ structure

def test_dashboards_have_stable_unique_uids_and_panel_ids():
    ds = dashboards()
    assert {d["uid"] for d in ds.values()} == EXPECTED_UIDS
    assert {f"{d['uid']}.json" for d in ds.values()} == set(ds)
    for name, d in ds.items():
        ids = [p["id"] for p in all_panels(d)]
        assert len(ids) == len(set(ids)) and all(isinstance(i, int) and i > 0 for i in ids), name
        assert d["title"] and d["description"] and "gpulse" in d["tags"], name
        assert d["schemaVersion"] >= 39, f"{name}: not a Grafana 11 dashboard"


def test_every_query_goes_through_the_datasource_variable():
    for name, d in dashboards().items():
        variables = {v["name"]: v for v in d["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        for p in all_panels(d):
            if p["type"] == "row":
                continue
            assert p["datasource"] == {"type": "prometheus", "uid": DS_VAR}, f"{name}: {p['title']}"
            assert p["targets"], f"{name}: {p['title']} has no query"
            for t in p["targets"]:
                assert t["datasource"] == {"type": "prometheus", "uid": DS_VAR}, f"{name}: {p['title']}"
        for path, key, value in walk(d):
            if key == "datasource" and isinstance(value, dict):
                assert value.get("uid") == DS_VAR, f"{name}{path}: hard-coded datasource {value}"
            if key == "datasource" and isinstance(value, str):
                pytest.fail(f"{name}{path}: datasource given by name {value!r}")
        assert PROVISIONED_DATASOURCE_UID not in json.dumps(d), f"{name}: names the provisioned datasource"


def test_every_panel_has_a_unit_and_a_description():
    for name, d in dashboards().items():
        for p in all_panels(d):
            if p["type"] == "row":
                continue
            assert p["fieldConfig"]["defaults"].get("unit"), f"{name}: {p['title']} has no unit"
            assert len(p.get("description", "")) > 40, f"{name}: {p['title']} does not say how to read it"


def test_cluster_heatmap_is_one_row_per_gpu_on_a_fixed_scale():
    d = dashboards()["gpulse-cluster-heatmap.json"]
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert {"datasource", "cluster", "node", "workload", "metric", "cells", "order", "runbook_base"} <= set(variables)
    assert variables["node"]["multi"] and variables["workload"]["multi"]
    assert variables["workload"]["allValue"] == ".*"   # also matches GPUs without a workload
    assert variables["cluster"]["allValue"] == ".*"    # and series without a cluster label
    assert [(o["text"], o["value"]) for o in variables["metric"]["options"]] == [
        ("work score", "active|busy"), ("busy ratio", "busy"), ("SM activity", "active"), ("power", "power")]
    assert variables["metric"]["current"]["value"] == "active|busy"
    assert variables["cells"]["current"]["value"] == "increase15s"   # the 15 s cell records
    heats = {p["title"]: p for p in all_panels(d) if p["type"] == "heatmap"}
    assert {"Sync stalls", "Nodes", "Workloads", "GPU heatmap"} <= set(heats)
    heat = heats["GPU heatmap"]
    opts = heat["options"]
    assert opts["calculate"] is False
    assert (opts["color"]["min"], opts["color"]["max"]) == (0, 1)
    assert opts["filterValues"]["le"] < 0, "zero cells must be drawn"
    assert opts["yAxis"]["reverse"] is True
    (target,) = heat["targets"]
    assert target["legendFormat"] == "{{node}}/{{gpu}}"
    # cells are counter differences over the cell's own step, not a fixed-window rule
    assert "offset $__interval" in target["expr"] and "ratio_rate1m" not in target["expr"]
    assert not heat.get("interval"), "no min interval: the scrape interval is the floor"
    # the variables pick the metric names, so only the selected series are read
    assert '__name__=~"gpulse_gpu_(${metric})_${cells}"' in target["expr"]
    assert '__name__=~"node_gpu:gpulse_gpu_(${metric}):${cells}"' in target["expr"]
    # every GPU row and the strip share columns and the y-axis width, so they line up
    strip = heats["Sync stalls"]
    assert strip["maxDataPoints"] == heat["maxDataPoints"]
    assert strip["options"]["yAxis"]["axisWidth"] == heat["options"]["yAxis"]["axisWidth"]
    (status,) = [p for p in all_panels(d) if p["type"] == "status-history"]
    assert status["timeFrom"] and status["targets"][0]["legendFormat"] == "{{node}}/{{gpu}}"
    assert 'alertname=~"Gpulse.*"' in d["annotations"]["list"][0]["expr"]


def test_workload_dashboard_links_the_runbooks_that_exist():
    d = dashboards()["gpulse-training-workload.json"]
    runbooks = [link["url"] for link in d["links"] if link["type"] == "link"]
    assert runbooks
    for url in runbooks:
        page = url.rsplit("/", 1)[1]
        assert (ROOT / "docs" / "runbooks" / page).is_file(), f"runbook link to missing {page}"


# read once: the switched-name check asks for both sets for every choice of every query
@functools.lru_cache(maxsize=None)
def _documented_metrics() -> frozenset[str]:
    doc = (ROOT / "docs" / "metrics.md").read_text()
    return frozenset(re.findall(r"^\| `(gpulse_\w+)` \|", doc, re.M))


@functools.lru_cache(maxsize=None)
def _recorded_series() -> frozenset[str]:
    names = set()
    for f in (ROOT / "prometheus" / "rules").glob("*.yml"):
        for g in yaml.safe_load(f.read_text())["groups"]:
            names |= {r["record"] for r in g["rules"] if "record" in r}
    return frozenset(names)


def _metrics_in(expr: str) -> set[str]:
    named = set(re.findall(r'__name__="([^"]+)"', expr))
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)   # drop string literals (label values)
    selectors = set(re.findall(r"([A-Za-z_:][\w:]*)\s*\{", expr))
    return named | selectors | set(re.findall(r"\b(gpulse_\w+|\w+:\w+:\w+)\b", expr))


def _switched_names(expr: str, choice: str, cells: list[str]) -> set[str]:
    """Metric names in `{__name__=~"...${metric}..."}` selectors for one choice
    (an alternation such as `active|busy` names each counter), any `${cells}`."""
    names = set()
    for pattern in re.findall(r'__name__=~"([^"]*\$\{metric\}[^"]*)"', expr):
        for suffix in cells or [""]:
            rx = pattern.replace("${metric}", choice).replace("${cells}", suffix)
            names |= {n for n in _documented_metrics() | _recorded_series()
                      if re.fullmatch(rx, n) or re.fullmatch(rx, n + "_total")}
    return names


def test_queries_only_use_documented_metrics_and_shipped_rules():
    documented, recorded = _documented_metrics(), _recorded_series()
    assert len(documented) > 30 and len(recorded) > 10
    for name, d in dashboards().items():
        exprs = [(q.where, q.expr) for q in panel_queries(d)]
        exprs += [(f"{name} annotation", a["expr"]) for a in d["annotations"]["list"]]
        exprs += [(f"{name} ${v['name']}", v["query"]) for v in d["templating"]["list"] if v["type"] == "query"]
        choices = [o["value"] for v in d["templating"]["list"] if v["name"] == "metric" for o in v["options"]]
        cells = [o["value"] for v in d["templating"]["list"] if v["name"] == "cells" for o in v["options"]]
        for where, expr in exprs:
            # a metric-switched selector names every choice's metric, of which
            # only the selected one exists; at least one must exist per choice
            for choice in choices if "${metric}" in expr else ():
                assert _switched_names(expr, choice, cells), \
                    f"{where}: no documented or recorded metric for metric={choice}"
            for m in _metrics_in(expr):
                base = next((m[: -len(s)] for s in HISTOGRAM_SUFFIXES if m.endswith(s)), m)
                ok = base in documented or m in recorded or m in PROMETHEUS_SERIES
                assert ok, f"{where}: {m} is neither in docs/metrics.md nor recorded by prometheus/rules"


# ------------------------------------------------------------------ provisioning

def test_provisioning_loads_the_dashboards_into_the_gpu_folder():
    doc = yaml.safe_load((PROVISIONING / "dashboards" / "gpulse.yaml").read_text())
    assert doc["apiVersion"] == 1
    (provider,) = doc["providers"]
    assert provider["folder"] == "GPU" and provider["type"] == "file"
    assert provider["options"]["path"].startswith("/")


def test_provisioning_datasource_has_the_fixed_uid():
    doc = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())
    (ds,) = doc["datasources"]
    assert ds["uid"] == PROVISIONED_DATASOURCE_UID and ds["type"] == "prometheus"
    assert ds["isDefault"] is True      # the dashboards' datasource variable starts on the default
    parse_duration_ms(ds["jsonData"]["timeInterval"])


# ------------------------------------------------------------------ Grafana's step

@pytest.mark.parametrize("range_s, points, panel_interval, scrape, step_s, rate", [
    # 4 h heatmap, 300 points, min interval 1m: the rules' own resolution
    (4 * 3600, 300, "1m", "15s", 60, "1m15s"),
    # 6 h time series on a 1,920-px panel at a 15 s scrape: 11.25 s rounds to 10 s, floored at 15 s
    (6 * 3600, 1920, "", "15s", 15, "1m0s"),
    # 7 days on 300 points: 2016 s rounds to 30 m
    (7 * 86400, 300, "1m", "15s", 1800, "30m15s"),
    # 15 minutes at a 1 s scrape: the scrape interval is the floor
    (900, 1920, "", "1s", 1, "4s"),
])
def test_grafana_step_and_rate_interval(range_s, points, panel_interval, scrape, step_s, rate):
    t = grafana_timing(range_s * 1000, points, panel_interval=panel_interval, scrape_interval=scrape)
    assert t.step_ms == step_s * 1000
    assert go_duration(t.rate_interval_ms) == rate
