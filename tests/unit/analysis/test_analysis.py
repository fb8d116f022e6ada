"""The analysis formulas, pinned on hand-computed cases."""
import math

import pytest

from gpulse.analysis import (Integrals, Run, StallTracker, activity_of, imbalance, integrate_sample,
                             load_balance, robust_z, spin_gate_watts, stall_period)
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
    # median 0.6, MAD 0.0 → floor 0.01 (whole percents): the hot GPU is (0.99-0.6)/0.01 = 39
    z = robust_z([0.6, 0.99, 0.6, 0.6, 0.6])
    assert z[1] == pytest.approx(39.0)
    assert z[0] == 0.0
    # spread peers: median 0.5, |dev| = .1,.0,.1,.4 → MAD = 0.1, scale 0.14826
    z = robust_z([0.4, 0.5, 0.6, 0.9])
    med = 0.55  # even count: median of 0.4,0.5,0.6,0.9
    mad = sorted(abs(x - med) for x in [0.4, 0.5, 0.6, 0.9])
    scale = 1.4826 * (mad[1] + mad[2]) / 2
    assert z[3] == pytest.approx((0.9 - med) / scale)


def test_robust_z_even_group_does_not_explode():
    # a wobble under the measurement's resolution (one percent) stays far from straggler_z
    z = robust_z([0.900, 0.901, 0.899, 0.900])
    assert max(abs(v) for v in z) < 0.2
    assert robust_z([0.7]) == [0.0]


def test_power_gated_activity_separates_spin_from_work():
    # H100 numbers from the real traces: spin-wait 100 % at ~150 W, work ~550 W, limit 700 W
    spin = Sample(0, util=1.0, power_w=150)
    work = Sample(0, util=0.98, power_w=550)
    light = Sample(0, util=0.15, power_w=160)
    g = spin_gate_watts(0.3, 700, None, None)
    assert g == pytest.approx(210)
    assert activity_of(spin, "power-gated", g) == 0.0
    assert activity_of(work, "power-gated", g) == 0.98
    assert activity_of(light, "power-gated", g) == 0.15   # low power *and* low util: real
    assert activity_of(spin, "utilization", g) == 1.0
    assert activity_of(Sample(0, util=1.0, sm_active=0.05), "sm_active", None) == 0.05
    # a source without SM activity falls back to power-gating
    assert activity_of(spin, "sm_active", g) == 0.0


def test_spin_gate_without_a_power_limit():
    # ckpt1.csv: never computes at full power (peak ~300 W), idled at ~70 W at start-up
    assert spin_gate_watts(0.3, None, 297, 70) == pytest.approx(210)
    # ckpt1000.csv: computes at ~600 W
    assert spin_gate_watts(0.3, None, 600, 65) == pytest.approx(195)
    # never idle in the log: only the peak is known
    assert spin_gate_watts(0.3, None, 600, None) == pytest.approx(180)
    assert spin_gate_watts(0.3, None, None, None) is None


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


WARM = "#" * 50      # 5 s of work: the job has started
SETTLE = "#" * 60    # 6 s of work: the last episode can no longer merge, it is final


def test_stall_tracker_counts_only_common_idle():
    tr = StallTracker(min_stall=0.2)
    a = _runs(WARM + "####...####.#####" + SETTLE)
    b = _runs(WARM + "#####..###..#####" + SETTLE)   # common idle: 0.2 s at 5.5 s and 0.1 s at 6.1 s
    tr.advance([a, b], until=len(a) * 0.1)
    assert tr.stall_seconds == pytest.approx(0.3)
    assert tr.stalls_total == 1
    assert tr.episodes[0].start == pytest.approx(5.5)
    assert tr.holding_seconds == pytest.approx(len(a) * 0.1)


def test_stall_tracker_no_job_and_startup_are_not_stalls():
    tr = StallTracker(min_stall=0.2)
    # memory released: all idle is "no job"
    tr.advance([_runs("......", holds=False), _runs("......", holds=False)], until=0.6)
    assert tr.stall_seconds == 0 and tr.holding_seconds == 0
    # job holds memory, blips of activity while it starts: not a stall until it has worked 5 s
    start = "....#....##......#..."
    tr.advance([_runs(start, t0=0.6), _runs(start, t0=0.6)], until=0.6 + len(start) * 0.1)
    assert tr.stall_seconds == 0
    rest = WARM + "...." + SETTLE
    t1 = 0.6 + len(start) * 0.1
    tr.advance([_runs(rest, t0=t1), _runs(rest, t0=t1)], until=t1 + len(rest) * 0.1)
    assert tr.stall_seconds == pytest.approx(0.4)
    assert tr.stalls_total == 1


def test_fragments_of_one_long_stall_are_one_episode():
    tr = StallTracker(min_stall=0.2)
    # 0.6 s stall, 1.4 s of a blip, then 15 s: one checkpoint, one episode
    pat = WARM + "." * 6 + "#" * 14 + "." * 150 + SETTLE
    tr.advance([_runs(pat), _runs(pat)], until=len(pat) * 0.1)
    assert tr.stalls_total == 1
    assert tr.episodes[0].start == pytest.approx(5.0)
    assert tr.episodes[0].duration == pytest.approx(17.0)
    assert tr.stall_seconds == pytest.approx(15.6)
    # short stalls far apart (relative to their length) stay separate
    tr = StallTracker(min_stall=0.2)
    pat = WARM + ("..." + "#" * 17) * 5 + SETTLE
    tr.advance([_runs(pat), _runs(pat)], until=len(pat) * 0.1)
    assert tr.stalls_total == 5


def test_a_group_stalled_most_of_the_time_still_has_episodes():
    # 4 s stalls every 5 s: every gap merges, but no merged episode outgrows 120 s
    tr = StallTracker(min_stall=0.2)
    pat = WARM + ("." * 40 + "#" * 10) * 100 + SETTLE
    tr.advance([_runs(pat), _runs(pat)], until=len(pat) * 0.1)
    assert tr.stalls_total >= 4
    assert all(e.duration <= 120 for e in tr.episodes)


def test_a_stall_that_ends_in_release_is_not_an_episode():
    tr = StallTracker(min_stall=0.2)
    a = _runs(WARM + "." * 30) + _runs("." * 20, holds=False, t0=8.0)
    tr.advance([a, a], until=10.0)
    assert tr.stall_seconds == pytest.approx(3.0)
    assert tr.stalls_total == 0


def test_stall_tracker_incremental_equals_batch():
    a = _runs(WARM + "##....####....##...#" * 3 + SETTLE)
    b = _runs(WARM + "##....###.....##...#" * 3 + SETTLE)
    end = len(a) * 0.1
    whole = StallTracker(0.2)
    whole.advance([a, b], until=end)
    parts = StallTracker(0.2)
    k = 1
    while k * 0.5 < end:
        parts.advance([a, b], until=k * 0.5)
        k += 1
    parts.advance([a, b], until=end)
    assert parts.stall_seconds == pytest.approx(whole.stall_seconds)
    assert parts.stalls_total == whole.stalls_total
    assert [e.start for e in parts.episodes] == pytest.approx([e.start for e in whole.episodes])


def test_gaps_never_fabricate_a_stall():
    tr = StallTracker(0.1)
    a = _runs(WARM + "##" + "." * 8)
    b = _runs(WARM + "##")   # b stops reporting: a gap, not idleness
    tr.advance([a, b], until=len(a) * 0.1)
    assert tr.stall_seconds == 0


def test_stall_period():
    assert stall_period([0, 2.0, 4.1, 6.0, 8.05]) == pytest.approx(2.0, abs=0.06)
    assert stall_period([0, 2.0]) is None                       # too few
    assert stall_period([0, 1, 5, 6, 20, 21]) is None            # no steady rhythm
    assert stall_period([0, 10, 20, 30], now=200) is None        # the rhythm stopped
    assert math.isclose(stall_period([0, 10, 20, 30], now=35), 10)
    # two alike long stalls (a run that checkpointed twice) give a period; unlike ones don't
    assert stall_period([347.2, 599.3], now=620, durations=[17.3, 17.0]) == pytest.approx(252.1)
    assert stall_period([347.2, 599.3], now=620, durations=[0.4, 17.0]) is None
