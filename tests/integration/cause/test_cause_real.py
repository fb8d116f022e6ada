"""The cause of a straggler on traces with real levels and real timing.

- The real 8xH100 logs (../shared/data/traces/h100-8gpu): rank 0 writes the
  checkpoints while GPUs 1-7 spin-wait at ~150 W. Their logs hold utilisation,
  1 s-averaged power and memory only, and the cause needs no more: off_gpu.
- Alibaba PAI job 1 (tests/realtrace.py: per-worker batch times, row skew, instant
  power): worker 6 becomes a hot straggler mid-run. Its log has no clocks and no
  throttle reasons, so the cause is unknown and says so (checked with the
  straggler's timing, on one report of that log, by
  tests/integration/detection/test_detection_real.py); the same log with the
  clock and clock-event columns nvidia-smi writes reads more_work when worker 6's
  clocks match its peers', throttling when hw_thermal holds them down.
The report (findings.json) and the live engine (the exporter's snapshots over the
same log, those of the report's own run: reportutil.report_and_live) must agree.
"""
from __future__ import annotations

import functools

import pytest

from conftest import CPU_BOUND, require_data
from realtrace import alibaba_job, real_levels, write_smi_log
from reportutil import report_and_live

from gpulse.analysis.cause import REMEDIES

pytestmark = CPU_BOUND

ROW = 12.0
STARTUP = 20.0


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    real_levels()   # skips the module without ../shared/data
    return tmp_path_factory.mktemp("cause-real")


def views(path):
    """(findings.json, the report's straggler findings, {gpu: set of live causes while
    confirmed}), the live causes from the snapshots of the report's own engine run."""
    live: dict[str, set[str]] = {}

    def look(snap):
        for v in snap.gpus:
            assert (v.cause is None) == (v.straggler is None)
            if v.cause is not None:
                live.setdefault(v.info.gpu, set()).add(v.cause.cause)

    doc = report_and_live(path, look)
    found = [f for f in doc["findings"] if f["kind"] == "straggler"]
    return doc, found, live


# ckpt1000: rank 0 off the GPU ~16 s every ~250 s, a straggler by recurrence
@pytest.mark.parametrize("name", ["ckpt1", "ckpt50", "ckpt1000"])
def test_checkpointing_rank_is_off_the_gpu(name):
    doc, found, live = views(require_data(f"traces/h100-8gpu/{name}.csv"))
    [f] = found
    assert [s["gpu"] for s in doc["stragglers"]] == ["0"]
    assert f["cause"] == "off_gpu" and f["missing"] == []
    assert any(e.startswith("peers spin-wait") for e in f["evidence"]), f["evidence"]
    assert f["remedy"] == REMEDIES["off_gpu"] and "asynchronous checkpointing" in f["remedy"]
    assert live == {"0": {"off_gpu"}}


@functools.lru_cache(maxsize=None)
def alibaba1(tmp):
    require_data("traces/alibaba-minibatch")
    state, workers, work_end = alibaba_job(1, ROW, step_scale=0.001, startup=STARTUP)
    return write_smi_log(tmp / "alibaba-job1.csv", workers, work_end + 10.0, state, instant=True), workers


def with_clock_columns(path, out, workers: int, throttled: str | None):
    """The log with nvidia-smi's clock, temperature, power-limit and clock-event
    counter columns. A GPU reads 1980 MHz while busy, 345 MHz idle; the `throttled`
    one is held at 1410 MHz by hw_thermal 90 % of the time, running hot."""
    lines = path.read_text().splitlines()
    head = (lines[0] + ", temperature.gpu, power.limit [W], clocks.current.sm [MHz], "
            "clocks_event_reasons_counters.sw_power_cap [us], clocks_event_reasons_counters.hw_thermal_slowdown [us]")
    rows, t0 = [head], None
    for k, line in enumerate(lines[1:]):
        gpu = str(k % workers)        # the rows of one poll, in GPU order (no index column)
        busy = float(line.split(",")[2].strip().rstrip("%")) > 10
        t = _seconds(line)
        t0 = t if t0 is None else t0
        hot = gpu == throttled
        mhz = (1410 if hot else 1980) if busy else 345
        thermal_us = int(0.9 * (t - t0) * 1e6) if hot else 0
        rows.append(f"{line}, {87 if hot else 60}, 700.00 W, {mhz} MHz, 0 us, {thermal_us} us")
    out.write_text("\n".join(rows) + "\n")
    return out


def _seconds(line: str) -> float:
    hms = line.split(",")[0].split()[1]
    h, m, s = hms.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


# The report reads the whole 1.3 h log (~5 s of CPU on an idle core), the module's
# longest (CPU_BOUND).
@pytest.mark.parametrize("throttled, cause", [(None, "more_work"), ("6", "throttling")])
def test_alibaba_straggler_with_clock_columns(tmp, throttled, cause):
    path, workers = alibaba1(tmp)
    log = with_clock_columns(path, tmp / f"alibaba-job1-clocks-{throttled}.csv", workers, throttled)
    doc, found, live = views(log)
    assert [s["gpu"] for s in doc["stragglers"]] == ["6", "0"]
    [f] = [f for f in found if "GPU 6 " in f["text"]]
    # worker 0 runs at its peers' clocks: it just has more to compute
    [f0] = [f for f in found if "GPU 0 " in f["text"]]
    assert f0["cause"] == "more_work"
    assert f["cause"] == cause and f["missing"] == [], f
    assert f["remedy"] == REMEDIES[cause]
    if cause == "throttling":
        assert any(e.startswith("hw_thermal throttle") for e in f["evidence"]), f["evidence"]
        assert not f["remedy"].startswith("rebalance")
    else:
        assert "sm clock 1980 MHz vs peers 1980 MHz" in f["evidence"], f["evidence"]
    assert live == {"6": {cause}, "0": {"more_work"}}
