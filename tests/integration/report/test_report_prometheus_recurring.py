"""`gpulse report --prometheus` names a recurring straggler: the real 8xH100
ckpt1000.csv, in which rank 0 writes a ~16 s checkpoint off the GPU twice, ~250 s
apart, while GPUs 1-7 spin-wait for it (docs/activity.md).

The log is replayed through the exporter and scraped every 15 s (`gpulse export`),
backfilled with the real `promtool tsdb create-blocks-from openmetrics` into a real
Prometheus, and read back by `gpulse report --prometheus` over the run: the engine
re-run on 15 s counter differences. From that one Prometheus the report and the live
gauges it holds must agree with `gpulse report --input` and the shipped rules
(tests/integration/detection/test_verdict_agreement.py): GPU 0 a straggler of its
peers' busy time, off the GPU, over a span holding both checkpoints, and nothing else:
no imbalance, no recurring stalls, no other straggler.

At a 15 s step each checkpoint falls across two steps, in which the peers still
compute 12-19 % of the time, so no step has every GPU inactive: the report finds the
straggler by what it costs its peers (4.6 % and 5.3 % of 5 minutes in its two runs,
against 4.8 % and 5.3 % from the log at 1 s), not by the stalls it causes. The time
lost and the stall share are the exporter's own counters, which saw the stalls: the
same GPU-hours as the report from the log.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import requests

from conftest import ROOT, require_binary, require_data
from reportutil import validate
from testing.daemons import gpulse_export
from testing.promutil import Prometheus, backfill

from gpulse.analysis.thresholds import value

NODE = "h100-ckpt"
SCRAPE = 15


def _range(prom: Prometheus, query: str, start: int, end: int) -> list[dict]:
    r = requests.get(prom.url + "/api/v1/query_range", timeout=60,
                     params={"query": query, "start": start, "end": end, "step": SCRAPE}).json()
    assert r["status"] == "success", r
    return r["data"]["result"]


def _instant(prom: Prometheus, query: str, at: int) -> list[dict]:
    r = requests.get(prom.url + "/api/v1/query", timeout=60, params={"query": query, "time": at}).json()
    assert r["status"] == "success", r
    return r["data"]["result"]


def test_report_from_prometheus_names_the_checkpointing_rank(tmp_path):
    require_binary("promtool")
    require_binary("prometheus")
    log = require_data("traces/h100-8gpu/ckpt1000.csv")
    body = gpulse_export("--input", str(log), "--scrape-interval", f"{SCRAPE}s", "--node", NODE).stdout.decode()
    stamps = [float(m) for m in re.findall(r'^gpulse_gpu_sampled_seconds_total\{[^}]*\} \S+ (\S+)$', body, re.M)]
    start, end = int(min(stamps)), int(max(stamps))
    assert end - start > 600           # the whole 11-minute run, both checkpoints in it
    backfill(body, tmp_path / "tsdb")
    prom = Prometheus(tmp_path, [], rules=[], storage=tmp_path / "tsdb")
    try:
        out = tmp_path / "report"
        p = subprocess.run([sys.executable, "-m", "gpulse", "report", "--prometheus", prom.url, "--start",
                            str(start), "--end", str(end), "--out", str(out), "--quiet"],
                           capture_output=True, text=True, timeout=600, cwd=ROOT,
                           env={"PYTHONPATH": str(ROOT / "exporter"), "PATH": "/usr/bin:/bin"})
        assert p.returncode == 0, p.stdout + p.stderr
        # the checkpoints as the exporter counted them at 1 s ticks: the scrapes after
        # which the group's stall counter grew by a third of a scrape or more (the exit's
        # sub-second blips stay under that)
        [stall] = _range(prom, f'gpulse_group_sync_stall_seconds_total{{node="{NODE}"}}', start, end)
        pts = [(int(float(t)), float(v)) for t, v in stall["values"]]
        stalled = [t for (_, a), (t, b) in zip(pts, pts[1:]) if b - a >= SCRAPE / 3]
        # the exporter's lost time over the run, by reason: what the gpulse.lost records sum
        counted: dict[str, float] = {}
        for series in _range(prom, f'gpulse_group_lost_seconds_total{{node="{NODE}"}}', start, end):
            vals = [float(v) for _, v in series["values"]]
            reason = series["metric"]["reason"]
            counted[reason] = counted.get(reason, 0.0) + vals[-1] - vals[0]
        # the live gauges Prometheus holds: GPU 0, off the GPU, and no other GPU or cause
        held = f"[{end - start + SCRAPE}s]"
        flagged = {r["metric"]["gpu"] for r in _instant(prom, f"max_over_time(gpulse_gpu_straggler{held}) == 1", end)}
        causes = {(r["metric"]["gpu"], r["metric"]["cause"])
                  for r in _instant(prom, f"max_over_time(gpulse_gpu_straggler_cause{held}) == 1", end)}
    finally:
        prom.stop()
    assert flagged == {"0"} and causes == {("0", "off_gpu")}, (flagged, causes)
    assert len(stalled) >= 2 and stalled[-1] - stalled[0] > 200, stalled     # two checkpoints, minutes apart

    doc = json.loads((out / "findings.json").read_text())
    validate(doc)
    assert doc["run"]["tick_seconds"] == SCRAPE and doc["run"]["gpus"] == 8
    [st] = doc["stragglers"]
    assert (st["node"], st["gpu"], st["direction"], st["signal"]) == (NODE, "0", "idler", "busy"), st
    assert st["cost"] >= value("straggler_cost_ratio") and not st["whole_run"], st
    # one span, from the first checkpoint to the second (a scrape's stall seconds are
    # those of the step before it: a step of slack either side)
    [(a, b)] = [(s["start"], s["end"]) for s in st["spans"]]
    assert all(a - SCRAPE <= t <= b + SCRAPE for t in stalled), (a, b, stalled)
    [f] = [f for f in doc["findings"] if f["kind"] == "straggler"]
    assert f["cause"] == "off_gpu" and f["text"].startswith("GPU 0 was idle") and f["missing"] == [], f
    # nothing false: no imbalance, no slow node, no recurring stalls
    assert not doc["straggler_nodes"]
    assert {f["kind"] for f in doc["findings"]} <= {"straggler", "startup", "sync_stall"}, doc["findings"]
    assert doc["imbalance"]["whole_run"] < value("imbalance_alert_ratio")
    assert not [pt for pt in doc["stall_patterns"] if pt["count"] >= value("stall_recurring_episodes")]
    # what its peers lost waiting for it is booked under its cause, as the exporter books it
    waits = {r["cause"]: r["gpu_seconds"] for r in doc["lost"]["by_reason"] if r["reason"] == "straggler"}
    assert set(waits) == {"off_gpu"}, doc["lost"]
    assert waits["off_gpu"] == pytest.approx(st["lost_gpu_seconds"], abs=0.01) and waits["off_gpu"] > 0
    assert "waiting for GPU 0 (off_gpu)" in doc["lost"]["headline"]

    # The time lost is the exporter's, counted at its own rate: the checkpoints' stalls
    # too, which no 15 s step shows (the engine over the steps would book them as the
    # peers waiting for rank 0, 110 GPU-seconds instead of ~270). So the report from
    # Prometheus, the exporter's counters and the report from the log agree.
    by = {r["reason"]: 0.0 for r in doc["lost"]["by_reason"]}
    for r in doc["lost"]["by_reason"]:
        by[r["reason"]] += r["gpu_seconds"]
    assert by == pytest.approx({k: v for k, v in counted.items() if v > 0}, rel=1e-3), (by, counted)
    assert by["sync_stall"] > 10 * by["straggler"], by
    assert doc["stall_fraction"] > 0.04 and "exporter's own counters" in " ".join(doc["notes"]), doc
    p = subprocess.run([sys.executable, "-m", "gpulse", "report", "--input", str(log), "--out", str(tmp_path / "log"),
                        "--quiet"], capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT / "exporter"), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stdout + p.stderr
    from_log = json.loads((tmp_path / "log" / "findings.json").read_text())
    assert doc["lost"]["gpu_seconds"] == pytest.approx(from_log["lost"]["gpu_seconds"], rel=0.02), \
        (doc["lost"], from_log["lost"])
    assert doc["stall_fraction"] == pytest.approx(from_log["stall_fraction"], rel=0.1)
