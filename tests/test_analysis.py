"""The analysis formulas, pinned on hand-computed cases."""
import math

import pytest

from gpulse.analysis import (Integrals, Run, StallTracker, activity_of, imbalance, integrate_sample,
                             load_balance, robust_z, stall_period)
from gpulse.model import Sample


def test_imbalance_and_load_balance_hand_computed():
    xs = [0.99, 0.99, 0.15, 0.15]
    assert imbalance(xs) == pytest.approx((0.99 - 0.15) / 0.99)
    assert round(imbalance(xs), 3) == 0.848
    assert round(load_balance(xs), 3) == 0.576
    assert imbalance([0.5, 0.5]) == 0.0 and load_balance([0.5, 0.5]) == 1.0


def test_idle_group_is_balanced():
    assert imbalance([0.01, 0.0, 0.02], idle_max=0.05) == 0.0
    assert load_balance([0.01, 0.0, 0.02], idle_max=0.05) == 1.0
    assert imbalance([]) == 0.0


def test_robust_z_hand_computed():
    # median 0.6, MAD 0.0 → floor 0.05: the hot GPU is (0.99-0.6)/0.05 = 7.8
    z = robust_z([0.6, 0.99, 0.6, 0.6, 0.6])
    assert z[1] == pytest.approx(7.8)
    assert z[0] == 0.0
    # spread peers: median 0.5, |dev| = .1,.0,.1,.4 → MAD = 0.1, scale 0.14826
    z = robust_z([0.4, 0.5, 0.6, 0.9])
    med = 0.55  # even count: median of 0.4,0.5,0.6,0.9
    mad = sorted(abs(x - med) for x in [0.4, 0.5, 0.6, 0.9])
    scale = 1.4826 * (mad[1] + mad[2]) / 2
    assert z[3] == pytest.approx((0.9 - med) / scale)


def test_robust_z_even_group_does_not_explode():
    z = robust_z([0.900, 0.901, 0.899, 0.900])
    assert max(abs(v) for v in z) < 0.1
    assert robust_z([0.7]) == [0.0]


def test_power_gated_activity_separates_spin_from_work():
    # H100 numbers from the real traces: spin-wait 100 % at ~150 W, work ~550 W, limit 700 W
    spin = Sample(0, util=1.0, power_w=150)
    work = Sample(0, util=0.98, power_w=550)
    light = Sample(0, util=0.15, power_w=160)
    assert activity_of(spin, "power-gated", 700, 0.3) == 0.0
    assert activity_of(work, "power-gated", 700, 0.3) == 0.98
    assert activity_of(light, "power-gated", 700, 0.3) == 0.15   # low power *and* low util: real
    assert activity_of(spin, "utilization", 700, 0.3) == 1.0
    assert activity_of(Sample(0, util=1.0, sm_active=0.05), "sm_active", None, 0.3) == 0.05
    # a source without SM activity falls back to power-gating
    assert activity_of(spin, "sm_active", 700, 0.3) == 0.0


def test_integration_counts_spin_idle_and_coverage():
    acc = Integrals()
    integrate_sample(acc, 0.5, util=1.0, active=0.0, idle_threshold=0.05)
    integrate_sample(acc, 0.5, util=0.02, active=0.02, idle_threshold=0.05)
    assert acc.busy == pytest.approx(0.51)
    assert acc.spin_wait == pytest.approx(0.5)
    assert acc.idle == pytest.approx(0.5)
    assert acc.sampled == pytest.approx(1.0)


def _runs(pattern, holds=True, dt=0.1, t0=0.0):
    """pattern string: '#' active, '.' inactive, one char per dt."""
    out = []
    for i, c in enumerate(pattern):
        out.append(Run(t0 + i * dt, t0 + (i + 1) * dt, c == ".", holds))
    return out


def test_stall_tracker_counts_only_common_idle():
    tr = StallTracker(min_stall=0.2)
    a = _runs("####...####.#####")
    b = _runs("#####..###..#####")   # common idle: indices 5,6 (0.2 s) and 11 (0.1 s)
    tr.advance([a, b], until=1.7)
    assert tr.stall_seconds == pytest.approx(0.3)
    assert tr.stalls_total == 1
    assert tr.episodes[0].start == pytest.approx(0.5)
    assert tr.holding_seconds == pytest.approx(1.7)


def test_stall_tracker_no_job_and_startup_are_not_stalls():
    tr = StallTracker(min_stall=0.2)
    # memory released: all idle is "no job"
    tr.advance([_runs("......", holds=False), _runs("......", holds=False)], until=0.6)
    assert tr.stall_seconds == 0 and tr.holding_seconds == 0
    # job holds memory but has not computed yet (start-up): not a stall
    tr.advance([_runs("....##..##", t0=0.6), _runs("....##..##", t0=0.6)], until=1.6)
    assert tr.stall_seconds == pytest.approx(0.2)   # only the dip after the first work
    assert tr.stalls_total == 1


def test_stall_tracker_incremental_equals_batch():
    a = _runs("##....####....##...#" * 3)
    b = _runs("##....###.....##...#" * 3)
    whole = StallTracker(0.2)
    whole.advance([a, b], until=6.0)
    parts = StallTracker(0.2)
    for k in range(1, 13):
        parts.advance([a, b], until=k * 0.5)
    assert parts.stall_seconds == pytest.approx(whole.stall_seconds)
    assert parts.stalls_total == whole.stalls_total
    assert [e.start for e in parts.episodes] == pytest.approx([e.start for e in whole.episodes])


def test_gaps_never_fabricate_a_stall():
    tr = StallTracker(0.1)
    a = _runs("##" + "." * 8)
    b = _runs("##")   # b stops reporting: a gap, not idleness
    tr.advance([a, b], until=1.0)
    assert tr.stall_seconds == 0


def test_stall_period():
    assert stall_period([0, 2.0, 4.1, 6.0, 8.05]) == pytest.approx(2.0, abs=0.06)
    assert stall_period([0, 2.0]) is None                       # too few
    assert stall_period([0, 1, 5, 6, 20, 21]) is None            # no steady rhythm
    assert stall_period([0, 10, 20, 30], now=200) is None        # the rhythm stopped
    assert math.isclose(stall_period([0, 10, 20, 30], now=35), 10)
