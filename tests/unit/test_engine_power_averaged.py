"""Engine.power_averaged() on a cold straggler's steps: only utilisation steps whose
busy side draws working power must move power, and the median GPU decides."""
from __future__ import annotations

import bisect
import random

from gpulse.analysis.thresholds import value
from testing.config import test_config
from gpulse.engine import Engine
from gpulse.model import DeviceInfo, PollResult, Reading, Sample

DT = 0.1             # one sample per GPU every 100 ms, rows a few ms apart
GPUS, SLOW = 8, 6
IDLE_W, SPIN_W, WORK_W = 72.0, 150.0, 560.0


def _steps(averaged: bool, steps: int = 150, seed: int = 7) -> Engine:
    """Steps of ~3 s: every GPU computes, GPU SLOW then sits idle (its rank off the
    GPU) and spin-waits; the peers spin-wait for it all that time (utilisation stays
    at 100 %: their only steps are start-up and exit). Phases change off the sample
    grid; utilisation is the busy share of the last 170 ms (nvidia-smi's 1/6 s window), so
    it trails an instantaneous power reading; averaged power is a 1 s running mean."""
    rnd = random.Random(seed)
    cfg = test_config(source="sim", analysis_interval="1s")
    eng = Engine(cfg, [DeviceInfo(gpu=str(g)) for g in range(GPUS)], "recorded")
    lead = 1.0
    bounds, t0 = [], lead
    for _ in range(steps):
        work, idle = rnd.uniform(1.3, 1.7), rnd.uniform(0.9, 1.3)
        bounds.append((t0, t0 + work, t0 + work + idle, t0 + work + idle + 0.4))
        t0 = bounds[-1][3]

    def state(g: int, t: float) -> tuple[float, float]:
        """(busy, watts) of GPU g at time t."""
        n = bisect.bisect_right(starts, t) - 1
        if n < 0 or t >= bounds[n][3]:
            return 0.0, IDLE_W                            # start-up and exit: idle
        _, w, i, _ = bounds[n]
        if t < w:
            return 1.0, WORK_W
        if g == SLOW and t < i:
            return 0.0, IDLE_W
        return 1.0, SPIN_W

    starts = [b[0] for b in bounds]
    t = 0.0
    while t < t0 + lead:
        readings = []
        for g in range(GPUS):
            ts = t + g * 0.002
            util = sum(state(g, ts - j * 0.01)[0] for j in range(17)) / 17
            if averaged:
                w = sum(state(g, ts - j * 0.02)[1] for j in range(50)) / 50
            else:
                w = state(g, ts)[1]
            readings.append(Reading(gpu=str(g), samples=[Sample(t=ts, util=util, power_w=w + rnd.uniform(-3, 3),
                                                                memory_used_bytes=40e9)]))
        eng.ingest(PollResult(readings=readings), wall=1e9 + t)
        t += DT + rnd.uniform(-0.01, 0.01)
    return eng


def test_instant_power_is_not_averaged_although_most_steps_are_spin_waits():
    eng = _steps(averaged=False)
    # the straggler steps twice a step, and the step into its spin-wait moves no power;
    # the other steps are enough to judge from, and power follows them
    assert sum(g.edges for g in eng.gpus.values()) >= value("power_edges_min_count")
    assert not eng.power_averaged()


def test_averaged_power_is_averaged():
    assert _steps(averaged=True).power_averaged()
