"""/metrics latency at 8 and 64 simulated GPUs, against /healthz on the same server.

    .venv/bin/python bench/scrape_latency.py [--scrapes 1000] [--gpus 8,64]

/healthz is the floor of the HTTP stack (same process, same connection handling),
so `metrics/healthz` shows what the exposition itself costs. Targets: p99 ≤ 5 ms at
8 GPUs and ≤ 25 ms at 64.
"""
from __future__ import annotations

import argparse
import time

import requests

from _proc import percentile, start_gpulse


def timed(session: requests.Session, url: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = session.get(url, timeout=5)
        r.content
        out.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scrapes", type=int, default=1000)
    ap.add_argument("--gpus", default="8,64")
    a = ap.parse_args()
    print(f"{'gpus':>5} {'series':>7} {'bytes':>8} {'p50 ms':>7} {'p99 ms':>7} {'healthz p99':>11} {'p99 ratio':>9}")
    for n in [int(x) for x in a.gpus.split(",")]:
        p, url = start_gpulse("--source", "sim", "--sim.gpus", str(n), "--sim.scenario", "sync-stall")
        try:
            time.sleep(2)
            s = requests.Session()
            body = s.get(url + "/metrics").text
            series = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
            m = timed(s, url + "/metrics", a.scrapes)
            h = timed(s, url + "/healthz", a.scrapes)
            print(f"{n:>5} {series:>7} {len(body):>8} {percentile(m, 50):>7.2f} {percentile(m, 99):>7.2f} "
                  f"{percentile(h, 99):>11.2f} {percentile(m, 99) / percentile(h, 99):>9.2f}")
        finally:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
