"""A poll that hands over many recorded instants (a replay's chunk): engine._split
gives each side of an analysis tick its own instants' gauges and counters, and the
cause signals sum every instant's gauges once, at their recorded rate."""
from __future__ import annotations

from gpulse.analysis import cause
from gpulse.drive import _split
from gpulse.engine import Engine
from gpulse.model import DeviceInfo, PollResult, Reading, Sample
from testing.config import test_config


def _chunk(n: int = 40, dt: float = 0.1) -> PollResult:
    """One GPU, n rows 100 ms apart: the clock steps from 1980 to 345 MHz halfway
    (the job ended), a throttle counter climbs 0.1 s a row."""
    samples, instants = [], []
    for i in range(n):
        t = 1.0 + i * dt
        mhz = 1980.0 if i < n // 2 else 345.0
        samples.append(Sample(t, util=1.0 if i < n // 2 else 0.0, power_w=500.0, memory_used_bytes=40e9))
        instants.append((t, {"sm_clock_hertz": mhz * 1e6}, {"throttle_seconds_total": {("sw_power_cap",): i * dt}}))
    last = instants[-1]
    return PollResult([Reading("0", samples, dict(last[1]), dict(last[2]), instants=instants)])


def test_split_charges_each_side_its_own_instants():
    early, later = _split(_chunk(), 2.0)
    (e,), (lt,) = early.readings, later.readings
    assert [x[0] for x in e.instants] == [s.t for s in e.samples] and e.samples[-1].t <= 2.0
    assert e.gauges == {"sm_clock_hertz": 1980e6}            # not the chunk's last (345 MHz)
    assert e.counters["throttle_seconds_total"][("sw_power_cap",)] == e.instants[-1][2][
        "throttle_seconds_total"][("sw_power_cap",)]
    assert lt.instants[0][0] > 2.0 and lt.gauges == {"sm_clock_hertz": 345e6}


def test_cause_signals_sum_every_instant_once():
    eng = Engine(test_config(source="sim"), [DeviceInfo(gpu="0")], "replay")
    early, later = _split(_chunk(), 2.0)
    eng.ingest(early, wall=0.0)
    v = eng.signals("0")
    i = cause.SLOTS.index("clock")
    assert v[i - 1] == len(early.readings[0].instants)
    assert v[i] / v[i - 1] == 1980e6                          # the early side's own clock
    eng.ingest(later, wall=0.0)
    v = eng.signals("0")
    assert v[i - 1] == 40 and v[i] / v[i - 1] == (20 * 1980e6 + 20 * 345e6) / 40
