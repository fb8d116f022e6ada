"""Each NVML utilisation sample gets the power reading nearest to it in time."""
from __future__ import annotations


def test_powers_at_is_the_nearest_point_in_time():
    import bisect
    import random
    from gpulse.sources.nvml.source import _State

    def nearest(pts, ws, t):
        i = bisect.bisect_left(pts, t)
        if i == 0:
            return ws[0]
        if i == len(pts):
            return ws[-1]
        return ws[i] if pts[i] - t < t - pts[i - 1] else ws[i - 1]

    rng = random.Random(7)
    st = _State.__new__(_State)
    for _ in range(200):
        st.power_t = sorted(rng.uniform(0, 2) for _ in range(rng.randint(1, 8)))
        st.power_w = [rng.uniform(90, 700) for _ in st.power_t]
        times = sorted(rng.choice([rng.uniform(-0.5, 2.5), rng.choice(st.power_t)]) for _ in range(rng.randint(0, 9)))
        assert st.powers_at(times) == [nearest(st.power_t, st.power_w, t) for t in times]
    st.power_t, st.power_w = [], []
    assert st.powers_at([1.0, 2.0]) == [None, None]
