"""Soak: one `gpulse serve` at 64 simulated GPUs for a long run; does anything grow?

    .venv/bin/python bench/soak.py [--gpus 64] [--duration 30m] [--warmup 16m] [--scrape 5s]

The exporter runs with the default sample rate (100 ms) and keeps --history (900 s by
default) of per-GPU heatmap rows, which fill up during the first 15 minutes by design.
So the process is warmed up first and the figures compare the end of the measured
window with its start, which is the baseline of this same run:

- RSS growth (target ≤ 2 MB over 30 minutes), threads and open file descriptors (no growth);
- every counter (`*_total`, histogram `_count`/`_sum`/`_bucket`) never decreases
  between consecutive scrapes, checked series by series over the whole run;
- scrape latency and the exporter's CPU share, for context.

Scrapes alternate between a kept-alive session and a new connection each time, and
between the text and OpenMetrics formats, so the connection and render paths are
exercised too, not just the sampler.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the repository root: bench.lib
from bench.lib.proc import cpu_seconds, fds, percentile, rss_bytes, start_gpulse, threads  # noqa: E402

OM = "application/openmetrics-text; version=1.0.0"
COUNTER_SAMPLE = re.compile(r"^(gpulse_\w+?(?:_total|_count|_sum|_bucket))(\{[^}]*\})? (\S+)", re.M)


def duration(s: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(s|m|h)?", s)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a duration like 30m, got {s!r}")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


def counters(text: str) -> dict[str, float]:
    return {name + (labels or ""): float(v) for name, labels, v in COUNTER_SAMPLE.findall(text)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--duration", type=duration, default=duration("30m"), help="measured window")
    ap.add_argument("--warmup", type=duration, default=duration("16m"), help="before the window (history fills)")
    ap.add_argument("--scrape", type=duration, default=duration("5s"), help="scrape interval")
    ap.add_argument("--report", type=duration, default=duration("5m"), help="progress line interval")
    a = ap.parse_args()

    p, url = start_gpulse("--source", "sim", "--sim.gpus", str(a.gpus), "--sim.scenario", "sync-stall")
    session = requests.Session()
    t_start = time.monotonic()
    t_window = t_start + a.warmup
    t_end = t_window + a.duration
    prev: dict[str, float] = {}
    checked = violations = scrapes = 0
    lat: list[float] = []
    base = None            # (t, rss, threads, fds, cpu) at the start of the window
    peak_rss = 0
    thread_range = [10**9, 0]
    fd_range = [10**9, 0]
    next_report = t_start
    print(f"soak: {a.gpus} GPUs, warm-up {a.warmup:.0f}s, window {a.duration:.0f}s, scrape every {a.scrape:g}s",
          flush=True)
    print(f"{'min':>6} {'RSS MB':>8} {'threads':>7} {'fds':>4} {'scrapes':>7} {'violations':>10}", flush=True)
    try:
        while True:
            now = time.monotonic()
            if now >= t_end:
                break
            i = scrapes
            hdrs = {"Accept": OM} if i % 2 else {}
            t0 = time.perf_counter()
            r = (session.get if i % 4 < 2 else requests.get)(url + "/metrics", headers=hdrs, timeout=10)
            lat.append((time.perf_counter() - t0) * 1000)
            if r.status_code != 200:
                print(f"scrape {i}: HTTP {r.status_code}", flush=True)
                violations += 1
            cur = counters(r.text)
            for k, v in cur.items():
                old = prev.get(k)
                if old is not None:
                    checked += 1
                    if v < old:
                        violations += 1
                        print(f"counter decreased: {k} {old} -> {v}", flush=True)
            prev.update(cur)
            scrapes += 1
            rss, th, fd = rss_bytes(p.pid), threads(p.pid), fds(p.pid)
            if now >= t_window:
                if base is None:
                    base = (now, rss, th, fd, cpu_seconds(p.pid))
                peak_rss = max(peak_rss, rss)
                thread_range = [min(thread_range[0], th), max(thread_range[1], th)]
                fd_range = [min(fd_range[0], fd), max(fd_range[1], fd)]
            if now >= next_report:
                print(f"{(now - t_start) / 60:>6.1f} {rss / 2**20:>8.2f} {th:>7} {fd:>4} {scrapes:>7} {violations:>10}",
                      flush=True)
                next_report += a.report
            time.sleep(max(0.0, a.scrape - (time.monotonic() - now)))
        end = (time.monotonic(), rss_bytes(p.pid), threads(p.pid), fds(p.pid), cpu_seconds(p.pid))
    finally:
        p.terminate()
        p.wait()
    assert base is not None
    span = end[0] - base[0]
    growth = (end[1] - base[1]) / 2**20
    print()
    print(f"window        {span / 60:.1f} min after {a.warmup / 60:.1f} min warm-up, {a.gpus} GPUs, sample interval 100 ms")
    print(f"RSS           {base[1] / 2**20:.2f} MB -> {end[1] / 2**20:.2f} MB: growth {growth:+.2f} MB "
          f"(peak {peak_rss / 2**20:.2f} MB; ratio end/start {end[1] / base[1]:.4f}; target ≤ +2 MB)")
    print(f"threads       {base[2]} -> {end[2]} (range {thread_range[0]}..{thread_range[1]})")
    print(f"open fds      {base[3]} -> {end[3]} (range {fd_range[0]}..{fd_range[1]})")
    print(f"counters      {checked} consecutive-scrape comparisons over {len(prev)} series, {violations} decreases/errors")
    print(f"scrapes       {scrapes}, p50 {percentile(lat, 50):.2f} ms, p99 {percentile(lat, 99):.2f} ms")
    print(f"exporter CPU  {100 * (end[4] - base[4]) / span:.1f} % of one core over the window")
    ok = growth <= 2.0 and end[2] <= base[2] and end[3] <= base[3] and violations == 0
    print("verdict       " + ("OK" if ok else "NOT OK"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
