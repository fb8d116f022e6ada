"""Gauges at their recorded rate: a report's span figures are the log's own.

A realistic 8xH100 nvidia-smi log at 100 ms (tests/realtrace.py: real power levels,
poll rhythm and row skew) of a data-parallel job in which GPU 6 is held at its
350 W power cap: it computes at 1600 MHz while its peers run at 1980 MHz, so every
step waits for it. The job ends and the GPUs idle at 345 MHz for half a minute
before the log ends. The straggler's clock and power over its span, and its
peers', must be what the log's rows over that span say: no value from another
part of the log (the next 26 s a replay chunk used to cover, the idle tail) may be
charged to it.
"""
from __future__ import annotations

import calendar
import re
import statistics

import pytest

from realtrace import add_columns, hot_straggler, real_levels, write_smi_log

from gpulse.drive import run_offline
from gpulse.report.findings import analyse
from gpulse.report.inputs import from_log
from gpulse.sources.replay import ReplaySource
from testing.config import test_config

GPUS, SLOW = 8, 6
STARTUP, WORK_END, END = 20.0, 440.0, 470.0


@pytest.fixture(scope="module")
def capped_log(tmp_path_factory):
    real_levels()   # skips the module without ../shared/data
    tmp = tmp_path_factory.mktemp("gauge-rate")
    state = hot_straggler(SLOW, 0.5, 0.98, 1.0, STARTUP, WORK_END)
    base = write_smi_log(tmp / "base.csv", GPUS, END, state, instant=True)

    def row(g, t, util, w):
        capped = g == SLOW
        if capped and w > 300:
            w = 344.0 + (t * 7.3) % 4 - 2            # held at its cap while computing
        busy = util > 10
        mhz = (1600 if capped and w > 300 else 1980) if busy else 345
        return w, f", {60 if not capped else 63}, {350 if capped else 700:.2f} W, {mhz} MHz"
    return add_columns(base, tmp / "capped.csv", GPUS,
                       ", temperature.gpu, power.limit [W], clocks.current.sm [MHz]", row)


def _rows(path):
    """(gpu, t, watts, MHz) of every row of the log."""
    out = []
    for k, line in enumerate(path.read_text().splitlines()[1:]):
        c = [x.strip() for x in line.split(",")]
        day, hms = c[0].split(" ")
        y, mo, d = map(int, day.split("/"))
        hh, mm, ss = hms.split(":")
        t = calendar.timegm((y, mo, d, int(hh), int(mm), 0)) + float(ss)
        out.append((str(k % GPUS), t, float(c[1].split()[0]), float(c[-1].split()[0])))
    return out


def _log_means(rows, spans):
    """Per GPU, its rows' mean power and clock within the spans."""
    acc: dict[str, list[tuple[float, float]]] = {}
    for g, t, w, mhz in rows:
        if any(a < t <= b for a, b in spans):
            acc.setdefault(g, []).append((w, mhz))
    return {g: (statistics.fmean(w for w, _ in v), statistics.fmean(m for _, m in v)) for g, v in acc.items()}


def test_span_means_are_the_logs_own(capped_log):
    doc = analyse(from_log(str(capped_log))).as_json()
    [f] = [f for f in doc["findings"] if f["kind"] == "straggler"]
    assert [s["gpu"] for s in doc["stragglers"]] == [str(SLOW)]
    assert f["cause"] == "throttling", f
    spans = [tuple(s) if isinstance(s, (list, tuple)) else (s["start"], s["end"]) for s in f["spans"]]
    means = _log_means(_rows(capped_log), spans)
    clock = next(e for e in f["evidence"] if e.startswith("sm clock"))
    mine, peers = map(float, re.match(r"sm clock (\d+) MHz vs peers (\d+) MHz", clock).groups())
    assert mine == pytest.approx(means[str(SLOW)][1], abs=3), (clock, means)
    assert peers == pytest.approx(statistics.median(m for g, (_, m) in means.items() if g != str(SLOW)), abs=3), \
        (clock, means)
    power = next(e for e in f["evidence"] if e.startswith("power"))
    watts = float(re.match(r"power (\d+) W at its 350 W limit", power).group(1))
    assert watts == pytest.approx(means[str(SLOW)][0], abs=2), (power, means)


def test_live_engine_over_the_same_log_agrees(capped_log):
    """The replay hands the engine the log in chunks of ReplaySource.CHUNK rows: its
    cause must be the report's, every tick the GPU is a confirmed straggler."""
    c = test_config(source="replay", replay__file=str(capped_log), replay__speed=0)
    live: dict[str, set[str]] = {}
    for _, snap in run_offline(ReplaySource(c), c):
        for v in snap.gpus:
            if v.cause is not None:
                live.setdefault(v.info.gpu, set()).add(v.cause.cause)
    assert live == {str(SLOW): {"throttling"}}
