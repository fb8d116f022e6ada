"""Clock jumps never corrupt counters.

Two clocks can move under the exporter: the source's timeline (NVML and
dcgm-exporter stamp samples with the wall clock, so an NTP step moves Sample.t
back or forward) and the wall time the sampler stamps snapshots with. Neither may
make a counter decrease, and a jump must not be integrated as time that passed.
"""
from __future__ import annotations

import dataclasses
import re
import time
import types
from unittest import mock

import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from faultsource import FaultySource
from gpulse.collector import Exposition
from testing.config import test_config
from gpulse.engine import Engine, Snapshot
from liveserver import Live

STEP = 0.1


def all_counters(snap) -> dict[str, float]:
    out = {}
    for v in snap.gpus:
        t = v.totals
        for name in ("busy", "active", "spin_wait", "idle", "sampled"):
            out[f"{v.info.gpu}/{name}"] = getattr(t, name)
        out[f"{v.info.gpu}/energy"] = v.counters.get("energy_joules_total", 0.0)
    for g in snap.groups:
        out[f"group/{g.workload}/stall_seconds"] = g.stall_seconds
        out[f"group/{g.workload}/stalls"] = g.stalls_total
        out[f"group/{g.workload}/holding"] = g.holding_seconds
    return out


@settings(max_examples=40, deadline=None)
@given(jumps=st.lists(st.tuples(st.integers(5, 300),                         # after this many polls
                                st.sampled_from([-86400.0, -3600.0, -30.0, -2.5, -0.25, 0.05,
                                                 0.3, 2.0, 2.9, 30.0, 3600.0, 86400.0])),
                      min_size=1, max_size=6),
       scenario=st.sampled_from(["sync-stall", "checkpoint", "balanced"]))
def test_source_clock_jumps_keep_counters_monotonic(jumps, scenario):
    cfg = test_config(source="sim", sim__gpus=4, sim__scenario=scenario, min_stall="0.2s")
    schedule, at = [], 0
    for gap, delta in jumps:
        at += gap
        schedule.append((at * STEP, delta))

    def offset(rel: float) -> float:
        return sum(d for t, d in schedule if rel >= t - 1e-9)

    src = FaultySource(cfg, clock=offset)
    eng = Engine(cfg, src.open(), "sim")
    prev: dict[str, float] = {}
    n_polls = at + 60
    for i in range(n_polls):
        eng.ingest(src.poll(i * STEP), wall=1e9 + i * STEP)
        if i % 10 == 9:
            cur = all_counters(eng.analyze(wall=1e9 + i * STEP))
            for k, v in cur.items():
                assert v >= prev.get(k, 0.0), f"{k} decreased {prev.get(k)} -> {v} (jumps {schedule})"
                assert v == v and v != float("inf"), k
            prev = cur
    # time that was never lived is not counted: per GPU, the covered time is at most
    # the real time plus one short forward jump per step (a gap longer than the
    # engine's max_gap is not integrated at all)
    real = n_polls * STEP
    allowance = sum(d for _, d in schedule if 0 < d <= eng.max_gap)
    for g in ("0", "1", "2", "3"):
        assert prev[f"{g}/sampled"] <= real + allowance + 1e-6


def _scrape_counters(url: str) -> dict[str, float]:
    text = requests.get(url + "/metrics", timeout=5).text
    return {n + lab: float(v) for n, lab, v in re.findall(r"^(gpulse_\w+_total)(\{[^}]*\})? (\S+)$", text, re.M)}


def test_wall_clock_steps_under_the_live_sampler():
    """The wall clock of the exporter process steps back an hour, then forward two:
    counters keep rising, the exporter is not flagged stale (staleness is judged on
    the monotonic clock), and timestamps follow the wall clock."""
    offset = [0.0]
    fake_time = types.SimpleNamespace(monotonic=time.monotonic, time=lambda: time.time() + offset[0])
    with mock.patch("gpulse.clock.time", fake_time):
        with Live(analysis_interval="0.2s", analysis_window="2s", sim__gpus=4) as live:
            prev = _scrape_counters(live.url)
            for step in (0.0, -3600.0, +7200.0, -1800.0):
                offset[0] += step
                t_end = time.monotonic() + 1.0
                while time.monotonic() < t_end:
                    cur = _scrape_counters(live.url)
                    for k, v in cur.items():
                        assert v >= prev.get(k, 0.0), f"{k} decreased after a {step:+.0f}s step"
                    prev = cur
                    time.sleep(0.1)
                text = requests.get(live.url + "/metrics", timeout=5).text
                assert "gpulse_exporter_stale{node=" in text and re.search(r"^gpulse_exporter_stale\{[^}]*\} 0", text, re.M)
                snap_ts = float(re.search(r"^gpulse_exporter_snapshot_timestamp_seconds\{[^}]*\} (\S+)", text, re.M).group(1))
                assert abs(snap_ts - (time.time() + offset[0])) < 5
            assert prev["gpulse_gpu_busy_seconds_total" + '{gpu="0",node="%s"}' % live.cfg.node_name] > 1
            assert live.log.messages() == []


def test_exposition_never_serves_an_older_snapshot():
    """The body cache must follow the snapshot object, not its id(): once an old
    snapshot is freed, CPython hands its address to the next one."""
    cfg = test_config(source="sim", sim__gpus=2)
    src = FaultySource(cfg)
    eng = Engine(cfg, src.open(), "sim")
    for i in range(20):
        eng.ingest(src.poll(i * STEP), wall=1000.0)
    base = eng.analyze(wall=1000.0)
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    current = [None]
    exp = Exposition("n", lambda: current[0], lambda: {"stale": False, "seconds_since_success": 0.0, "alive": True})
    reused = 0
    seen_ids = set()
    for i in range(200):
        kwargs = dict(fields, wall=1000.0 + i)
        current[0] = None                        # the old snapshot is freed ...
        current[0] = Snapshot(**kwargs)          # ... and its memory is the first candidate for the new one
        reused += id(current[0]) in seen_ids
        seen_ids.add(id(current[0]))
        om = bool(i % 2)
        body = exp.render(om).decode()
        ts = float(re.search(r"^gpulse_exporter_snapshot_timestamp_seconds\{[^}]*\} (\S+)", body, re.M).group(1))
        assert ts == 1000.0 + i, f"render {i} served the snapshot of {ts - 1000.0:.0f}"
    assert reused > 100          # the situation the cache must survive did occur
