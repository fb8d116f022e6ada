"""One straggler, three views, one cause.

For every straggler-cause sim scenario (sources/sim.py):
- the live exporter: a `gpulse serve --source sim` process in virtual time
  (testing/virtualclock.py), whose /metrics carries gpulse_gpu_straggler_cause for
  the straggler once the model has confirmed it;
- the report: `gpulse report`'s analysis of a recording of the same scenario,
  written as dcgm-exporter CSV (one row per GPU and collection, 100 ms apart with
  jitter, every field a dcgm-exporter with the default counters collects), so the
  report reads clocks, throttle reasons, temperature, the power limit, ECC, PCIe
  replays and row remapping from a log;
- the pager: the snapshots of the engine run that report reads, through the
  exporter's collector, scraped every 15 s, evaluated by the real promtool with the
  shipped rules: the firing GpulseStragglerGPU names the cause in its summary and
  description (never in a label, which would change its identity when the exporter
  confirms it). One engine run gives both (`reportutil.report_and_live`), so the
  report and the alert are judged on the very same analysis.
All three must name the same GPU and cause. The ordinary case of a degraded link, a
GPU 25 % slower per step while its PCIe link retries, is read from an export with
DCGM_FI_PROF_SM_ACTIVE (SM activity tells the compute from the peers' spin-wait) by
the report and the pager. The seed case (the `imbalance`
scenario: upper half at 99 %, lower half at 12 %, clocks and health normal) is a
work-distribution problem with the rebalancing remedy in the report, and no
straggler anywhere.
"""
from __future__ import annotations

import json
import random
import re
import subprocess
import sys

import jsonschema
import pytest

from conftest import ROOT, Gpulse, require_binary
from reportutil import report_and_live
from testing import rulegraph
from testing.promutil import add_scrape

from gpulse.analysis.cause import REMEDIES
from gpulse.analysis.thresholds import value
from gpulse.catalog import THROTTLE_REASONS
from testing import virtualclock
from testing.config import test_config
from gpulse.report.render import web_asset
from gpulse.sources.dcgm.fields import _THROTTLE_BITS
from gpulse.sources.sim import Scenario, SimSource

CASES = {   # scenario -> (straggler GPU, cause, words its evidence must hold)
    "straggler-throttled": ("3", "throttling", "hw_thermal throttle"),
    "straggler-hw-slowdown": ("3", "degraded_hardware", "hw_slowdown throttle"),
    "straggler-link-errors": ("3", "degraded_hardware", "PCIe replays"),
    "straggler-more-work": ("3", "more_work", "no thermal, power or slowdown throttle reason"),
    "straggler-off-gpu": ("3", "off_gpu", "peers spin-wait"),
}
GPUS = 8
NODE = "n1"
START = 1_764_590_000.0
POLL = 0.1
SCRAPE = 15.0
# long enough for the alert: the group must have held its workload
# straggler_settle_seconds of 5 minutes, then the 1 m hold
RECORD_SECONDS = 5 * 60 + 120.0
# virtual seconds each live exporter runs: the analysis window fills, then the
# straggler deviates straggler_min_span_seconds before it is confirmed, and a margin
SPAN = 2 * value("straggler_min_span_seconds") + 60
SCHEMA = json.loads(web_asset("findings.schema.json"))

FIELDS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
          "DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK",
          "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
          "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_XID_ERRORS")


# SM activity a dcgm-exporter with profiling reports, by the sim's state: a computing
# GPU's SMs are not all busy all the time; a spin-wait in a collective keeps a few
SM_ACTIVE = {"compute": 0.92, "spin": 0.04, "dip": 0.5}


def record_dcgm(path, scenario: str | Scenario, seconds: float = RECORD_SECONDS, seed: int = 7,
                sm_active: bool = False):
    """The sim scenario as a dcgm-exporter CSV export (see module doc); sm_active: with
    DCGM_FI_PROF_SM_ACTIVE, as a dcgm-exporter with the profiling counters writes it."""
    sc = scenario if isinstance(scenario, Scenario) else None
    # a Scenario of the test's own replaces the configured one, which must be a known name
    cfg = test_config(source="sim", sim__scenario="balanced" if sc else scenario, sim__gpus=GPUS)
    src = SimSource(cfg, scenario=sc)
    src.open()
    rnd = random.Random(seed)
    prev: dict[str, dict] = {}
    lines = [",".join(("timestamp", "gpu", "Hostname") + FIELDS + (("DCGM_FI_PROF_SM_ACTIVE",) if sm_active else ()))]
    for n in range(int(seconds / POLL) + 1):
        now = n * POLL
        t = START + now + rnd.uniform(-0.004, 0.004)
        for r in src.poll(now).readings:
            s, g, c = r.samples[0], r.gauges, r.counters
            thr = c.get("throttle_seconds_total", {})
            # the reasons whose time grew at this collection are the ones set now
            mask = sum(_THROTTLE_BITS[k[0]] for k, v in thr.items() if v > prev.get(r.gpu, {}).get(k, 0.0))
            prev[r.gpu] = dict(thr)
            ecc = c.get("ecc_errors_total", {})
            mib = 2 ** 20
            cells = (round(100 * s.util), round(s.power_w, 1), round(s.memory_used_bytes / mib),
                     round((g["memory_total_bytes"] - s.memory_used_bytes) / mib), g["power_limit_watts"],
                     round(g["temperature_celsius"]), round(g["sm_clock_hertz"] / 1e6), round(g["memory_clock_hertz"] / 1e6),
                     mask, c.get("pcie_replays_total", ""), ecc.get(("corrected",), ""), ecc.get(("uncorrected",), ""),
                     g.get("remapping_pending", ""), 0)
            if sm_active:
                level = SM_ACTIVE.get(src.state(int(r.gpu), now - src.t0))
                cells += (0.0 if level is None else round(level + rnd.uniform(-0.01, 0.01), 3),)
            lines.append(",".join([f"{t:.3f}", r.gpu, NODE] + [str(x) for x in cells]))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def live():
    """One exporter per scenario, all at once, each on a virtual clock of SPAN
    seconds; {scenario: /metrics text once its clock is spent}."""
    procs = {sc: Gpulse("--source", "sim", "--sim.scenario", sc, "--sim.gpus", str(GPUS),
                        "--node-name", NODE, env=virtualclock.env(SPAN)) for sc in (*CASES, "imbalance")}
    try:
        texts: dict[str, str] = {}
        for sc, p in procs.items():
            virtualclock.wait_spent(p.url, 300)   # a bound on CPU: six exporters share the machine
            texts[sc] = p.metrics()
        missing = [sc for sc in CASES if "gpulse_gpu_straggler_cause{" not in texts[sc]]
        assert not missing, f"no straggler cause from {missing}: {procs[missing[0]].output()[-2000:]}"
        yield texts
    finally:
        for p in procs.values():
            p.stop()


def _series(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, v = line.rsplit(" ", 1)
            out.append((dict(re.findall(r'(\w+)="([^"]*)"', labels)), float(v)))
    return out


def causes(text: str) -> dict[str, str]:
    return {lab["gpu"]: lab["cause"] for lab, v in _series(text, "gpulse_gpu_straggler_cause") if v == 1.0}


def stragglers(text: str) -> dict[str, float]:
    return {lab["gpu"]: v for lab, v in _series(text, "gpulse_gpu_straggler")}


def report(tmp_path, log) -> dict:
    """`gpulse report`'s findings.json on the log (a subprocess)."""
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "gpulse", "report", "--input", str(log), "--out", str(out), "--quiet"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env={"PYTHONPATH": str(ROOT / "exporter"), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((out / "findings.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    assert doc["schema"] == "gpulse-findings/3"
    return doc


def report_and_alerts(tmp_path, log) -> tuple[dict, set[tuple[str, str]]]:
    """The report's findings.json on the log, and (cause, gpu) of every
    GpulseStragglerGPU firing at the end of the recording, as its summary names them,
    from the shipped rules over the snapshots of the report's own engine run scraped
    every 15 s."""
    series: dict[str, list] = {}
    n, t0 = 0, None

    def scrape(snap):
        nonlocal n, t0
        t0 = snap.t if t0 is None else t0
        if (snap.t or t0) - t0 + 1e-6 >= n * SCRAPE:
            add_scrape(series, snap, n)
            n += 1

    doc = report_and_live(log, scrape)
    jsonschema.validate(doc, SCHEMA)
    assert doc["schema"] == "gpulse-findings/3"
    # the shipped rules the alert can see (testing/rulegraph.py)
    rules = rulegraph.seen_by([ROOT / "prometheus" / "rules" / f for f in
                               ("gpulse-recording.rules.yml", "gpulse-training.rules.yml")],
                              ["GpulseStragglerGPU"], tmp_path / "rules")
    lines = ["rule_files:"] + [f"  - {f}" for f in rules]
    lines += [f"evaluation_interval: {SCRAPE:g}s", "tests:", f"  - interval: {SCRAPE:g}s", "    input_series:"]
    for key, col in series.items():
        col += [None] * (n - len(col))
        lines += [f"      - series: '{key}'",
                  "        values: '" + " ".join("_" if v is None else repr(float(v)) for v in col) + "'"]
    lines += ["    alert_rule_test:", f"      - eval_time: {(n - 1) * SCRAPE:g}s",
              "        alertname: GpulseStragglerGPU", "        exp_alerts: []"]
    test_file = tmp_path / "cause.test.yml"
    test_file.write_text("\n".join(lines) + "\n")
    p = subprocess.run([require_binary("promtool"), "test", "rules", str(test_file)],
                       capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    # every expectation is empty: promtool prints what it got as the failure
    assert p.returncode == 0 or "got:" in out, out[-2000:]
    got = out.split("got:", 1)[1] if "got:" in out else ""
    labels = re.findall(r"Labels:\{([^}]*)\}", got)
    assert labels and not any("cause=" in lab for lab in labels), got[-2000:]
    found = set()
    for lab, summary in zip(labels, re.findall(r'summary="([^"]*)"', got)):
        gpu = re.search(r'gpu="([^"]+)"', lab).group(1)
        m = re.search(r"\(cause: (\w+)\)$", summary)
        found.add((m.group(1) if m else summary, gpu))
    return doc, found


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_live_report_and_alert_agree_on_the_cause(scenario, live, tmp_path):
    gpu, want, words = CASES[scenario]
    text = live[scenario]
    # live: exactly the straggler carries a cause, and it is the right one
    assert causes(text) == {gpu: want}
    flags = stragglers(text)
    assert flags[gpu] == 1.0 and all(v == 0.0 for k, v in flags.items() if k != gpu)
    promtool = require_binary("promtool")
    p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert p.returncode == 0 and not (p.stdout + p.stderr).strip(), p.stdout + p.stderr

    log = record_dcgm(tmp_path / f"{scenario}.csv", scenario)
    doc, alerts = report_and_alerts(tmp_path, log)
    [f] = [f for f in doc["findings"] if f["kind"] == "straggler"]
    assert [s["gpu"] for s in doc["stragglers"]] == [gpu]
    assert f["cause"] == want and f["missing"] == [], f
    assert any(words in e for e in f["evidence"]), f["evidence"]
    assert f["remedy"] == REMEDIES[want]
    if want in ("throttling", "degraded_hardware"):
        assert "do not rebalance" in f["remedy"] and not f["remedy"].startswith("rebalance")

    assert alerts == {(want, gpu)}


def test_seed_case_is_a_work_distribution_problem(live, tmp_path):
    # live: a half-and-half split has no single straggler to judge
    assert causes(live["imbalance"]) == {}
    doc = report(tmp_path, record_dcgm(tmp_path / "imbalance.csv", "imbalance", seconds=240.0))
    [f] = [f for f in doc["findings"] if f["kind"] == "imbalance"]
    assert f["cause"] == "more_work" and f["missing"] == []
    assert f["remedy"] == REMEDIES["more_work"]
    assert "rebalance" in f["remedy"] and "more GPUs or overclocking will not help" in f["remedy"]
    assert "sm clock 1980 MHz vs peers 1980 MHz" in f["evidence"]
    assert not [f for f in doc["findings"] if f["kind"] == "straggler"]


def test_a_link_25_percent_slower_under_sm_activity_is_degraded_hardware(tmp_path):
    """The ordinary case: GPU 3 computes 25 % longer per step (SM activity 0.92 of
    0.95 of each step against 0.76 for its peers, who spin-wait for it) while its
    PCIe link retries and corrects errors, read from a dcgm-exporter export with the
    profiling counters; the report and the alert name it and its cause."""
    sc = Scenario("link-25", slow_cause="link-errors", peer_share=0.76, slow_share=0.95)
    log = record_dcgm(tmp_path / "link-25.csv", sc, sm_active=True)
    doc, alerts = report_and_alerts(tmp_path, log)
    [f] = [f for f in doc["findings"] if f["kind"] == "straggler"]
    assert [s["gpu"] for s in doc["stragglers"]] == ["3"]
    assert f["cause"] == "degraded_hardware", f
    assert any("PCIe replays" in e for e in f["evidence"]), f["evidence"]
    assert "do not rebalance" in f["remedy"]
    assert alerts == {("degraded_hardware", "3")}
