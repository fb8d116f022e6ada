"""One simulated run, four views, one verdict.

A `--source sim` scenario runs through the exporter's engine in virtual time
(`engine.run_offline`, with the page history a live exporter keeps), anchored so its
last snapshot is a minute ago. From that one run:
- /metrics: the collector's exposition of the last snapshot, what a scrape returns;
- the live page's data: `/api/heatmap`'s document (`LivePage.snapshot`) of the same;
- the report: the run scraped every 15 s, as OpenMetrics, backfilled with the real
  `promtool tsdb create-blocks-from openmetrics` into a real Prometheus, and read back
  by `gpulse report --prometheus` (a subprocess) over the run's range;
- the rules: the same scrapes through the shipped rules in the real promtool's rule
  engine, the alerts firing at the run's end.
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

from conftest import ROOT, free_port, require_binary, wait_http
from promutil import promtool_firing, scrape_sim

from gpulse.collector import encode, live_families, snapshot_families
from gpulse.http.livepage import LivePage

NODE = "n1"
SCRAPE = 15.0
CASES = {   # scenario -> (seconds, {straggler gpu: cause}, imbalance verdict)
    # GPU 1 at 99 % real work, its peers at 60 %: a hot straggler with clocks in line;
    # long enough for GpulseStragglerGPU (270 s of held workload, then for: 1m)
    "straggler": (7 * 60.0, {"1": "more_work"}, False),
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
    return causes, any(v > 0.3 for v in imb)


def page_view(cfg, snap) -> tuple[dict[str, str], bool]:
    """The same from the live page's data document."""
    app = SimpleNamespace(cfg=cfg, extra_routes={},
                          sampler=SimpleNamespace(snapshot=snap, health=lambda: {"stale": False}))
    doc = LivePage(app).snapshot(15)
    json.dumps(doc)          # what /api/heatmap sends
    assert doc["cols"] > 0
    imb = [g["imbalance"] for g in doc["groups"] if g["imbalance"] is not None]
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


def report_view(tmp_path, om: bytes, start: float, end: float) -> tuple[dict[str, str], bool, dict]:
    """`gpulse report --prometheus` over the run backfilled into a real Prometheus."""
    promtool, prometheus = require_binary("promtool"), require_binary("prometheus")
    (tmp_path / "run.om").write_bytes(om)
    p = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp_path / "run.om"),
                        str(tmp_path / "tsdb")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    (tmp_path / "prometheus.yml").write_text("global: {scrape_interval: 15s}\n")
    port = free_port()
    proc = subprocess.Popen([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/-/ready", timeout=30)
        held = requests.get(url + "/api/v1/query", params={"query": "count(gpulse_gpu_sm_clock_hertz)",
                                                           "time": f"{end:.0f}"}, timeout=10).json()
        assert held["data"]["result"], "the backfilled series are not in Prometheus"
        out = tmp_path / "report"
        p = subprocess.run([sys.executable, "-m", "gpulse", "report", "--prometheus", url, "--start", f"{start:.0f}",
                            "--end", f"{end:.0f}", "--out", str(out), "--quiet"], capture_output=True, text=True,
                           timeout=300, cwd=ROOT)
        assert p.returncode == 0, p.stdout + p.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    doc = json.loads((out / "findings.json").read_text())
    # a straggler finding's text starts with the GPU it is about ("GPU 1 worked ...")
    causes = {re.match(r"GPU (\S+) ", f["text"]).group(1): f["cause"] for f in doc["findings"] if f["kind"] == "straggler"}
    stragglers = {s["gpu"]: causes.get(s["gpu"]) for s in doc["stragglers"]}
    imbalance = any(f["kind"] == "imbalance" for f in doc["findings"])
    return stragglers, imbalance, doc


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_metrics_page_report_and_rules_agree(scenario, tmp_path):
    seconds, stragglers, imbalance = CASES[scenario]
    cfg, snap, om, start, end, series = scrape_sim(scenario, seconds, SCRAPE, NODE)
    rep_stragglers, rep_imbalance, doc = report_view(tmp_path, om, start, end)
    views = {
        "/metrics": metrics_view(snap),
        "live page": page_view(cfg, snap),
        "report --prometheus": (rep_stragglers, rep_imbalance),
        "rules": rules_view(tmp_path, series),
    }
    for view, (got_stragglers, got_imbalance) in views.items():
        assert got_stragglers == stragglers, f"{view}: stragglers {got_stragglers}, expected {stragglers}"
        assert got_imbalance is imbalance, f"{view}: imbalance {got_imbalance}, expected {imbalance}"
    # the report read what Prometheus holds: nothing the cause needs is missing, and
    # its remedy asks for no log columns
    for f in doc["findings"]:
        if f["kind"] == "straggler":
            assert f["missing"] == [] and "nvidia-smi" not in f["remedy"], f
    # a spread the straggler explains is no imbalance number either, as on the page
    if stragglers and not imbalance:
        assert doc["imbalance"]["whole_run"] is None
    elif imbalance:
        assert doc["imbalance"]["whole_run"] > 0.3
