"""Exporter CPU (CPU seconds per wall second) and RSS, by GPU count and sample rate.

    .venv/bin/python bench/exporter_cpu.py [--seconds 60] [--gpus 8,64,256] [--intervals 0.1,0.05]
    .venv/bin/python bench/exporter_cpu.py --against REV [--gpus 8] [--intervals 0.1] [--rounds 3]

Each configuration runs as its own `gpulse serve --source sim` process, scraped every
15 s like Prometheus would, and is measured after a 3 s warm-up. The baseline row is
the same process with one simulated GPU at a 1 s sample interval: it shows the fixed
cost of the Python process and HTTP server, and the ratio column how much each
configuration adds over it. Target at 8 GPUs with defaults: ≤ 1 % of one core,
RSS ≤ 60 MB.

With --against REV, each configuration runs twice at once: the gpulse of git revision
REV (extracted to a temporary directory) and this checkout's, measured over the same
window so that other load on the machine falls on both alike, for --rounds rounds;
it prints both and this checkout's CPU over REV's per round and pooled.
"""
from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the repository root: bench.lib
from bench.lib.proc import ROOT, cpu_seconds, rss_bytes, start_gpulse, tree_at  # noqa: E402


def measure(seconds: float, *args: str, roots: tuple[Path, ...] = (ROOT,)) -> list[tuple[float, int]]:
    """(CPU seconds per second, RSS bytes) of one `gpulse serve` per tree in `roots`,
    all running and measured over the same window."""
    procs = []
    try:
        for root in roots:
            procs.append(start_gpulse("--source", "sim", "--sim.scenario", "sync-stall", *args, root=root))
        time.sleep(3)
        c0, t0 = [cpu_seconds(p.pid) for p, _ in procs], time.monotonic()
        next_scrape = t0
        while time.monotonic() - t0 < seconds:
            if time.monotonic() >= next_scrape:
                for _, url in procs:
                    requests.get(url + "/metrics", timeout=5).content
                next_scrape += 15
            time.sleep(0.2)
        c1, t1 = [cpu_seconds(p.pid) for p, _ in procs], time.monotonic()
        return [((b - a) / (t1 - t0), rss_bytes(p.pid)) for a, b, (p, _) in zip(c0, c1, procs)]
    finally:
        for p, _ in procs:
            p.terminate()
            p.wait()


def against(a: argparse.Namespace) -> None:
    with ExitStack() as stack:
        old = stack.enter_context(tree_at(a.against))
        name = a.against[:8]
        print(f"{'gpus':>5} {'interval':>8} {'round':>5} {name + ' %core':>14} {'this %core':>10} {'ratio':>6} "
              f"{'RSS MB old/this':>16}")
        for iv in a.intervals.split(","):
            for n in a.gpus.split(","):
                sums = [0.0, 0.0]
                for r in range(a.rounds):
                    # alternate which starts first, so neither always warms up on a quieter machine
                    roots = (old, ROOT) if r % 2 == 0 else (ROOT, old)
                    got = dict(zip(roots, measure(a.seconds, "--sim.gpus", n, "--sample-interval", iv, roots=roots)))
                    (c_old, m_old), (c_new, m_new) = got[old], got[ROOT]
                    sums[0] += c_old
                    sums[1] += c_new
                    print(f"{n:>5} {iv + 's':>8} {r + 1:>5} {100 * c_old:>14.3f} {100 * c_new:>10.3f} "
                          f"{c_new / c_old if c_old else float('inf'):>6.3f} {m_old / 1e6:>7.1f}/{m_new / 1e6:<7.1f}")
                print(f"{n:>5} {iv + 's':>8} {'all':>5} {100 * sums[0] / a.rounds:>14.3f} "
                      f"{100 * sums[1] / a.rounds:>10.3f} {sums[1] / sums[0] if sums[0] else float('inf'):>6.3f}"
                      f"   (pooled: this checkout's CPU over {name}'s)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--gpus", default=None, help="default 8,64,256; 8 with --against")
    ap.add_argument("--intervals", default=None, help="default 0.1,0.05; 0.1 with --against")
    ap.add_argument("--against", metavar="REV", help="run gpulse at this git revision beside this checkout")
    ap.add_argument("--rounds", type=int, default=3, help="with --against: measurement rounds per configuration")
    a = ap.parse_args()
    if a.against:
        a.gpus, a.intervals = a.gpus or "8", a.intervals or "0.1"
        against(a)
        return
    a.gpus, a.intervals = a.gpus or "8,64,256", a.intervals or "0.1,0.05"
    (base_cpu, base_rss), = measure(a.seconds, "--sim.gpus", "1", "--sample-interval", "1s")
    print(f"{'gpus':>5} {'interval':>8} {'cpu %core':>9} {'x baseline':>10} {'rss MB':>7}")
    print(f"{1:>5} {'1s':>8} {100 * base_cpu:>9.2f} {1.0:>10.2f} {base_rss / 1e6:>7.1f}   (baseline)")
    for iv in a.intervals.split(","):
        for n in a.gpus.split(","):
            (cpu, rss), = measure(a.seconds, "--sim.gpus", n, "--sample-interval", iv)
            print(f"{n:>5} {iv + 's':>8} {100 * cpu:>9.2f} {cpu / base_cpu if base_cpu else float('inf'):>10.2f} {rss / 1e6:>7.1f}")


if __name__ == "__main__":
    main()
