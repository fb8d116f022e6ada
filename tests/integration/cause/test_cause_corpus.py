"""The straggler's cause in `gpulse report`, on the labelled cause cases built from
real recordings (bench/lib/corpus/causes.py: the Alibaba PAI job's slow worker with the
health columns of each cause, its cold-rank variant, the real 8xH100 checkpoint
logs, the seed case; one log format, the 1 s-averaged power the real logs carry).

Each case's log goes through the real CLI (`python -m gpulse report`); its
findings.json must name the labelled cause for the labelled GPU, with evidence, the
cause's remedy, and, for a case whose log lacks the deciding signals, "unknown"
naming what is missing; replayed through the exporter's engine, the live
`gpulse_gpu_straggler_cause` gauge must say the same. The generators are checked too: same bytes on every run,
read by gpulse's log reader without complaint.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, require_data

import bench.lib.corpus.causes as causes  # noqa: E402

from gpulse.analysis.cause import REMEDIES  # noqa: E402
from gpulse.sources.recorded import read_log  # noqa: E402

NAMES = ("pai-more-work-avg", "pai-throttled-thermal-avg", "pai-throttled-power-avg", "pai-hw-slowdown-avg",
         "pai-ecc-avg", "pai-cold-rank-avg", "pai-throttled-power-event-states-avg",
         "pai-throttled-thermal-throttle-states-avg", "pai-throttled-thermal-mask-avg", "pai-hw-slowdown-mask-avg",
         "pai-link-width-avg", "pai-link-gen-avg", "pai-hot-plain-avg", "pai-cold-rank-plain-avg",
         "h100/ckpt1+health", "h100/ckpt1", "h100/ckpt50+health", "h100/ckpt50",
         "seed-imbalance+health-avg", "seed-imbalance-avg")
# The module's fixtures build the cases and run one `gpulse report` process per
# case (20), and pytest-timeout charges fixture setup to the first test that uses
# them: on a 2-core machine running other suites that took over the suite's 300 s.
pytestmark = pytest.mark.timeout(1500)

# what the evidence of each cause must speak of
SAYS = {"throttling": ("throttle",), "degraded_hardware": ("ECC", "remapping", "no throttle reason", "hw_slowdown",
                                                          "link"),
        "more_work": ("active",), "off_gpu": ("spin-wait",), "unknown": ()}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    for rel in ("traces/h100-8gpu/ckpt1.csv", "traces/h100-8gpu/ckpt50.csv", "traces/h100-8gpu/ckpt1000.csv",
                "traces/alibaba-minibatch/job_1_norm.csv", "captures/nvidia-smi/h100-80gb-hbm3-query-gpu.csv"):
        require_data(rel)
    got = causes.build(tmp_path_factory.mktemp("causes"), quick=True)
    return {c.name: c for c in got}


@pytest.fixture(scope="module")
def reports(built, tmp_path_factory):
    """findings.json of every case, one `gpulse report` process each."""
    out = {}
    for name, c in built.items():
        d = tmp_path_factory.mktemp("report")
        r = subprocess.run([sys.executable, "-m", "gpulse", "report", "--input", str(c.path), "--out", str(d),
                            "--quiet"], capture_output=True, text=True, timeout=600,
                           env={"PYTHONPATH": str(ROOT / "exporter"), "PATH": "/usr/bin:/bin"})
        assert r.returncode == 0, (name, r.stderr[-2000:])
        out[name] = json.loads((d / "findings.json").read_text(encoding="utf-8"))
    return out


def test_the_case_list_is_the_generated_one(built):
    assert tuple(built) == NAMES


def test_cases_are_deterministic_and_read_cleanly(built, tmp_path):
    names = ("pai-throttled-thermal-avg", "h100/ckpt1+health", "seed-imbalance+health-avg")
    again = {c.name: c for c in causes.build(tmp_path, quick=True, only=names)}
    assert tuple(again) == names
    for name in names:
        assert again[name].path.read_bytes() == built[name].path.read_bytes(), name
    run = read_log(str(built["pai-throttled-thermal-avg"].path))
    assert run.format == "nvidia-smi-csv" and not run.errors
    rows = [r.reading for r in run.records if r.gpu == "6" and r.reading.counters.get("throttle_seconds_total")]
    # the injected reason counter climbs over the slow span, in seconds by reason
    thr = [r.counters["throttle_seconds_total"][("hw_thermal",)] for r in rows]
    assert thr[-1] - thr[0] > 100
    assert {r.gauges.get("sm_clock_hertz") for r in rows} >= {1.98e9}


def _finding(doc: dict, gpu: str) -> dict | None:
    for f in doc["findings"]:
        if gpu and f["kind"] == "straggler" and f["text"].startswith(f"GPU {gpu} "):
            return f
        if not gpu and f["kind"] == "imbalance":
            return f
    return None


@pytest.mark.parametrize("name", NAMES)
def test_report_names_the_labelled_cause(built, reports, name):
    c, doc = built[name], reports[name]
    assert doc["schema"] == "gpulse-findings/3"
    if c.gpu:
        assert [s["gpu"] for s in doc["stragglers"]] == [c.gpu], (name, doc["stragglers"])
    f = _finding(doc, c.gpu)
    assert f is not None, (name, [x["text"][:80] for x in doc["findings"]])
    assert f["cause"] in c.accept, (name, f["cause"], f["evidence"], f["missing"])
    assert f["evidence"] and all(isinstance(e, str) and e for e in f["evidence"]), name
    if f["cause"] == "unknown":
        assert f["missing"] and f["remedy"].startswith(REMEDIES["unknown"]), name
    else:
        assert f["remedy"].rstrip(".") == REMEDIES[f["cause"]] or REMEDIES[f["cause"]] in f["remedy"], name
        said = " ".join(f["evidence"])
        assert not SAYS[f["cause"]] or any(w in said for w in SAYS[f["cause"]]), (name, f["evidence"])
    if f["cause"] in ("throttling", "degraded_hardware"):
        # a slowed or failing GPU is never told to rebalance its work
        assert not f["remedy"].lower().startswith("rebalance"), (name, f["remedy"])


@pytest.mark.parametrize("name", ["pai-throttled-power-avg", "pai-hw-slowdown-avg", "pai-more-work-avg",
                                  "pai-hot-plain-avg", "h100/ckpt50"])
def test_live_gauge_says_what_the_report_says(built, reports, name):
    # the log replayed through the exporter's engine and collector (what
    # `gpulse serve --source replay` serves): gpulse_gpu_straggler_cause for the
    # straggler carries the report's cause, and no other GPU gets one
    from bench.cause_matrix import live_cause
    c = built[name]
    cause, detail = live_cause(c)
    assert cause == _finding(reports[name], c.gpu)["cause"], (name, detail)
    assert set(detail["reads"]) == {cause} and not detail["other_gpus"], (name, detail)
