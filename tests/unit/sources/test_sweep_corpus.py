"""The straggler sensitivity cases (bench/lib/corpus/sweep.py): their ground truth.

A straggler's cost is the share of its peers' time spent waiting for it, computed
from the timeline the logs are sampled from: for a rank slower by s per step, with
peers within +-2 % of each other and an all-reduce of 3 %, about s / (1 + s + 0.03).
Checked on a few cases: the cost comes out at that figure and on the slow GPU only,
positives and negatives (and the borderline +5 %) are labelled by it, a slow node
costs as a node while a slow GPU of a 4 x 8 job does not make its node slow, the
controls cost nothing, a checkpointing rank costs as a recurring straggler (one
pause alone nothing), and a written case reads as a clean log with its columns.
"""
from __future__ import annotations

import random

import pytest

from conftest import require_data

from bench.lib.corpus import sweep  # noqa: E402

from gpulse.sources.recorded import read_log  # noqa: E402

CASES = {c.name: c for c in sweep.cases()}


def _label(name: str) -> sweep.SweepCase:
    c = CASES[name]
    tls, steps, onset = sweep.lay_out(c, random.Random(c.seed))
    sweep.truth(c, tls, steps)
    c.onset = onset
    return c


def _expected(s: float) -> float:
    return s / (1 + s + sweep.ALLREDUCE)


@pytest.mark.parametrize("name", ["thermal+10", "more_work+20", "off_gpu+15", "link+30"])
def test_a_slow_gpu_costs_its_slowdown_and_is_the_only_straggler(name):
    c = _label(name)
    key = f"{c.node(0)}/{c.slow[0][1]}"
    assert c.cost[key] == pytest.approx(_expected(c.slowdown), abs=0.01)
    assert c.stragglers == (key,) and c.positive and not c.borderline
    assert max(v for k, v in c.cost.items() if k != key) < 0.015


def test_plus_five_is_a_borderline_negative():
    c = _label("power+5")
    key = f"{c.node(0)}/{c.slow[0][1]}"
    assert 0.04 < c.cost[key] < sweep.COST_LIMIT
    assert not c.positive and c.borderline and c.stragglers == ()


@pytest.mark.parametrize("name", ["control-jitter2", "control-jitter8", "control-drift", "control-hot",
                                  "control-memory", "4x8/control"])
def test_controls_cost_nothing(name):
    c = _label(name)
    assert not c.positive and not c.borderline
    assert max([*c.cost.values(), *c.node_cost.values()]) < 0.02


def test_the_straggler_moves_across_gpu_indices():
    gpus = {c.slow[0][1] for c in CASES.values() if c.kind == "gpu" and c.nodes == 1}
    assert len(gpus) == sweep.GPUS


def test_jitter_changes_the_slowest_rank_every_step():
    c = CASES["control-jitter8"]
    tls, steps, _ = sweep.lay_out(c, random.Random(c.seed))
    work = [sweep.step_work(tls[0], g, steps) for g in range(sweep.GPUS)]
    slowest = [max(range(sweep.GPUS), key=lambda g: work[g][s]) for s in range(len(steps))]
    assert len(set(slowest)) == sweep.GPUS
    assert max(slowest.count(g) for g in range(sweep.GPUS)) < 0.25 * len(steps)


def test_a_slow_node_is_a_node_a_slow_gpu_is_not():
    node = _label("4x8/node+25")
    assert node.slow_nodes == (node.node(1),)
    assert node.node_cost[node.node(1)] == pytest.approx(_expected(0.25), abs=0.01)
    assert set(node.stragglers) == {f"{node.node(1)}/{g}" for g in range(sweep.GPUS)}
    gpu = _label("4x8/gpu+25")
    assert gpu.slow_nodes == () and gpu.stragglers == (f"{gpu.node(2)}/5",)
    assert max(gpu.node_cost.values()) < 0.02


def test_the_onset_is_after_start_up_and_the_quick_subset_has_every_kind():
    c = _label("thermal+20")
    assert c.onset == pytest.approx(sweep.LEAD + sweep.STARTUP + sweep.HEALTHY)
    quick = {c.kind for c in sweep.cases(quick=True)} | {c.nodes for c in sweep.cases(quick=True)}
    assert {"gpu", "control", "node", 4} <= quick


def test_a_written_case_reads_as_a_clean_log_with_its_columns(tmp_path):
    require_data("traces/h100-8gpu/ckpt1000.csv")
    require_data("captures/nvidia-smi/h100-80gb-hbm3-query-gpu.csv")
    c = sweep.build(CASES["link+15"], tmp_path)     # an instant-power log: it has an index column
    assert c.fmt == "instant"
    (path,) = c.paths
    header = path.read_text().splitlines()[0]
    assert "pcie.link.width.current" in header and "clocks_event_reasons_counters" in header
    run = read_log(str(path))
    assert not run.errors and sorted({r.gpu for r in run.records}, key=int) == [str(g) for g in range(8)]
    gpu = str(c.slow[0][1])
    narrow = [line for line in path.read_text().splitlines()[1:] if line.split(", ")[1] == gpu
              and line.split(", ")[-2] == "4"]
    assert narrow, "the degraded link shows as width 4 against 16"


def test_checkpointed_cases_cost_as_without_and_every_peer_waits_through_the_checkpoints():
    c = _label("ckpt/off_gpu+15")
    assert c.fmt == "avg" and c.checkpoint
    key = f"{c.node(0)}/{c.slow[0][1]}"
    assert c.cost[key] == pytest.approx(_expected(c.slowdown), abs=0.015)
    # rank 0, off the GPU 16 s every 216 s while its peers spin-wait, is a recurring
    # straggler: two checkpoints in 5 minutes, 32 s of it; its onset its second one
    zero = f"{c.node(0)}/0"
    assert c.stragglers == (zero, key)
    assert c.cost[zero] == pytest.approx(2 * sweep.CKPT_SECONDS / sweep.WINDOW, abs=0.01)
    assert c.onset + sweep.CKPT_EVERY / 2 < c.onsets[zero] < c.onset + sweep.CKPT_EVERY + sweep.CKPT_SECONDS + 60
    assert key not in c.onsets
    control = _label("ckpt/control-jitter2")
    assert control.positive and control.stragglers == (f"{control.node(0)}/0",)
    assert max(v for k, v in control.cost.items() if not k.endswith("/0")) < 0.015
    tls, _, _ = sweep.lay_out(c, random.Random(c.seed))
    long_spins = [[b - a for a, b, state, _ in tls[0].seg[g] if state == "spin" and b - a >= sweep.CKPT_SECONDS - 1e-6]
                  for g in range(sweep.GPUS)]
    assert long_spins[0] == [] and all(len(s) >= 2 for s in long_spins[1:])


def test_a_pause_recurs_only_with_another_within_five_minutes_that_adds_up():
    ckpt = sweep.CKPT_SECONDS
    assert sweep.recurs([(100.0, 100.0 + ckpt)]) is None                      # one pause
    assert sweep.recurs([(100.0, 100.0 + ckpt), (316.0, 316.0 + ckpt)]) == 316.0
    assert sweep.recurs([(100.0, 100.0 + ckpt), (500.0, 500.0 + ckpt)]) is None   # 384 s apart
    assert sweep.recurs([(100.0, 105.0), (200.0, 205.0)]) is None              # 10 s of 5 minutes
    assert sweep.recurs([(100.0, 105.0), (200.0, 205.0), (290.0, 296.0)]) == 290.0


def test_the_checkpoints_are_rank_0s_pauses_and_nobody_elses():
    c = CASES["ckpt/control-jitter2"]
    tls, _, _ = sweep.lay_out(c, random.Random(c.seed))
    found = sweep.pauses(tls)
    assert set(found) == {(0, 0)}
    assert len(found[(0, 0)]) >= 2 and all(b - a == pytest.approx(sweep.CKPT_SECONDS) for a, b in found[(0, 0)])
    plain = CASES["control-jitter2"]
    assert sweep.pauses(sweep.lay_out(plain, random.Random(plain.seed))[0]) == {}
