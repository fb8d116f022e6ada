"""The evaluation corpus generators (bench/lib/corpus) write logs gpulse reads as real ones.

Checked on short cases: the same seed writes the same bytes; both formats parse
with gpulse's own log reader into the right GPUs; rows of one poll carry their own
timestamps milliseconds apart; 1 s-averaged power hides a sub-second spin-wait
that instantaneous power shows; the truth of a built case follows the table.
"""
from __future__ import annotations

import statistics
import sys

import pytest

from conftest import require_data

import bench.lib.corpus  # noqa: E402,F401

cases = sys.modules["bench.lib.corpus.cases"]
smi = sys.modules["bench.lib.corpus.smi"]

from gpulse.sources.recorded import read_log  # noqa: E402


@pytest.fixture(scope="module")
def lv():
    require_data("traces/h100-8gpu/ckpt1.csv")
    require_data("traces/h100-8gpu/ckpt1000.csv")
    return cases.levels()


def _spin_case() -> smi.Timeline:
    """4 GPUs: start-up, then compute with a 0.5 s spin-wait every 2 s, exit."""
    tl = smi.Timeline(4, 60.0)
    for g in range(4):
        tl.add(g, 2.0, 10.0, smi.LOAD)
        t = 10.0
        while t < 50.0:
            tl.add(g, t, t + 1.5, smi.COMPUTE)
            tl.add(g, t + 1.5, t + 2.0, smi.SPIN)
            t += 2.0
    return tl


def test_levels_come_from_the_real_traces(lv):
    assert 450 < lv.compute_w < 700 and 100 < lv.spin_w < 200 and 50 < lv.idle_w < 100
    assert lv.job_mib > 10_000 and lv.free_mib < 100


@pytest.mark.parametrize("fmt", ["avg", "instant"])
def test_same_seed_same_log_and_gpulse_reads_it(tmp_path, lv, fmt):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    smi.write_log(str(a), _spin_case(), lv, fmt, seed=7)
    smi.write_log(str(b), _spin_case(), lv, fmt, seed=7)
    assert a.read_bytes() == b.read_bytes()
    smi.write_log(str(b), _spin_case(), lv, fmt, seed=8)
    assert a.read_bytes() != b.read_bytes()
    run = read_log(str(a))
    assert run.format == "nvidia-smi-csv" and not run.errors
    assert sorted(d.gpu for d in run.devices) == ["0", "1", "2", "3"]
    header = a.read_text().splitlines()[0]
    assert ("power.draw.instant" in header) == (fmt == "instant")


def test_rows_of_one_poll_are_milliseconds_apart(tmp_path, lv):
    p = tmp_path / "skew.csv"
    smi.write_log(str(p), _spin_case(), lv, "avg", seed=3, query_stall_rate=0.05)
    run = read_log(str(p))
    times = sorted(r.t for r in run.records)
    steps = [b - a for a, b in zip(times, times[1:])]
    within = [s for s in steps if s < 0.05]
    assert within and 0.0005 < statistics.median(within) < 0.006       # a few ms between rows
    assert max(steps) > 0.3                                            # a stalled GPU 0 query


def test_averaged_power_hides_a_short_spin_wait(tmp_path, lv):
    watts = {}
    for fmt in ("avg", "instant"):
        p = tmp_path / f"{fmt}.csv"
        smi.write_log(str(p), _spin_case(), lv, fmt, seed=5)
        run = read_log(str(p))
        busy = [r.sample.power_w for r in run.records if 12 < r.t - run.start < 48 and (r.sample.util or 0) >= 0.9]
        watts[fmt] = min(busy)
    # instantaneous power drops to spin-wait level inside the 0.5 s waits, the 1 s mean does not
    assert watts["instant"] < lv.spin_w * 1.2 < watts["avg"]


def test_truth_of_recurring_stalls_and_of_one_pause():
    stall = cases.truth_of(cases.stall_case("t", 1, 4, 2.5, 0.6, 0.1, 300.0, 300.0), 2.5)
    onset = cases.LEAD + cases.STARTUP + 300.0
    assert stall.stall and onset < stall.stall_onset < onset + 120 and stall.period == 2.5
    assert not stall.stragglers and not stall.imbalance
    pause = cases.truth_of(cases.one_pause(2, gpus=4, train=600.0), None)
    assert not pause.stall            # one episode never recurs
    # rank 0 off the GPU once while the others spin-wait: a pause, not a straggler (a cold
    # straggler's deviation must recur within straggler_recur_seconds)
    assert pause.stragglers == ()
    imb = cases.truth_of(cases.seed_imbalance(3, train=600.0), None)
    assert imb.imbalance and not imb.stall
