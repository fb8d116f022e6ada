"""Short stalls read through NVML's utilisation window, on corpus traces with real levels.

nvidia-smi's `utilization.gpu` is the busy share of the driver's last sample period
(at least 1/6 s), so a 0.3 s stall polled every 100 ms shows one or two idle rows and
its co-idle stretch reads ~0.18 s: without allowing for the window the report and the
exporter lose about half of every stall and half of the episodes. The traces are
bench/lib/corpus cases (power and memory levels of the real 8xH100 logs, row skew, query
stalls, stalls off the grid with jitter, 1 s-averaged or instantaneous power, start-up
and exit), the truth is the timeline they are sampled from.
"""
from __future__ import annotations

import sys

import pytest

from conftest import require_data

import bench.lib.corpus  # noqa: E402,F401

cases = sys.modules["bench.lib.corpus.cases"]
smi = sys.modules["bench.lib.corpus.smi"]

from gpulse.analysis.coidle import UTIL_WINDOW, StallTracker, Run  # noqa: E402
from gpulse.analysis.thresholds import value  # noqa: E402
from testing.config import test_config  # noqa: E402
from gpulse.drive import run_offline  # noqa: E402
from gpulse.report.findings import analyse  # noqa: E402
from gpulse.report.inputs import from_log  # noqa: E402
from gpulse.sources.recorded import read_log  # noqa: E402
from gpulse.sources.replay import ReplaySource  # noqa: E402
from gpulse.sources.sim import SimSource  # noqa: E402

HEALTHY, STALLED = 120.0, 240.0


@pytest.fixture(scope="module")
def lv():
    require_data("traces/h100-8gpu/ckpt1.csv")
    require_data("traces/h100-8gpu/ckpt1000.csv")
    return cases.levels()


def _stall_log(tmp_path, lv, fmt: str, length: float, period: float, seed: int):
    tl = cases.stall_case("w", seed, 8, period, length, 0.1, HEALTHY, STALLED)
    path = tmp_path / f"stall-{length}-{period}-{fmt}.csv"
    smi.write_log(str(path), tl, lv, fmt, seed)
    # the true stalls: every GPU idle at once (the timeline the log is sampled from)
    onset = cases.LEAD + cases.STARTUP + HEALTHY
    true = [(a, b) for a, b, state, _ in tl.seg[0] if state == smi.IDLE and 0.2 <= b - a < 1.0 and a > onset - 0.5]
    return path, true


@pytest.mark.parametrize("fmt", ["instant", "avg"])
def test_short_stalls_keep_their_length_and_count_through_the_window(tmp_path, lv, fmt):
    path, true = _stall_log(tmp_path, lv, fmt, 0.3, 2.5, seed=31)
    true_seconds = sum(b - a for a, b in true)
    doc = analyse(from_log(str(path))).as_json()
    [p] = [p for p in doc["stall_patterns"] if p["count"] >= value("stall_recurring_episodes")]
    # every stall is an episode (not only those whose phase caught two idle rows) ...
    assert p["count"] >= 0.9 * len(true), (p["count"], len(true))
    assert p["period_seconds"] == pytest.approx(2.5, rel=0.05)
    # ... and the stalled seconds are the true ones within a sample spacing per stall,
    # where the bare co-idle stretches hold ~60 % of them
    assert abs(p["stalled_seconds"] - true_seconds) <= 0.1 * len(true), (p["stalled_seconds"], true_seconds)
    # 12 % of the stretch it covers: above the page threshold there, not diluted by the healthy minutes
    assert p["span_share"] >= value("stall_page_ratio")
    [f] = [f for f in doc["findings"] if f["kind"] == "sync_stall" and "every ~2.5 s" in f["text"]]
    assert f["severity"] == "high"

    # the exporter's counters: the same tracker, the same stall share of the stalled stretch
    c = test_config(source="replay", replay__file=str(path), replay__speed=0)
    hist = []
    for _, snap in run_offline(ReplaySource(c), c):
        if snap.groups and snap.t is not None:
            g = snap.groups[0]
            hist.append((snap.t, g.stall_seconds, g.holding_seconds, g.stalls_total))
    t0 = read_log(str(path)).start          # the timeline's 0 is the log's first row
    a = min(hist, key=lambda h: abs(h[0] - (t0 + true[0][0])))
    b = min(hist, key=lambda h: abs(h[0] - (t0 + true[-1][1])))
    assert (b[1] - a[1]) / (b[2] - a[2]) >= value("stall_page_ratio")
    # counted once final (up to stall_pending_seconds later; the job's exit makes all final)
    assert hist[-1][3] - a[3] >= 0.9 * len(true)


def test_one_idle_sample_is_a_stall_only_when_the_samples_average_a_window():
    # two GPUs, samples 0.1 s apart, one co-idle sample: under NVML's window that is
    # ~0.27 s of stall, an episode under --min-stall 0.2s; instantaneous samples
    # (the simulator) claim only the 0.1 s they cover
    def runs():
        return [[Run(0.0, 10.0, False, True), Run(10.0, 10.1, True, True), Run(10.1, 20.0, False, True)]
                for _ in range(2)]
    nvml = StallTracker(0.2, window=UTIL_WINDOW)
    nvml.advance(runs(), 20.0)
    inst = StallTracker(0.2, window=SimSource.util_window)
    inst.advance(runs(), 20.0)
    assert nvml.stalls_total == 1 and nvml.stall_seconds == pytest.approx(0.1 + UTIL_WINDOW)
    assert inst.stalls_total == 0 and inst.stall_seconds == pytest.approx(0.1)


def test_report_and_pager_share_one_imbalance_threshold(tmp_path, lv):
    # GPUs 0-1 compute throughout, GPUs 2-3 for 1.2 s of every 2 s (idle otherwise):
    # (1 - 0.6) / 1 = 0.4 over every window and over the whole run, between the pager's
    # 0.3 and the 0.5 the report used to ask for
    tl = smi.Timeline(4, 10.0 + 60.0 + 360.0 + 20.0)
    a = cases.start_up(tl, 10.0)
    stop = a + 360.0
    for g in range(4):
        t = a
        while t < stop:
            if g < 2:
                tl.add(g, t, t + 2.0, smi.COMPUTE)
            else:
                tl.add(g, t, t + 1.2, smi.COMPUTE)
                tl.add(g, t + 1.2, t + 2.0, smi.IDLE)
            t += 2.0
    cases.job_exit(tl, stop)
    path = tmp_path / "imbalance-0.4.csv"
    smi.write_log(str(path), tl, lv, "instant", 5)
    doc = analyse(from_log(str(path))).as_json()
    assert 0.3 < doc["imbalance"]["whole_run"] < 0.5
    [f] = [f for f in doc["findings"] if f["kind"] == "imbalance"]
    assert "GPUs 0 and 1" in f["text"] and "GPUs 2 and 3" in f["text"]
    c = test_config(source="replay", replay__file=str(path), replay__speed=0)
    imb = [snap.groups[0].imbalance for _, snap in run_offline(ReplaySource(c), c)
           if snap.groups and snap.groups[0].holding and snap.groups[0].imbalance is not None]
    # the exporter's gauge, which GpulseWorkloadImbalance reads, holds above the same threshold
    assert sorted(imb)[len(imb) // 2] > value("imbalance_alert_ratio")
