"""An ordinary straggler in a log whose power is nvidia-smi's 1 s-averaged power.draw
(bench/lib/corpus/sweep.py: synchronous 8-GPU training, steps of 1-2.5 s, power and memory
levels from the real 8xH100 traces, clocks and limit from the real H100 capture).

The peers' spin-waits (0.1-0.6 s a step) are shorter than the average, so the binary
power gate read every peer sample as work and the straggler's gap vanished. The
active share read linearly between each GPU's own spin-wait and working power
(analysis.activity) keeps it: a GPU +15 % (more work) and one +20 % (thermal) are
named by the live exporter and by the report, on the right GPU with their cause, and
a control whose slowest rank changes every step names nothing.
"""
from __future__ import annotations

import pytest

from conftest import require_data

from bench.lib.corpus import sweep

from testing.config import test_config
from gpulse.drive import run_offline
from gpulse.report.findings import analyse
from gpulse.report.inputs import from_log
from gpulse.sources.replay import ReplaySource

CASES = ("more_work+15", "thermal+20", "control-jitter2")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    require_data("traces/h100-8gpu/ckpt1000.csv")
    require_data("captures/nvidia-smi/h100-80gb-hbm3-query-gpu.csv")
    out = tmp_path_factory.mktemp("sweep")
    done = {}
    for c in sweep.cases():
        if c.name in CASES:
            assert c.fmt == "avg"             # the 1 s-averaged power.draw column
            done[c.name] = sweep.build(c, out / c.workload)
    return done


def live(path):
    """GPU -> (seconds after the log's first tick when gpulse_gpu_straggler first
    reads 1, its cause), and the peers' mean active fraction over the run."""
    c = test_config(source="replay", replay__file=str(path), replay__speed=0, node_name="n")
    named, t0, snap = {}, None, None
    for _, snap in run_offline(ReplaySource(c), c):
        t0 = snap.t if t0 is None else t0
        for v in snap.gpus:
            if v.straggler is not None and v.info.gpu not in named:
                named[v.info.gpu] = (snap.t - t0, v.cause.cause if v.cause else None)
    return named, {v.info.gpu: v.totals.active / v.totals.sampled for v in snap.gpus}


@pytest.mark.parametrize("name", ["more_work+15", "thermal+20"])
def test_a_straggler_under_averaged_power_is_named_live_and_in_the_report(built, name):
    case = built[name]
    (slow,) = [f"{g}" for _, g in case.slow]
    assert case.positive and 0.10 < case.cost[f"{case.node(0)}/{slow}"] < 0.20
    named, active = live(case.paths[0])
    assert set(named) == {slow}
    when, cause = named[slow]
    assert when > case.onset and cause in case.accept
    # the peers read the share of their time they spin-wait: not all working
    peers = sorted(v for k, v in active.items() if k != slow)
    assert active[slow] - peers[len(peers) // 2] > 0.05
    doc = analyse(from_log(str(case.paths[0]))).as_json()
    assert {s["gpu"] for s in doc["stragglers"]} == {slow}
    causes = [f["cause"] for f in doc["findings"] if f["kind"] == "straggler"]
    assert causes and set(causes) <= set(case.accept)


def test_a_control_under_averaged_power_names_nothing(built):
    case = built["control-jitter2"]
    assert not case.positive
    named, active = live(case.paths[0])
    assert named == {}
    assert max(active.values()) - min(active.values()) < 0.01
    doc = analyse(from_log(str(case.paths[0]))).as_json()
    assert doc["stragglers"] == []
