"""A spread that a straggler explains is the straggler's, not imbalance, live as in
the report (analysis.verdict.imbalance_explained), on evaluation-corpus cases built
from real recordings (bench/corpus, reading ../shared/data):

- Alibaba PAI job 1 with instantaneous power: worker 6's recorded batch times rise
  for ~3 minutes mid-run; spin-waiting at idle-level power, the others read inactive
  while it computes, so the window's active fractions spread past
  imbalance_alert_ratio. The report names worker 6 and gives no imbalance finding; the
  exporter holds gpulse_group_imbalance_ratio back while worker 6's deviating run
  explains the spread (from its first deviating window, before it is confirmed, as
  the report's span starts there), and publishes it the rest of the time.
- the seed case (GPUs 0-1 at 99 %, 2-3 under 15 %): imbalance with no straggler keeps
  its gauge and its finding.
"""
from __future__ import annotations

import sys

import pytest

from conftest import ROOT, require_data

sys.path.insert(0, str(ROOT))
import bench.corpus as corpus  # noqa: E402

from gpulse.analysis.thresholds import value  # noqa: E402
from gpulse.collector import snapshot_families  # noqa: E402
from testing.config import test_config  # noqa: E402
from gpulse.engine import run_offline  # noqa: E402
from gpulse.report.findings import analyse  # noqa: E402
from gpulse.report.inputs import from_log  # noqa: E402
from gpulse.sources.replay import ReplaySource  # noqa: E402

PAI1, SEED = "pai/job_1-instant", "seed-imbalance-instant"
GAUGE = "gpulse_group_imbalance_ratio"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    require_data("traces/alibaba-minibatch")
    require_data("traces/h100-8gpu/ckpt1.csv")     # the power levels come from the H100 logs
    out = tmp_path_factory.mktemp("corpus")
    return {c.name: p for c, p in corpus.build(out, select=f"^({PAI1}|{SEED})$")}


def live(path):
    """Per tick of the exporter's engine over the log: (t, holding, the imbalance
    gauge as /metrics exposes it or None when absent, busiest active fraction,
    the GPUs gpulse_gpu_straggler names)."""
    c = test_config(source="replay", replay__file=str(path), replay__speed=0, node_name="n")
    out = []
    for _, snap in run_offline(ReplaySource(c), c):
        if not snap.groups:
            continue
        exposed = [s.value for fam in snapshot_families(snap) for s in fam.samples if s.name == GAUGE]
        acts = [v.active_ratio for v in snap.gpus if v.active_ratio is not None]
        out.append((snap.t, snap.groups[0].holding, exposed[0] if exposed else None, max(acts, default=0.0),
                    {v.info.gpu for v in snap.gpus if v.straggler is not None}))
    return out


def imbalanced_stretches(ticks) -> list[float]:
    """Lengths of the stretches in which the gauge says imbalance (the pager's
    threshold and busiest-GPU guard)."""
    lim, floor = value("imbalance_alert_ratio"), value("imbalance_min_active_ratio")
    out, since = [], None
    for t, holding, imb, hi, _ in ticks:
        if holding and imb is not None and imb > lim and hi > floor:
            since = t if since is None else since
            continue
        if since is not None:
            out.append(t - since)
            since = None
    return out


def test_worker6_spread_is_the_straggler_s_live_and_in_the_report(built):
    ticks = live(built[PAI1])
    confirmed = [t for t, *_, names in ticks if names]
    assert confirmed and {g for *_, names in ticks for g in names} == {"6"}
    # while worker 6 is a confirmed straggler the spread is its own: the gauge is held
    # back where worker 6 explains it and never claims imbalance
    during = [imb for *_, imb, _, names in ticks if names]
    assert None in during
    assert all(imb is None or imb <= value("imbalance_alert_ratio") for imb in during)
    # the gauge is there the rest of the time (held back, not dropped)
    held = [imb for _, holding, imb, _, names in ticks if holding and not names]
    assert sum(imb is not None for imb in held) >= 0.9 * len(held)
    # no imbalance stands for as long as the bench's live gauge verdicts must hold
    assert max(imbalanced_stretches(ticks), default=0.0) < 60.0
    doc = analyse(from_log(str(built[PAI1]))).as_json()
    assert [s["gpu"] for s in doc["stragglers"]] == ["6"]
    assert not [f for f in doc["findings"] if f["kind"] == "imbalance"]


def test_imbalance_without_a_straggler_keeps_its_gauge_and_finding(built):
    ticks = live(built[SEED])
    assert not any(names for *_, names in ticks)
    assert max(imbalanced_stretches(ticks), default=0.0) >= 600.0    # most of its 25 minutes of training
    doc = analyse(from_log(str(built[SEED]))).as_json()
    assert [f for f in doc["findings"] if f["kind"] == "imbalance"]
