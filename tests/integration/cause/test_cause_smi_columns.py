"""The straggler's cause from the columns real nvidia-smi logs carry, in each spelling.

One realistic 8xH100 job (tests/realtrace.py: real power levels, poll rhythm and row
skew; 100 ms rows, instant power): GPU 6 computes 98 % of every 1 s step, its peers
50 %, so each step waits for it. What slows it is told by the columns a user logged,
each spelling nvidia-smi has printed:

- clock-event reasons as states, `clocks_event_reasons.<reason>` (drivers >= 535) and
  `clocks_throttle_reasons.<reason>` (older): Active / Not Active;
- the `.active` bit mask (0x0000000000000040: hw_thermal_slowdown);
- `clocks_event_reasons_counters.<reason> [us]`, microseconds held;
- the PCIe link: `pcie.link.width.current` against `.max` (x8 of x16), and
  `pcie.link.gen.current` against `.max` (gen 3 of gen 5; an idle GPU lowers its
  generation, so every GPU logs gen 1 while idle).

The report names the cause and its evidence matches the log's rows over the span;
the live engine over the same log agrees; a GPU with a degraded link is never told
to rebalance.
"""
from __future__ import annotations

import calendar
import re

import pytest

from realtrace import add_columns, hot_straggler, real_levels, write_smi_log
from reportutil import report_and_live

from gpulse.analysis.cause import REMEDIES
from gpulse.report.findings import analyse
from gpulse.report.inputs import from_log

GPUS, SLOW = 8, 6
STARTUP, WORK_END, END = 20.0, 330.0, 345.0


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    real_levels()   # skips the module without ../shared/data
    tmp = tmp_path_factory.mktemp("cause-columns")
    state = hot_straggler(SLOW, 0.5, 0.98, 1.0, STARTUP, WORK_END)
    return write_smi_log(tmp / "base.csv", GPUS, END, state, instant=True), tmp


def _computing(w):
    return w > 300          # instant power: a computing H100 draws ~550 W, a spin-wait ~150 W


def _state(on):
    return "Active" if on else "Not Active"


# variant -> (extra header, row(gpu, t, util, watts) -> (watts, cells), cause, evidence pattern)
def _capped(column):
    def row(g, t, util, w):
        held = g == SLOW and _computing(w)
        if held:
            w = 344.0 + (t * 7.3) % 4 - 2
        mhz = (1600 if held else 1980) if util > 10 else 345
        return w, f", {350 if g == SLOW else 700:.2f} W, {mhz} MHz, {_state(held)}"
    return f", power.limit [W], clocks.current.sm [MHz], {column}", row


def _thermal_mask(g, t, util, w):
    hot = g == SLOW and _computing(w)
    mask = 0x40 if hot else (0x1 if util <= 10 else 0x0)
    return w, f", {87 if hot else 62}, {(1410 if hot else 1980) if util > 10 else 345} MHz, 0x{mask:016x}"


def _counters():
    held = {"us": 0.0, "t": None}

    def row(g, t, util, w):
        if g == SLOW:
            if held["t"] is not None and _computing(w):
                held["us"] += (t - held["t"]) * 1e6
            held["t"] = t
        us = int(held["us"]) if g == SLOW else 0
        hot = g == SLOW and _computing(w)
        return w, f", {(1600 if hot else 1980) if util > 10 else 345} MHz, 0 us, {us} us"
    return row


def _link(g, t, util, w):
    width = 8 if g == SLOW else 16
    gen = (3 if g == SLOW else 5) if util > 10 else 1
    return w, (f", {1980 if util > 10 else 345} MHz, {width}, 16, {gen}, 5, Not Active, Not Active, "
               f"0x{0x1 if util <= 10 else 0:016x}")


LINK_HEAD = (", clocks.current.sm [MHz], pcie.link.width.current, pcie.link.width.max, pcie.link.gen.current, "
             "pcie.link.gen.max, clocks_event_reasons.sw_power_cap, clocks_event_reasons.hw_slowdown, "
             "clocks_event_reasons.active")

VARIANTS = {
    "event-states": (*_capped("clocks_event_reasons.sw_power_cap"), "throttling", r"sw_power_cap throttle (\d+)% of span"),
    "throttle-states": (*_capped("clocks_throttle_reasons.sw_power_cap"), "throttling",
                        r"sw_power_cap throttle (\d+)% of span"),
    "active-mask": (", temperature.gpu, clocks.current.sm [MHz], clocks_throttle_reasons.active", _thermal_mask,
                    "throttling", r"hw_thermal throttle (\d+)% of span"),
    "counters": (", clocks.current.sm [MHz], clocks_event_reasons_counters.sw_power_cap [us], "
                 "clocks_event_reasons_counters.sw_thermal_slowdown [us]", None, "throttling",
                 r"sw_thermal throttle (\d+)% of span"),
    "link": (LINK_HEAD, _link, "degraded_hardware", r"PCIe link x8 of x16 \(peers x16\)"),
}


def _log(base, name):
    path, tmp = base
    head, row, *_ = VARIANTS[name]
    return add_columns(path, tmp / f"{name}.csv", GPUS, head, row or _counters())


def _held_share(path, spans, field, active):
    """Share of GPU SLOW's rows within the spans whose cell `field` says held."""
    lines = path.read_text().splitlines()
    col = [c.strip() for c in lines[0].split(",")].index(field)
    n = held = 0
    for k, line in enumerate(lines[1:]):
        if k % GPUS != SLOW:
            continue
        c = [x.strip() for x in line.split(",")]
        day, hms = c[0].split(" ")
        y, mo, d = map(int, day.split("/"))
        hh, mm, ss = hms.split(":")
        t = calendar.timegm((y, mo, d, int(hh), int(mm), 0)) + float(ss)
        if any(a < t <= b for a, b in spans):
            n += 1
            held += active(c[col])
    return held / n


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_cause_from_each_spelling(base, name):
    path = _log(base, name)
    *_, cause, pattern = VARIANTS[name]
    live: dict[str, set[str]] = {}

    def look(snap):
        for v in snap.gpus:
            if v.cause is not None:
                live.setdefault(v.info.gpu, set()).add(v.cause.cause)

    doc = report_and_live(path, look)
    [f] = [f for f in doc["findings"] if f["kind"] == "straggler"]
    assert [s["gpu"] for s in doc["stragglers"]] == [str(SLOW)]
    assert f["cause"] == cause and f["missing"] == [], f
    assert f["remedy"] == REMEDIES[cause] and not f["remedy"].startswith("rebalance")
    m = next((re.fullmatch(pattern, e) for e in f["evidence"] if re.fullmatch(pattern, e)), None)
    assert m, f["evidence"]
    spans = [(s["start"], s["end"]) for s in f["spans"]]
    if name.endswith("states"):
        share = _held_share(path, spans, VARIANTS[name][0].split(", ")[-1], lambda x: x == "Active")
    elif name == "active-mask":
        share = _held_share(path, spans, "clocks_throttle_reasons.active", lambda x: int(x, 16) & 0x40 > 0)
    elif name == "counters":
        share = _held_share(path, spans, "clocks.current.sm [MHz]", lambda x: x == "1600 MHz")
    else:
        share = None
    if share is not None:
        assert float(m.group(1)) == pytest.approx(100 * share, abs=3), (f["evidence"], share)
    assert live == {str(SLOW): {cause}}


def test_link_generation_lowered_by_an_idle_gpu_is_no_fault(base):
    """Every GPU logs gen 1 while idle: the idle tail and start-up are no degraded link,
    and GPU 6's link gen 3 of 5 while computing is told with its width."""
    path = _log(base, "link")
    doc = analyse(from_log(str(path))).as_json()
    [f] = [f for f in doc["findings"] if f["kind"] == "straggler"]
    assert "PCIe link gen 3 of gen 5 (peers gen 5)" in f["evidence"], f["evidence"]
