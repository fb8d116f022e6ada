"""A straggler by what it costs, on a log with the timing and levels of the real 8×H100
recordings (tests/realtrace.py, reading ../shared/data): the ordinary case, one GPU
25 % slower per step (a power cap), that every other exporter shows as ~100 %
utilisation.

Synchronous data-parallel training: in each step every rank computes for its own
time (a base step with ±2 % independent jitter per rank and step), then spin-waits
in the all-reduce (busy at idle-level power) for the slowest, then the all-reduce
itself; GPU 5 computes 25 % longer every step. With a communication-heavy step its
peers' active fraction is ~0.75 against its ~0.9: a gap of 0.15, which the earlier
model (a MAD floor of 0.05, so a gap of 0.175 at least) called "evenly loaded". A 3 s input stall every minute
idles every GPU at once. 100 ms polls with the real row skew, stalls and steps off
the sample grid, instantaneous power, start-up and exit.

- the report, the live gauge and the shipped alert name GPU 5, and nobody else;
- the GPU-seconds lost agree between the live exporter (gpulse_group_lost_seconds_total),
  the report's headline (findings.json `lost`) and the shipped rules over the
  exported series in promtool (increase() of the counter and the gpulse.lost
  record), within 2 %;
- gpulse_group_imbalance_ratio is present at every tick the group is, with
  gpulse_group_imbalance_explained saying whose spread it is.
"""
from __future__ import annotations

import bisect
import json
import random
import subprocess

import pytest

from conftest import ROOT, require_binary, require_data
from realtrace import training, write_smi_log
from bench.detection_corpus import observe  # noqa: E402

from gpulse.cli import main as gpulse_main  # noqa: E402
from gpulse.collector import snapshot_families  # noqa: E402
from gpulse.drive import run_offline  # noqa: E402
from gpulse.sources.replay import ReplaySource  # noqa: E402
from testing import rulegraph
from testing.config import test_config  # noqa: E402

GPUS, SLOW, FACTOR = 8, 5, 1.25
STARTUP, WORK_END, SECONDS = 60.0, 720.0, 760.0
STEP, ALLREDUCE = 1.1, 0.45          # seconds of compute per step at base speed; a communication-heavy all-reduce
STALL_EVERY, STALL = 60.0, 3.0        # an input stall, every GPU idle


def straggler_state():
    """state(gpu, t) of the job (see module doc), steps laid out once up front."""
    rnd = random.Random(7)
    steps = []          # (start, per-rank compute end, step end)
    t = STARTUP
    stalls = []
    next_stall = STARTUP + 45.0 + 0.037
    while t < WORK_END:
        if t >= next_stall:
            stalls.append((t, t + STALL))
            t += STALL
            next_stall += STALL_EVERY
            continue
        ends = [t + STEP * (FACTOR if g == SLOW else 1.0) * (1 + rnd.uniform(-0.02, 0.02)) for g in range(GPUS)]
        end = max(ends) + ALLREDUCE
        steps.append((t, ends, end))
        t = end
    base = training(stalls, STARTUP, WORK_END)
    starts = [s[0] for s in steps]

    def state(g: int, t: float) -> str:
        s = base(g, t)
        if s != "compute":
            return s
        k = bisect.bisect_right(starts, t) - 1
        if k < 0:
            return s
        a, ends, end = steps[k]
        if t >= end:
            return "idle"      # inside an input stall between steps
        if t < ends[g] or t >= end - ALLREDUCE:
            return "compute"
        return "spin"
    # the peers' true cost: the slow rank's extra compute over the step, per step
    truth = sum(ends[SLOW] - sorted(ends)[GPUS // 2] for _, ends, _ in steps) / sum(
        e - a for a, _, e in steps)
    return state, truth


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    require_data("traces/h100-8gpu/ckpt1000.csv")
    out = tmp_path_factory.mktemp("straggler-cost")
    state, truth = straggler_state()
    log = write_smi_log(out / "power-capped.csv", GPUS, SECONDS, state, seed=3, instant=True)
    rep = out / "report"
    assert gpulse_main(["report", "--input", str(log), "--out", str(rep), "--quiet"]) == 0
    doc = json.loads((rep / "findings.json").read_text(encoding="utf-8"))
    # live: the exporter's engine over the same log, what `gpulse serve --source replay` runs
    cfg = test_config(source="replay", replay__file=str(log), replay__speed=0, node_name="n1")
    ticks = []
    for _, snap in run_offline(ReplaySource(cfg), cfg):
        if not snap.groups:
            continue
        fams = {f.name: f for f in snapshot_families(snap)}
        ticks.append((snap, fams))
    return {"log": log, "doc": doc, "ticks": ticks, "truth": truth, "out": out}


def _lost_live(snap) -> float:
    return sum(v for g in snap.groups for _, v in g.lost)


def test_the_power_capped_gpu_is_named_by_the_report_with_its_cost(run):
    doc = run["doc"]
    named = [s["gpu"] for s in doc["stragglers"]]
    assert named == [str(SLOW)], doc["stragglers"]
    st = doc["stragglers"][0]
    assert st["direction"] == "busier" and st["signal"] == "active"
    # what it costs its peers, against the timeline's own figure
    assert st["cost"] == pytest.approx(run["truth"], abs=0.05), (st["cost"], run["truth"])
    assert st["cost"] >= 0.1
    assert not any(f["kind"] == "healthy" for f in doc["findings"])
    assert doc["lost"]["headline"].startswith("This run lost ")
    assert f"waiting for GPU {SLOW}" in doc["lost"]["headline"]


def test_the_live_gauge_names_it_and_nobody_else(run):
    confirmed = {v.info.gpu for snap, _ in run["ticks"] for v in snap.gpus if v.straggler is not None}
    assert confirmed == {str(SLOW)}
    # the measurement is there for every GPU of the group, at every tick the verdict is
    snap, fams = run["ticks"][-200]
    waits = {s.labels["gpu"]: s.value for s in fams["gpulse_gpu_peer_wait_ratio"].samples}
    assert set(waits) == {str(g) for g in range(GPUS)}
    assert waits[str(SLOW)] >= 0.1 and max(v for k, v in waits.items() if k != str(SLOW)) < 0.05


def test_imbalance_is_measured_at_every_tick_with_its_verdict_beside_it(run):
    explained = 0
    for snap, fams in run["ticks"]:
        g = snap.groups[0]
        if g.imbalance is None:
            continue
        ratio = [s.value for s in fams["gpulse_group_imbalance_ratio"].samples]
        verdict = [s.value for s in fams["gpulse_group_imbalance_explained"].samples]
        assert ratio == [pytest.approx(g.imbalance)] and verdict == [1.0 if g.imbalance_explained else 0.0]
        explained += bool(g.imbalance_explained)
    assert explained > 0     # the straggler explains the spread while it runs


def test_lost_gpu_seconds_agree_live_report_and_rules(run, tmp_path):
    live = _lost_live(run["ticks"][-1][0])
    reasons = {}
    for snap, _ in run["ticks"][-1:]:
        for (reason, cause), v in snap.groups[0].lost:
            reasons[reason] = reasons.get(reason, 0.0) + v
    assert reasons["straggler"] > 0 and reasons["sync_stall"] > 0, reasons
    report = run["doc"]["lost"]["gpu_seconds"]
    assert report == pytest.approx(live, rel=0.02)
    # the rules: the collector's series scraped every 15 s, the shipped rules in promtool
    promtool = require_binary("promtool")
    obs = observe(str(run["log"]), "n1")
    # the exporter keeps serving its final values after the job: 10 more minutes, so
    # the 5-minute records see every window close
    pad = 40
    n = obs.scrapes + pad
    # the shipped rules the checks below can see (testing/rulegraph.py)
    rules = rulegraph.seen_by([ROOT / "prometheus" / "rules" / f for f in
                               ("gpulse-recording.rules.yml", "gpulse-training.rules.yml")],
                              ["gpulse_group_lost_seconds_total", "cluster_workload:gpulse_group_lost_seconds:rate5m",
                               "GpulseStragglerGPU"], tmp_path / "rules")
    lines = ["rule_files:", *(f"  - {f}" for f in rules),
             "evaluation_interval: 15s", "tests:", "  - interval: 15s", "    input_series:"]
    for key, col in obs.series.items():
        col = col + [col[-1]] * pad
        vals = " ".join("_" if v is None else repr(round(v, 6)) for v in col)
        lines += [f"      - series: '{key}'", f"        values: '{vals}'"]
    end = n * 15
    onset_page = int(STARTUP + 330)   # the group has held its workload 270 s, then for: 1m
    # within 2 %: the ratio to the live figure, rounded to 0.04, is exactly 1
    lines += ["    promql_expr_test:",
              f"      - expr: round(sum(increase(gpulse_group_lost_seconds_total[{end}s])) / {live!r}, 0.04)",
              f"        eval_time: {end}s",
              "        exp_samples:", "          - {labels: '{}', value: 1}",
              "      - expr: round(sum(sum_over_time(cluster_workload:gpulse_group_lost_seconds:rate5m"
              f"[{end}s:60s])) * 60 / {live!r}, 0.04)",
              f"        eval_time: {end}s",
              "        exp_samples:", "          - {labels: '{}', value: 1}",
              "      - expr: ALERTS{alertname=\"GpulseStragglerGPU\",alertstate=\"firing\"}",
              f"        eval_time: {onset_page}s",
              "        exp_samples:",
              "          - labels: 'ALERTS{alertname=\"GpulseStragglerGPU\",alertstate=\"firing\","
              f"gpu=\"{SLOW}\",node=\"n1\",severity=\"warning\"}}'",
              "            value: 1"]
    test = tmp_path / "lost.test.yml"
    test.write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = subprocess.run([promtool, "test", "rules", str(test)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
