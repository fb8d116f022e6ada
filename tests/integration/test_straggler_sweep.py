"""bench/straggler_sweep.py end to end on one case: the generator writes the log,
`gpulse export` replays it through the engine and the collector (the live gauges),
promtool evaluates the shipped rules over its scrapes (the alert), `gpulse report`
reads it, and the sweep scores the three against the timeline's truth.

The case is a GPU 30 % slower under thermal throttling with instantaneous power in
its log, which the detection model names today: a sweep whose plumbing lost a
detector's answer would read it as missed. The bad-option paths end in one line.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, require_binary, require_data

SWEEP = ROOT / "bench" / "straggler_sweep.py"


def _sweep(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SWEEP), *args], capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": str(ROOT / "exporter"), "PATH": "/usr/bin:/bin"})


def test_one_case_through_report_live_and_alerts(tmp_path):
    require_binary("promtool")
    require_data("traces/h100-8gpu/ckpt1000.csv")
    require_data("captures/nvidia-smi/h100-80gb-hbm3-query-gpu.csv")
    p = _sweep("--cases", r"^thermal\+30$", "--workers", "1", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "recall per slowdown" in p.stdout and "recall per cause" in p.stdout
    doc = json.loads((tmp_path / "straggler_sweep.json").read_text())
    (case,) = doc["cases"]
    assert case["name"] == "thermal+30" and case["positive"] and not case["borderline"]
    (straggler,) = case["stragglers"]
    assert straggler.endswith(f"-n0/{case['slow'][0][1]}")
    assert case["cost"][straggler] == pytest.approx(0.3 / 1.33, abs=0.01)
    for det in ("report", "live", "alerts"):
        assert case["judged"][det]["hit"] and not case["judged"][det]["false"], (det, case["named"][det])
        assert doc["results"][det]["recall"] == 1.0
    # times from the labelled onset: the live gauge confirms, then the alert pages
    live, alert = case["judged"]["live"]["lag"], case["judged"]["alerts"]["lag"]
    assert 0 < live <= alert
    assert case["causes"]["report"][straggler] == "throttling"


@pytest.mark.parametrize("args, says", [(("--cases", "("), "--cases"), (("--cases", "no-such-case"), "no case"),
                                         (("--workers", "0"), "--workers")])
def test_bad_options_are_one_line(tmp_path, args, says):
    p = _sweep(*args, "--out", str(tmp_path))
    assert p.returncode != 0 and "Traceback" not in p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert says in line
