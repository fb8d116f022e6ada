"""One simulated run, four views, one verdict.

A `--source sim` scenario runs through the exporter's engine in virtual time
(`drive.run_offline`, with the page history a live exporter keeps), anchored so its
last snapshot is a minute ago. From that one run:
- /metrics: the collector's exposition of the last snapshot, what a scrape returns;
- the live page's data: `/api/heatmap`'s document (`LivePage.snapshot`) of the same;
- the report: the run scraped every 15 s, as OpenMetrics, backfilled with the real
  `promtool tsdb create-blocks-from openmetrics` into a real Prometheus, and read back
  by `gpulse report --prometheus` (a subprocess) over the run's range;
- the rules: the same scrapes through the shipped rules in the real promtool's rule
  engine, the alerts firing at the run's end; and in the real Prometheus holding the
  run, its recording rules backfilled by promtool, each alert's expression evaluated
  over its `for:` up to the run's end.
All four must name the same stragglers with the same cause, and agree on imbalance.
No view waits on the wall clock for its verdict: the run takes seconds of CPU.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import requests
import yaml

from conftest import ROOT, require_binary
from testing.promutil import backfill, promtool_firing, scrape_sim

from gpulse.collector import encode, live_families, snapshot_families
from gpulse.config import parse_duration
from gpulse.http.livepage import LivePage
from bench import dashboards_scale  # noqa: E402  (the recording rules backfilled level by level)

NODE = "n1"
SCRAPE = 15.0
CASES = {   # scenario -> (seconds, {straggler gpu: cause}, imbalance verdict)
    # GPU 1 at 99 % real work, its peers at 60 %: a hot straggler with clocks in line;
    # long enough for GpulseStragglerGPU (270 s of held workload, then for: 1m)
    "straggler": (7 * 60.0, {"1": "more_work"}, False),
    # GPU 3 held down by hw_thermal and sw_power_cap: the cause read from the throttle
    # counters Prometheus holds
    "straggler-throttled": (7 * 60.0, {"3": "throttling"}, False),
    # the upper half at 99 %, the lower at 12 %: no single straggler, imbalance; long
    # enough for GpulseWorkloadImbalance (for: 15m over 5-minute fractions)
    "imbalance": (22 * 60.0, {}, True),
}


def metrics_view(snap) -> tuple[dict[str, str], bool]:
    """({straggler gpu: cause}, imbalance) from the /metrics text of the snapshot."""
    text = encode(snapshot_families(snap) + live_families(snap.node, {"stale": False, "seconds_since_success": 0}),
                  openmetrics=False).decode()
    flagged = {m.group(1) for m in re.finditer(r'^gpulse_gpu_straggler\{[^}]*gpu="([^"]+)"[^}]*\} 1\.0$', text, re.M)}
    causes = {m.group(2): m.group(1) for m in re.finditer(
        r'^gpulse_gpu_straggler_cause\{[^}]*cause="(\w+)"[^}]*gpu="([^"]+)"[^}]*\} 1\.0$', text, re.M)}
    assert set(causes) == flagged, (causes, flagged)
    imb = [float(v) for v in re.findall(r"^gpulse_group_imbalance_ratio\{[^}]*\} (\S+)$", text, re.M)]
    explained = [float(v) for v in re.findall(r"^gpulse_group_imbalance_explained\{[^}]*\} (\S+)$", text, re.M)]
    assert len(explained) == len(imb)     # the verdict beside every measurement
    return causes, any(v > 0.3 and not e for v, e in zip(imb, explained))


def page_view(cfg, snap) -> tuple[dict[str, str], bool]:
    """The same from the live page's data document."""
    app = SimpleNamespace(cfg=cfg, extra_routes={},
                          sampler=SimpleNamespace(snapshot=snap, health=lambda: {"stale": False}))
    doc = LivePage(app).snapshot(15)
    json.dumps(doc)          # what /api/heatmap sends
    assert doc["cols"] > 0
    imb = [g["imbalance"] for g in doc["groups"] if g["imbalance"] is not None and not g["imbalance_explained"]]
    return {s["gpu"]: s["cause"] for s in doc["stragglers"]}, any(v > 0.3 for v in imb)


def rules_view(tmp_path, series: dict[str, list]) -> tuple[dict[str, str], bool]:
    """The alerts firing at the last scrape by the shipped rules, in promtool."""
    at = (len(next(iter(series.values()))) - 1) * SCRAPE
    fired = promtool_firing(tmp_path, series, [(at, "GpulseStragglerGPU"), (at, "GpulseWorkloadImbalance")], SCRAPE)
    stragglers = {}
    for a in fired[(at, "GpulseStragglerGPU")]:
        m = re.search(r"\(cause: (\w+)\)$", a["summary"])
        stragglers[a["gpu"]] = m.group(1) if m else a["summary"]
    return stragglers, bool(fired[(at, "GpulseWorkloadImbalance")])


def in_prometheus(tmp_path, om: bytes, start: float, end: float):
    """The run backfilled into a real Prometheus: (`gpulse report --prometheus` over
    it as (stragglers, imbalance, findings.json), and the shipped alerts' verdicts
    there as (stragglers, imbalance)). The recording rules are backfilled over the run
    with `promtool tsdb create-blocks-from rules` against that Prometheus, level by
    level (bench/dashboards_scale.py), and each alert's expression is evaluated by it
    at every 15 s evaluation: an alert fires at the end when its expression held for
    its whole `for:`; the straggler's cause is what its summary reads,
    gpulse_gpu_straggler_cause at that time."""
    require_binary("promtool")
    require_binary("prometheus")
    backfill(om, tmp_path / "tsdb")
    prom = dashboards_scale.Prometheus(tmp_path / "tsdb", tmp_path)
    prom.start()
    try:
        held = requests.get(prom.url + "/api/v1/query", params={"query": "count(gpulse_gpu_sampled_seconds_total)",
                                                                "time": f"{end:.0f}"}, timeout=10).json()
        assert held["data"]["result"], "the backfilled series are not in Prometheus"
        out = tmp_path / "report"
        p = subprocess.run([sys.executable, "-m", "gpulse", "report", "--prometheus", prom.url, "--start",
                            f"{start:.0f}", "--end", f"{end:.0f}", "--out", str(out), "--quiet"],
                           capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert p.returncode == 0, p.stdout + p.stderr
        dashboards_scale.backfill_rules(prom, int(start), int(end) + 1, tmp_path)
        alerts = {r["alert"]: r for f in sorted((ROOT / "prometheus" / "rules").glob("*.yml"))
                  for g in yaml.safe_load(f.read_text())["groups"] for r in g["rules"] if "alert" in r}

        def firing(name: str) -> list[dict]:
            rule = alerts[name]
            hold = parse_duration(rule.get("for", "0s"))
            steps = int(hold // SCRAPE) + 1
            res = requests.get(prom.url + "/api/v1/query_range", timeout=60, params={
                "query": rule["expr"], "start": f"{end - (steps - 1) * SCRAPE:.0f}", "end": f"{end:.0f}",
                "step": f"{SCRAPE:g}"}).json()["data"]["result"]
            return [r["metric"] for r in res if len(r["values"]) == steps]

        rule_stragglers = {}
        for m in firing("GpulseStragglerGPU"):
            cause = requests.get(prom.url + "/api/v1/query", timeout=10, params={
                "query": f'gpulse_gpu_straggler_cause{{node="{m["node"]}",gpu="{m["gpu"]}"}} == 1',
                "time": f"{end:.0f}"}).json()["data"]["result"]
            rule_stragglers[m["gpu"]] = cause[0]["metric"]["cause"] if cause else "cause not judged yet"
        rule_imbalance = bool(firing("GpulseWorkloadImbalance"))
    finally:
        prom.stop()
    doc = json.loads((out / "findings.json").read_text())
    # a straggler finding's text starts with the GPU it is about ("GPU 1 worked ...")
    causes = {re.match(r"GPU (\S+) ", f["text"]).group(1): f["cause"] for f in doc["findings"] if f["kind"] == "straggler"}
    stragglers = {s["gpu"]: causes.get(s["gpu"]) for s in doc["stragglers"]}
    imbalance = any(f["kind"] == "imbalance" for f in doc["findings"])
    return (stragglers, imbalance, doc), (rule_stragglers, rule_imbalance)


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_metrics_page_report_and_rules_agree(scenario, tmp_path):
    seconds, stragglers, imbalance = CASES[scenario]
    cfg, snap, om, start, end, series = scrape_sim(scenario, seconds, SCRAPE, NODE)
    (rep_stragglers, rep_imbalance, doc), prom_rules = in_prometheus(tmp_path, om, start, end)
    views = {
        "/metrics": metrics_view(snap),
        "live page": page_view(cfg, snap),
        "report --prometheus": (rep_stragglers, rep_imbalance),
        "rules in promtool": rules_view(tmp_path, series),
        "rules in Prometheus": prom_rules,
    }
    for view, (got_stragglers, got_imbalance) in views.items():
        assert got_stragglers == stragglers, f"{view}: stragglers {got_stragglers}, expected {stragglers}"
        assert got_imbalance is imbalance, f"{view}: imbalance {got_imbalance}, expected {imbalance}"
    # the report read what Prometheus holds: nothing the cause needs is missing, and
    # its remedy asks for no log columns
    for f in doc["findings"]:
        if f["kind"] == "straggler":
            assert f["missing"] == [] and "nvidia-smi" not in f["remedy"], f
    # a spread the straggler explains is measured and said to be the straggler's, as
    # on the page and in /metrics
    if stragglers and not imbalance:
        assert doc["imbalance"]["whole_run"] is not None and doc["imbalance"]["explained"] is True
    elif imbalance:
        assert doc["imbalance"]["whole_run"] > 0.3 and doc["imbalance"]["explained"] is False


def test_a_prometheus_without_the_cause_series_says_where_they_are_missing(tmp_path):
    """The same straggler run with the throttle and SM clock series dropped before
    they reach Prometheus (an exporter whose source lacks them): the report's cause
    says what is missing, and a note says it is missing from Prometheus, pointing at
    the exporter's source rather than at log columns."""
    _, _, om, start, end, _ = scrape_sim("straggler", 7 * 60.0, SCRAPE, NODE)
    dropped = ("gpulse_gpu_throttle_seconds", "gpulse_gpu_sm_clock_hertz")
    om = b"\n".join(line for line in om.split(b"\n")
                    if not any(line.startswith(p.encode()) or line.startswith(b"# ") and p.encode() in line
                               for p in dropped))
    (stragglers, _, doc), _ = in_prometheus(tmp_path, om, start, end)
    assert list(stragglers) == ["1"]
    [f] = [f for f in doc["findings"] if f["kind"] == "straggler"]
    assert set(f["missing"]) >= {"throttle_reasons", "sm_clock"}, f
    [note] = [n for n in doc["notes"] if "Prometheus holds no" in n]
    assert "gpulse_gpu_throttle_seconds_total or gpulse_gpu_sm_clock_hertz" in note and "What to enable" in note
