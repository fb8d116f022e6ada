"""The averaged-power share (analysis.activity): a sample's share of work read from
where its power lies between its GPU's own spin-wait and working levels."""
from __future__ import annotations

import pytest

from gpulse.analysis.activity import WorkLevel, activity_of, spin_gate_watts, work_levels
from gpulse.model import Sample


def _level(watts: list[float], gate: float) -> WorkLevel:
    w = WorkLevel()
    for p in watts:
        w.add(Sample(0, util=1.0, power_w=p), gate)
    return w


def test_share_is_linear_between_the_gpu_s_own_levels():
    gate = spin_gate_watts(0.3, 700, None, None)            # 210 W
    work = _level([550.0] * 100, gate)
    levels = work_levels(gate, 74.0, work)
    assert levels == pytest.approx((148.0, 551.0))          # 2 x idle; the 2 W bin's middle
    # a 1 s average over 0.3 s of spin-wait and 0.7 s of work reads 0.7 of the way up
    mixed = Sample(0, util=1.0, power_w=0.3 * 148 + 0.7 * 551)
    assert activity_of(mixed, "power-gated", gate, levels) == pytest.approx(0.7)
    assert activity_of(mixed, "power-gated", gate) == 1.0   # the binary gate: all work
    assert activity_of(Sample(0, util=1.0, power_w=150), "auto", gate, levels) == pytest.approx(0.005, abs=0.01)
    assert activity_of(Sample(0, util=1.0, power_w=600), "auto", gate, levels) == 1.0
    # never above utilisation; light work under the spin-wait utilisation keeps util
    assert activity_of(Sample(0, util=0.6, power_w=551), "auto", gate, levels) == 0.6
    assert activity_of(Sample(0, util=0.15, power_w=160), "auto", gate, levels) == 0.15
    # SM activity, where a sample has it, is taken as it is
    assert activity_of(Sample(0, util=1.0, power_w=300, sm_active=0.4), "auto", gate, levels) == 0.4


def test_each_gpu_is_calibrated_on_itself():
    gate = 210.0
    capped = work_levels(gate, 74.0, _level([450.0] * 100, gate))
    hot = work_levels(gate, 80.0, _level([600.0] * 100, gate))
    # each computing flat out reads as wholly working on its own level
    assert activity_of(Sample(0, util=1.0, power_w=451), "auto", gate, capped) == 1.0
    assert activity_of(Sample(0, util=1.0, power_w=601), "auto", gate, hot) == 1.0


def test_working_level_follows_the_gpu_and_needs_both_levels():
    gate = 210.0
    w = _level([550.0] * 1000, gate)
    assert w.level == pytest.approx(551.0)
    # samples under the gate or at low utilisation are not working power
    w.add(Sample(0, util=1.0, power_w=150.0), gate)
    w.add(Sample(0, util=0.2, power_w=700.0), gate)
    assert w.n == 1000
    # a GPU capped from now on: the old level fades within the histogram's span
    for _ in range(2 * WorkLevel.SPAN):
        w.add(Sample(0, util=1.0, power_w=450.0), gate)
    assert w.level == pytest.approx(451.0)
    assert work_levels(gate, None, w) is None                # no idle floor seen yet
    assert work_levels(None, 74.0, w) is None
    assert work_levels(gate, 74.0, WorkLevel()) is None      # no working power seen yet
