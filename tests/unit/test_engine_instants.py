"""A poll that hands over many recorded instants (a replay's chunk): engine._split
gives each side of an analysis tick its own instants' gauges and counters, and the
cause signals sum every instant's gauges once, at their recorded rate."""
from __future__ import annotations

import pytest

from gpulse.analysis import cause
from gpulse.drive import _Cuts, _split
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


def _poll() -> PollResult:
    """Five GPUs in one chunk: with instants, without, one whose rows end early, one
    whose rows start late, and one that could not be read."""
    full = _chunk().readings[0]
    late = [Sample(3.0 + i * 0.1, util=0.5) for i in range(5)]
    return PollResult([full,
                       Reading("1", [Sample(1.0 + i * 0.25, util=0.9) for i in range(16)], {"temperature_c": 50.0},
                               {"xid_errors_total": {("79",): 1.0}}),
                       Reading("2", list(full.samples[:6]), dict(full.instants[5][1]), dict(full.instants[5][2]),
                               instants=list(full.instants[:6])),
                       Reading("3", late, {}, {}, instants=[(s.t, {"temperature_c": 40.0}, {}) for s in late]),
                       Reading("4", [], {}, {}, False, "lost")],
                      devices=[DeviceInfo(gpu=str(i)) for i in range(5)], call_errors={"x": 1})


@pytest.mark.parametrize("step", [0.3, 0.5, 1.0, 7.0])
def test_cutting_a_poll_at_every_tick_gives_what_splitting_it_again_and_again_gives(step):
    """The offline driver cuts an ordered poll by bisection (drive._Cuts): every part
    is the one _split of what was left gives, to the field."""
    cuts, pending, boundary = _Cuts.of(_poll()), _poll(), 1.05
    while True:
        part, more = cuts.cut(boundary)
        want, pending = _split(pending, boundary)
        assert part == want
        assert more == (pending is not None)
        if not more:
            break
        boundary += step


def test_a_poll_out_of_order_is_not_cut_by_bisection():
    r = _chunk().readings[0]
    r.samples[3], r.samples[4] = r.samples[4], r.samples[3]
    assert _Cuts.of(PollResult([r])) is None
