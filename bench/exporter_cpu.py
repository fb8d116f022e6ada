"""Exporter CPU (CPU seconds per wall second) and RSS, by GPU count and sample rate.

    .venv/bin/python bench/exporter_cpu.py [--seconds 60] [--gpus 8,64,256] [--intervals 0.1,0.05]

Each configuration runs as its own `gpulse serve --source sim` process, scraped every
15 s like Prometheus would, and is measured after a 3 s warm-up. The baseline row is
the same process with one simulated GPU at a 1 s sample interval: it shows the fixed
cost of the Python process and HTTP server, and the ratio column how much each
configuration adds over it. Target at 8 GPUs with defaults: ≤ 1 % of one core,
RSS ≤ 60 MB.
"""
from __future__ import annotations

import argparse
import time

import requests

from _proc import cpu_seconds, rss_bytes, start_gpulse


def measure(seconds: float, *args: str) -> tuple[float, int]:
    p, url = start_gpulse("--source", "sim", "--sim.scenario", "sync-stall", *args)
    try:
        time.sleep(3)
        c0, t0 = cpu_seconds(p.pid), time.monotonic()
        next_scrape = t0
        while time.monotonic() - t0 < seconds:
            if time.monotonic() >= next_scrape:
                requests.get(url + "/metrics", timeout=5).content
                next_scrape += 15
            time.sleep(0.2)
        c1, t1 = cpu_seconds(p.pid), time.monotonic()
        return (c1 - c0) / (t1 - t0), rss_bytes(p.pid)
    finally:
        p.terminate()
        p.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--gpus", default="8,64,256")
    ap.add_argument("--intervals", default="0.1,0.05")
    a = ap.parse_args()
    base_cpu, base_rss = measure(a.seconds, "--sim.gpus", "1", "--sample-interval", "1s")
    print(f"{'gpus':>5} {'interval':>8} {'cpu %core':>9} {'x baseline':>10} {'rss MB':>7}")
    print(f"{1:>5} {'1s':>8} {100 * base_cpu:>9.2f} {1.0:>10.2f} {base_rss / 1e6:>7.1f}   (baseline)")
    for iv in a.intervals.split(","):
        for n in a.gpus.split(","):
            cpu, rss = measure(a.seconds, "--sim.gpus", n, "--sample-interval", iv)
            print(f"{n:>5} {iv + 's':>8} {100 * cpu:>9.2f} {cpu / base_cpu if base_cpu else float('inf'):>10.2f} {rss / 1e6:>7.1f}")


if __name__ == "__main__":
    main()
