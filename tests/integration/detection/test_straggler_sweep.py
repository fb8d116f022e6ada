"""bench/straggler_sweep.py end to end on one case: the generator writes the log,
`gpulse export` replays it through the engine and the collector (the live gauges),
promtool evaluates the shipped rules over its scrapes (the alert), `gpulse report`
reads it, and the sweep scores the three against the timeline's truth.

The case is a GPU 30 % slower under thermal throttling with instantaneous power in
its log, which the detection model names today: a sweep whose plumbing lost a
detector's answer would read it as missed. The bad-option paths end in one line.
How the sweep reads several nodes' exports, what a report names (GPUs, a node as an
entry or a finding) and how it scores (a slow node hit through any of its GPUs, a
named control a false positive, borderline cases apart) is checked in this process.
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


# -- how the sweep reads the detectors and scores them (in this process) ----------------

def _sweep_module():
    from bench import straggler_sweep
    return straggler_sweep


def test_the_exports_of_several_nodes_read_as_one_scrape_grid():
    ss = _sweep_module()
    a = ('# TYPE gpulse_gpu_straggler gauge\n'
         'gpulse_gpu_straggler{gpu="5",node="j-n0",workload="j"} 0.0 1000.0\n'
         'gpulse_gpu_straggler{gpu="5",node="j-n0",workload="j"} 1.0 1015.0\n'
         'gpulse_gpu_straggler_cause{cause="throttling",gpu="5",node="j-n0",workload="j"} 1.0 1015.0\n'
         'gpulse_build_info{python_version="3",source="replay",version="x"} 1.0 1000.0\n# EOF\n')
    b = ('# TYPE gpulse_node_straggler gauge\n'
         'gpulse_node_straggler{node="j-n1",workload="j"} 1.0 1030.0\n# EOF\n')
    sc = ss.Scrapes([a, b])
    assert sc.t0 == 1000.0 and sc.scrapes == 3
    assert sc.series['gpulse_gpu_straggler{gpu="5",node="j-n0",workload="j"}'] == [0.0, 1.0, None]
    assert not any(k.startswith("gpulse_build_info") for k in sc.series)
    assert sc.first_one("gpulse_gpu_straggler", ("node", "gpu")) == {"j-n0/5": 1015.0}
    assert sc.first_one("gpulse_node_straggler", ("node",)) == {"j-n1": 1030.0}
    assert sc.causes() == {"j-n0/5": "throttling"}


def test_a_slow_node_is_hit_by_its_node_or_any_of_its_gpus_and_others_are_false():
    ss = _sweep_module()
    case = next(c for c in ss.sweep.cases() if c.name == "4x8/node+25")
    n1, n2 = case.node(1), case.node(2)
    case.stragglers, case.slow_nodes, case.positive = tuple(f"{n1}/{g}" for g in range(8)), (n1,), True
    doc = {"stragglers": [{"node": n1, "gpu": "3", "cause": "more_work"}, {"node": n1}],
           "straggler_nodes": [{"node": n2, "workload": "j"}]}
    named, causes = ss.report_named(doc, case)
    assert named == {f"{n1}/3", n1, n2} and causes == {f"{n1}/3": "more_work"}
    j = ss.judge(case, {k: None for k in named})
    assert j["hit"] and j["false"] == [n2]
    assert ss.judge(case, {f"{n2}/0": 400.0, f"{n1}/7": 300.0}) == {"hit": True, "false": [f"{n2}/0"], "lag": 300.0}
    assert ss.judge(case, {}) == {"hit": False, "false": [], "lag": None}


def test_borderline_cases_are_scored_apart_and_a_named_control_is_a_false_positive():
    ss = _sweep_module()
    cs = {c.name: c for c in ss.sweep.cases()}
    pos, border, control = cs["power+10"], cs["power+5"], cs["control-hot"]
    pos.positive, pos.stragglers = True, (f"{pos.node(0)}/{pos.slow[0][1]}",)
    border.borderline = True
    rows = [{"case": pos, "judged": {"live": ss.judge(pos, {pos.stragglers[0]: 120.0})}},
            {"case": border, "judged": {"live": ss.judge(border, {f"{border.node(0)}/{border.slow[0][1]}": 90.0})}},
            {"case": control, "judged": {"live": ss.judge(control, {f"{control.node(0)}/3": 60.0})}}]
    x = ss.score(rows, "live")
    assert (x["tp"], x["fp"], x["fn"], x["tn"]) == (1, 1, 0, 0)
    assert x["precision"] == 0.5 and x["recall"] == 1.0 and x["borderline"] == [1, 1]
    assert x["by_slowdown"] == {"+10%": [1, 1]} and x["by_cause"] == {"power": [1, 1]}
    assert x["median_lag_s"] == 120.0
