"""Faults through the simulated source: a GPU lost and back, a poll that hangs for
30 s, an XID storm. The exporter is the real sampler + exposition + HTTP server in
this process (tests/liveserver.py); the faults come from tests/faultsource.py.
"""
from __future__ import annotations

import gc
import re
import time
import tracemalloc

import requests

from faultsource import FaultySource, Window
from testing.config import test_config
from gpulse.engine import Engine
from liveserver import Live
from testing.promutil import Prometheus

FAST = dict(analysis_interval="0.2s", analysis_window="2s", sim__gpus=4, sim__scenario="balanced")


def series(text: str, name: str) -> dict[str, float]:
    """{label string: value} for one metric name."""
    return {m.group(1) or "": float(m.group(2))
            for m in re.finditer(rf"^{name}(\{{[^}}]*\}})? (\S+)$", text, re.M)}


def value(text: str, name: str, **labels: str) -> float | None:
    for lab, v in series(text, name).items():
        if all(f'{k}="{x}"' in lab for k, x in labels.items()):
            return v
    return None


def scrape(live) -> str:
    r = requests.get(live.url + "/metrics", timeout=5)
    assert r.status_code == 200
    return r.text


def counters(text: str) -> dict[str, float]:
    return {name + lab: float(v) for name, lab, v in
            re.findall(r"^(gpulse_\w+_total)(\{[^}]*\})? (\S+)$", text, re.M)}


def assert_monotonic(prev: dict[str, float], cur: dict[str, float]) -> None:
    for k, v in cur.items():
        if k in prev:
            assert v >= prev[k], f"{k} went down: {prev[k]} -> {v}"


def test_gpu_lost_and_back(tmp_path):
    with Live(source=lambda cfg: FaultySource(cfg, lost={"2": Window(1.0, 3.0)}), **FAST) as live:
        seen_down = seen_back = False
        prev: dict[str, float] = {}
        busy_at_loss = None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not seen_back:
            text = scrape(live)
            cur = counters(text)
            assert_monotonic(prev, cur)
            prev = cur
            up2 = value(text, "gpulse_gpu_up", gpu="2")
            if up2 == 0:
                seen_down = True
                # the others keep reporting while GPU 2 is gone
                assert all(value(text, "gpulse_gpu_up", gpu=g) == 1 for g in "013")
                b = value(text, "gpulse_gpu_busy_seconds_total", gpu="2")
                busy_at_loss = b if busy_at_loss is None else busy_at_loss
                assert b == busy_at_loss          # frozen, not reset, while lost
            elif seen_down and up2 == 1:
                b = value(text, "gpulse_gpu_busy_seconds_total", gpu="2")
                if b > busy_at_loss:
                    seen_back = True              # integrating again
            time.sleep(0.1)
        assert seen_down and seen_back
        assert live.log.messages() == []


def test_hung_poll_goes_stale_fast_scrapes_and_alert_condition(tmp_path):
    """A poll stuck 30 s in the driver: scrapes keep answering, the sampler is flagged
    stale, Prometheus sees the GpulseMetricsStale condition true (pending), and the
    exporter recovers when the call returns."""
    with Live(source=lambda cfg: FaultySource(cfg, hang=Window(1.0, 31.0)), stale_after="1s", **FAST) as live:
        prom = Prometheus(tmp_path, [f"127.0.0.1:{live.port}"])
        try:
            assert live.source.hanging.wait(10)
            latencies = []
            alert = None
            deadline = time.monotonic() + 25
            while time.monotonic() < deadline and alert is None:
                t0 = time.perf_counter()
                text = scrape(live)              # a 5 s client timeout: a blocked scrape fails here
                latencies.append(time.perf_counter() - t0)
                if value(text, "gpulse_exporter_stale") == 1:
                    found = prom.alerts("GpulseMetricsStale")
                    alert = found[0] if found else None
                time.sleep(0.2)
            assert live.source.hanging.is_set(), "the hang ended before the alert was checked"
            assert alert is not None and alert["alertstate"] == "pending" and alert["severity"] == "warning"
            assert len(latencies) > 5
            assert value(scrape(live), "gpulse_exporter_seconds_since_last_sample") > 1
            # the call returns: fresh data again
            live.source.release.set()
            deadline = time.monotonic() + 10
            while value(scrape(live), "gpulse_exporter_stale") != 0:
                assert time.monotonic() < deadline, "still stale after the hang ended"
                time.sleep(0.1)
        finally:
            prom.stop()
        assert live.log.messages() == []


def test_xid_storm_counts_every_event_and_keeps_serving():
    rate = 5000.0
    with Live(source=lambda cfg: FaultySource(cfg, xid_rate=rate, xid_codes=("13", "31", "43", "48", "79")),
              **FAST) as live:
        prev: dict[str, float] = {}
        totals = []
        t_end = time.monotonic() + 3
        while time.monotonic() < t_end:
            text = scrape(live)
            cur = counters(text)
            assert_monotonic(prev, cur)
            prev = cur
            totals.append(sum(series(text, "gpulse_gpu_xid_errors_total").values()))
            time.sleep(0.2)
        assert totals[-1] > 5000 and totals[-1] <= live.source.xids_emitted
        assert set(re.findall(r'xid="(\d+)"', text)) == {"13", "31", "43", "48", "79"}
        assert live.log.messages() == []


def test_xid_storm_memory_is_bounded():
    """100 000 XIDs through the engine: its memory does not grow with the count."""
    cfg = test_config(source="sim", sim__gpus=8, history="10s", analysis_window="5s")
    src = FaultySource(cfg, xid_rate=50_000.0, xid_codes=tuple(str(c) for c in (13, 31, 43, 48, 63, 64, 74, 79, 92, 94)))
    eng = Engine(cfg, src.open(), "sim")
    t = 0.0

    def run(polls: int) -> None:
        nonlocal t
        for i in range(polls):
            eng.ingest(src.poll(t), wall=1e9 + t)
            t += 0.1
            if i % 10 == 9:
                eng.analyze(wall=1e9 + t)

    run(300)                      # windows and history fill up first
    # A full collection before each snapshot empties the interpreter's free lists:
    # freed tuples wait there (up to 2,000 of a size) still counted where they were
    # made, so without it the per-tick views of the last 200 polls read as ~32 KB of
    # growth or none, by chance. What is left is memory the engine holds.
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        emitted = src.xids_emitted
        run(200)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    assert src.xids_emitted - emitted >= 99_000
    grown = sum(s.size_diff for s in after.compare_to(before, "filename")
                if "gpulse" in s.traceback[0].filename and s.size_diff > 0)
    assert grown < 64 * 1024, f"engine grew {grown} bytes during 100k XIDs"
    snap = eng.analyze(wall=1e9 + t)
    g0 = next(v for v in snap.gpus if v.info.gpu == "0")
    assert sum(g0.counters["xid_errors_total"].values()) == src.xids_emitted
