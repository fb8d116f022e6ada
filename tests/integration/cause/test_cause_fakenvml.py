"""The straggler's cause through the live exporter on the fake NVML driver.

One `gpulse serve --source nvml` per scenario file of tests/fakenvml/scenarios
(8 H100s, GPU 3 the straggler, each for another reason), all started at once, the
unmodified pynvml loading the fake libnvidia-ml through LD_LIBRARY_PATH. Each runs
SPAN seconds of virtual time (testing/virtualclock.py), the fake following the
exporter's clock, so the minutes a verdict takes cost seconds of CPU. Each must
have confirmed GPU 3 as the straggler by then (after straggler_min_span_seconds of
deviation) and say why in `gpulse_gpu_straggler_cause{gpu="3",cause=...}`, and
nothing for the other GPUs. The driver-level signals the scenario claims are
checked on the same scrape, so a scenario file that stopped saying what it says
fails here too.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import fakenvml
from conftest import Gpulse, require_binary
from scrape import per_gpu, series
from testing import virtualclock

from gpulse.analysis.thresholds import value

SCENARIOS = Path(fakenvml.__file__).resolve().parent / "scenarios"
PEERS = [str(i) for i in range(8) if i != 3]
# virtual seconds each exporter runs: the analysis window fills, then GPU 3 deviates
# straggler_min_span_seconds before it is confirmed and judged, and a margin after
SPAN = 2 * value("straggler_min_span_seconds") + 60


def _by(text: str, name: str, label: str) -> dict[str, dict[str, float]]:
    """{gpu: {label value: sample}} of one family."""
    out: dict[str, dict[str, float]] = {}
    for k, v in series(text, name).items():
        d = dict(k)
        out.setdefault(d["gpu"], {})[d[label]] = v
    return out


def _throttle(text: str) -> dict[str, dict[str, float]]:
    return _by(text, "gpulse_gpu_throttle_seconds_total", "reason")


def _clocks_as_peers(text: str) -> bool:
    clock = per_gpu(text, "gpulse_gpu_sm_clock_hertz")
    return len(set(clock.values())) == 1 and not any(v for r in _throttle(text).values() for v in r.values())


def _throttled(text: str) -> bool:
    thr, clock = _throttle(text), per_gpu(text, "gpulse_gpu_sm_clock_hertz")
    temp, power = per_gpu(text, "gpulse_gpu_temperature_celsius"), per_gpu(text, "gpulse_gpu_power_limit_watts")
    return (thr["3"]["hw_thermal"] > 60 and thr["3"]["sw_power_cap"] > 60 and thr["3"]["hw_slowdown"] == 0
            and clock["3"] < min(clock[p] for p in PEERS) and temp["3"] >= 85 and power["3"] == 700
            and not any(thr[p]["hw_thermal"] for p in PEERS))


def _hw_slowdown(text: str) -> bool:
    thr, clock = _throttle(text), per_gpu(text, "gpulse_gpu_sm_clock_hertz")
    return (thr["3"]["hw_slowdown"] > 60 and not any(thr["3"][r] for r in ("hw_thermal", "sw_thermal", "sw_power_cap"))
            and clock["3"] < min(clock[p] for p in PEERS))


def _link_errors(text: str) -> bool:
    replays = per_gpu(text, "gpulse_gpu_pcie_replays_total")
    xid = _by(text, "gpulse_gpu_xid_errors_total", "xid")
    ecc = _by(text, "gpulse_gpu_ecc_errors_total", "type")
    return (replays["3"] > 9 + 40 * 60 and all(replays[p] == 9 for p in PEERS) and set(xid.get("3", {})) == {"48", "63"}
            and ecc["3"]["uncorrected"] >= 5 and per_gpu(text, "gpulse_gpu_remapping_pending")["3"] == 1
            and _clocks_as_peers(text))


def _degraded_link(text: str) -> bool:
    width, top = per_gpu(text, "gpulse_gpu_pcie_link_width"), per_gpu(text, "gpulse_gpu_pcie_link_max_width")
    gen = per_gpu(text, "gpulse_gpu_pcie_link_generation")
    nvl = _by(text, "gpulse_gpu_nvlink_errors_total", "type")
    return (width["3"] == 8 and all(width[p] == 16 for p in PEERS) and set(top.values()) == {16}
            and set(gen.values()) == {5} and nvl["3"]["crc_flit"] > 5 * 60 and nvl["3"]["replay"] > 60
            and not any(v for p in PEERS for v in nvl[p].values())
            and set(_by(text, "gpulse_gpu_nvlink_errors_total", "type")["0"]) == {"crc_flit", "crc_data", "replay",
                                                                               "recovery"}
            and not series(text, "gpulse_gpu_xid_errors_total") and _clocks_as_peers(text))


def _more_work(text: str) -> bool:
    util = per_gpu(text, "gpulse_gpu_utilization_ratio")
    return _clocks_as_peers(text) and max(util.values()) - min(util.values()) < 0.05


def _off_gpu(text: str) -> bool:
    util = per_gpu(text, "gpulse_gpu_utilization_ratio")
    return _clocks_as_peers(text) and util["3"] < 0.5 and min(util[p] for p in PEERS) > 0.95


CASES = {
    "straggler-throttled": ("throttling", _throttled),
    "straggler-hw-slowdown": ("degraded_hardware", _hw_slowdown),
    "straggler-link-errors": ("degraded_hardware", _link_errors),
    "straggler-degraded-link": ("degraded_hardware", _degraded_link),
    "straggler-more-work": ("more_work", _more_work),
    "straggler-off-gpu": ("off_gpu", _off_gpu),
}


@pytest.fixture(scope="module")
def exporters(tmp_path_factory):
    """Every scenario's exporter, started together, each on its own virtual clock;
    {scenario: its /metrics once the clock is spent}."""
    require_binary("gcc")
    fakenvml.build()
    clocks = tmp_path_factory.mktemp("clocks")
    started: dict[str, Gpulse] = {}
    try:
        for name in CASES:
            clock = clocks / name
            env = {**fakenvml.env(SCENARIOS / f"{name}.txt", clock=clock), **virtualclock.env(SPAN, clock)}
            started[name] = Gpulse("--source", "nvml", env=env, timeout=60)
        texts = {}
        for name, g in started.items():
            # the bound is on CPU: six exporters share the machine
            virtualclock.wait_spent(g.url, 300)
            texts[name] = g.metrics()
        yield texts
    finally:
        for g in started.values():
            g.stop()


def test_every_scenario_file_is_documented():
    readme = (SCENARIOS.parent / "README.md").read_text(encoding="utf-8")
    files = {p.stem for p in SCENARIOS.glob("*.txt")}
    assert files == set(CASES)
    assert all(f"scenarios/{name}.txt" in readme for name in files)


@pytest.mark.parametrize("name", list(CASES))
def test_live_cause_of_the_straggler(exporters, name):
    cause, signals = CASES[name]
    text = exporters[name]
    confirmed = per_gpu(text, "gpulse_gpu_straggler").get("3") == 1
    assert confirmed and "3" in _by(text, "gpulse_gpu_straggler_cause", "cause"), \
        f"{name}: GPU 3 not confirmed with a cause after {SPAN:g} s:\n{text[-3000:]}"
    assert signals(text), f"{name}: the driver signals are not what the scenario says"
    flagged = {gpu for gpu, v in per_gpu(text, "gpulse_gpu_straggler").items() if v == 1}
    assert flagged == {"3"}, (name, flagged)
    causes = _by(text, "gpulse_gpu_straggler_cause", "cause")
    assert causes == {"3": {cause: 1.0}}, (name, causes)
