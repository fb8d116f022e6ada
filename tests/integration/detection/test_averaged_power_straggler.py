"""An ordinary straggler in a log whose power is nvidia-smi's 1 s-averaged power.draw
(bench/lib/corpus/sweep.py's ckpt/ cases: synchronous 8-GPU training, steps of
1-2.5 s, rank 0 checkpointing every 200 s while its peers spin-wait, power and memory
levels from the real 8xH100 traces, clocks and limit from the real H100 capture).

The peers' spin-waits at every step (0.1-0.6 s) are shorter than the average, so the
binary power gate reads every peer sample as work and the straggler's gap vanishes.
Each GPU shows its own spin-wait level in the checkpoints and its working level in
its steps, so the active share read between them (analysis.activity) keeps the gap:
a GPU +15 % slower (more work) is named by the live exporter and by the report, on
the right GPU with its cause; a control whose slowest rank changes every step names
only rank 0, whose checkpoints make it a recurring straggler (off_gpu) in the truth
and in the detectors alike; and the same straggler logged without checkpoints (no GPU shows a spin
level) is read between each GPU's idle floor and its working level, a lower bound of
the waits: the straggler is still named, and the control without checkpoints names
nothing.
"""
from __future__ import annotations

import pytest

from conftest import CPU_BOUND, require_data

from bench.lib.corpus import sweep

from reportutil import report_and_live

pytestmark = CPU_BOUND

CASES = ("ckpt/more_work+15", "ckpt/control-jitter2", "more_work+15", "control-jitter2")


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
    assert set(done) == set(CASES)
    return done


def report_live(path):
    """findings.json, and from the snapshots of its engine run as the exporter serves
    them (reportutil.report_and_live): GPU -> (seconds after the first analysis tick,
    within a tick of the log's first row, when gpulse_gpu_straggler first reads 1, its
    cause), and each GPU's active fraction over the run."""
    named, first, last = {}, [], []

    def look(snap):
        if not first:
            first.append(snap.t)
        last[:] = [snap]
        for v in snap.gpus:
            if v.straggler is not None and v.info.gpu not in named:
                named[v.info.gpu] = (snap.t - first[0], v.cause.cause if v.cause else None)

    doc = report_and_live(path, look)
    return doc, named, {v.info.gpu: v.totals.active / v.totals.sampled for v in last[0].gpus}


def test_a_straggler_under_averaged_power_is_named_live_and_in_the_report(built):
    case = built["ckpt/more_work+15"]
    (slow,) = [f"{g}" for _, g in case.slow]
    assert case.positive and 0.10 < case.cost[f"{case.node(0)}/{slow}"] < 0.20
    doc, named, active = report_live(case.paths[0])
    # rank 0, off the GPU 16 s every 200 s while its peers spin-wait (8 % of 5 minutes),
    # is a straggler by recurrence (analysis.verdict) besides the slow GPU
    assert set(named) == {slow, "0"} and named["0"][1] == "off_gpu"
    when, cause = named[slow]
    # confirmed after its onset, within the 5 minutes the alerts aim for
    assert case.onset < when < case.onset + 300
    assert cause in case.accept
    # the peers read the share of their time they spin-wait: not all working
    peers = sorted(v for k, v in active.items() if k != slow)
    assert active[slow] - peers[len(peers) // 2] > 0.05
    assert {s["gpu"] for s in doc["stragglers"]} == {slow, "0"}
    causes = [f["cause"] for f in doc["findings"] if f["kind"] == "straggler" and f"GPU {slow} " in f["text"]]
    assert causes and set(causes) <= set(case.accept)


def test_a_control_under_averaged_power_names_only_the_checkpointing_rank(built):
    # no slow GPU: only rank 0, off the GPU 16 s every 200 s (recurrence, off_gpu)
    case = built["ckpt/control-jitter2"]
    assert case.stragglers == (f"{case.node(0)}/0",)       # the truth counts it too (sweep.py)
    doc, named, active = report_live(case.paths[0])
    assert {k: c for k, (_, c) in named.items()} == {"0": "off_gpu"}
    peers = [v for k, v in active.items() if k != "0"]
    assert max(peers) - min(peers) < 0.01
    assert [s["gpu"] for s in doc["stragglers"]] == ["0"]


def test_without_a_spin_level_the_idle_floor_bounds_the_share(built):
    """No GPU of this log ever waits a second: no spin level. The idle floor bounds it
    from below, so the peers' short waits read as part work, the gap as a part of its
    true figure: the straggler is named all the same, live and in the report."""
    case = built["more_work+15"]
    (slow,) = [f"{g}" for _, g in case.slow]
    true_cost = case.cost[f"{case.node(0)}/{slow}"]
    doc, named, active = report_live(case.paths[0])
    assert set(named) == {slow}
    assert named[slow][1] in case.accept
    peers = sorted(v for k, v in active.items() if k != slow)
    gap = active[slow] - peers[len(peers) // 2]
    # under-read, never over-read: (W - S) / (W - floor) of it, ~0.84 on these levels
    assert 0.05 < gap < true_cost
    assert {s["gpu"] for s in doc["stragglers"]} == {slow}


def test_without_a_spin_level_a_control_names_nothing(built):
    case = built["control-jitter2"]
    assert not case.positive
    doc, named, active = report_live(case.paths[0])
    assert named == {}
    assert doc["stragglers"] == []
