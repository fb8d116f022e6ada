"""The averaged-power share (analysis.activity): a sample's share of work read from
where its power lies between its GPU's own spin-wait and working levels, and the
calibration that decides when those levels are known well enough to use."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulse.analysis.activity import SPIN_UTIL, PowerLevels, activity_of, share_of, spin_gate_watts
from gpulse.analysis.thresholds import value
from gpulse.model import Sample

GATE = spin_gate_watts(0.3, 700, None, None)     # 210 W on a 700 W H100
DT = 0.1


def feed(lv: PowerLevels, watts: list[float], t0: float = 0.0, util: float = 1.0) -> float:
    """100 ms samples at these powers; returns the time after the last."""
    t = t0
    for p in watts:
        t += DT
        lv.add(t, DT, util, p, GATE)
    return t


def calibrated(spin: float = 150.0, work: float = 550.0) -> PowerLevels:
    lv = PowerLevels()
    t = feed(lv, [spin] * 200)                   # a 20 s checkpoint wait
    feed(lv, [work] * 1000, t)                   # 100 s of compute
    return lv


def test_share_is_linear_between_the_gpu_s_own_levels():
    levels = calibrated().levels(GATE, calibrated().spin_level())
    assert levels == pytest.approx((151.0, 551.0))      # the 2 W bins' middles
    # a 1 s average over 0.3 s of spin-wait and 0.7 s of work reads 0.7 of the way up
    mixed = Sample(0, util=1.0, power_w=0.3 * 151 + 0.7 * 551)
    act = activity_of(mixed, "power-gated", GATE)
    assert act == 1.0                                    # the gate: all work
    assert share_of(mixed, "power-gated", act, levels) == pytest.approx(0.7)
    spin = Sample(0, util=1.0, power_w=140.0)
    assert share_of(spin, "auto", activity_of(spin, "auto", GATE), levels) == 0.0
    hot = Sample(0, util=1.0, power_w=600.0)
    assert share_of(hot, "auto", 1.0, levels) == 1.0
    # never above utilisation; light work under the spin-wait utilisation keeps the gate's answer
    assert share_of(Sample(0, util=0.6, power_w=551.0), "auto", 0.6, levels) == 0.6
    assert share_of(Sample(0, util=0.15, power_w=160.0), "auto", 0.15, levels) == 0.15
    # SM activity, where auto has it, is taken as it is
    sm = Sample(0, util=1.0, power_w=300.0, sm_active=0.4)
    assert share_of(sm, "auto", activity_of(sm, "auto", GATE), levels) == 0.4


def test_spin_level_needs_its_own_waits():
    lv = PowerLevels()
    need = value("share_spin_seconds")
    t = feed(lv, [150.0] * int(need / DT - 5))
    assert lv.spin_level() is None                       # not yet share_spin_seconds
    feed(lv, [150.0] * 10, t)
    assert lv.spin_level() == pytest.approx(151.0)
    # low utilisation or unknown power is no spin-wait
    other = PowerLevels()
    feed(other, [150.0] * 500, util=0.2)
    feed(other, [None] * 500)
    assert other.spin_s == 0 and other.spin_level() is None


def test_working_level_needs_sustained_compute():
    lv = PowerLevels()
    # steps of 0.9 s above the gate between waits: an averaged sample there is never all work
    t = 0.0
    for _ in range(200):
        t = feed(lv, [300.0] * 9 + [150.0] * 3, t)
    assert lv.work_s == 0
    assert lv.levels(GATE, 151.0) is None
    # a second and more above the gate: the samples after the first second count
    t = feed(lv, [550.0] * 30, t)
    assert lv.work_s == pytest.approx(2.0, abs=0.15)
    assert lv.levels(GATE, 151.0) is None                # not yet share_work_seconds
    feed(lv, [550.0] * int(value("share_work_seconds") / DT), t)
    assert lv.levels(GATE, 151.0) == pytest.approx((151.0, 551.0))


def test_no_share_without_a_real_gap():
    """ckpt1's peers: spin-waits at ~150 W, short steps that reach ~300 W. A working
    level that close to the spin level would read a few watts of spin as work."""
    lv = calibrated(spin=150.0, work=300.0)
    assert lv.spin_level() == pytest.approx(151.0)
    assert lv.levels(GATE, lv.spin_level()) is None      # 150 W apart, under the 210 W gate
    assert calibrated(work=380.0).levels(GATE, 151.0) == pytest.approx((151.0, 381.0))
    assert lv.levels(None, 151.0) is None                # no gate, no share
    assert lv.levels(GATE, None) is None                 # no spin level, no share


def test_each_gpu_is_calibrated_on_itself_and_follows_a_new_level():
    capped, hot = calibrated(work=450.0), calibrated(work=600.0)
    lc, lh = capped.levels(GATE, capped.spin_level()), hot.levels(GATE, hot.spin_level())
    # each computing flat out reads as wholly working on its own level
    assert share_of(Sample(0, util=1.0, power_w=451.0), "auto", 1.0, lc) == 1.0
    assert share_of(Sample(0, util=1.0, power_w=601.0), "auto", 1.0, lh) == 1.0
    # a GPU capped from now on: the old level fades within the histogram's span
    lv = calibrated(work=550.0)
    feed(lv, [450.0] * int(3 * PowerLevels.SPAN / DT), 1000.0)
    assert lv.levels(GATE, 151.0) == pytest.approx((151.0, 451.0))



@settings(max_examples=500, deadline=None)
@given(st.one_of(st.none(), st.floats()), st.one_of(st.none(), st.floats()), st.floats(), st.floats(),
       st.floats(-5, 5), st.sampled_from(["auto", "power-gated"]))
def test_the_share_is_min_util_clamp_to_the_bit(util, power, spin, work, act, mode):
    """share_of writes min(util, clamp(x, 0, 1)) as comparisons, not builtin calls (it runs
    for every sample of a log): the value the builtins give, to the bit, NaN, infinities
    and signed zeros included (findings are compared byte for byte across trees)."""
    s = Sample(0.0, util=util, power_w=power)
    if util is None or util < SPIN_UTIL or power is None:
        expect = act
    elif work - spin == 0:
        with pytest.raises(ZeroDivisionError):
            share_of(s, mode, act, (spin, work))
        return
    else:
        expect = min(util, max(0.0, min(1.0, (power - spin) / (work - spin))))
    assert struct.pack("<d", share_of(s, mode, act, (spin, work))) == struct.pack("<d", expect)
