"""/metrics latency at 8 and 64 simulated GPUs, against /healthz on the same server,
optionally against an earlier gpulse in the same run.

    .venv/bin/python bench/scrape_latency.py [--scrapes 1000] [--gpus 8,64] [--against REV] [--gzip] [--paced S]

/healthz is the floor of the HTTP stack (same process, same connection handling),
so `metrics/healthz` shows what the exposition itself costs. Targets: p99 ≤ 5 ms at
8 GPUs and ≤ 25 ms at 64.

--against REV also starts the gpulse of git revision REV (extracted to a temporary
directory) on the same scenario and scrapes the two alternately, one request each,
so load from elsewhere on the machine hits both alike; it prints each one's figures,
its CPU while scraped (CPU seconds per wall second of the process, sampler
included) and the ratios this ÷ REV. --gzip asks this checkout for gzip (REV is
asked for what it serves). --paced S then scrapes each server once a second for S
seconds and prints its CPU: the exporter's cost at a Prometheus-like pace.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the repository root: bench.lib
from bench.lib.proc import cpu_seconds, percentile, start_gpulse, tree_at  # noqa: E402


def one(session: requests.Session, url: str, headers: dict) -> float:
    t0 = time.perf_counter()
    r = session.get(url, timeout=5, headers=headers)
    r.content
    assert r.status_code == 200
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scrapes", type=int, default=1000)
    ap.add_argument("--gpus", default="8,64")
    ap.add_argument("--against", metavar="REV", help="also run gpulse at this git revision")
    ap.add_argument("--gzip", action="store_true", help="Accept-Encoding: gzip to this checkout")
    ap.add_argument("--paced", type=float, default=0.0, metavar="SECONDS",
                    help="then scrape each server once a second for SECONDS and print its CPU")
    a = ap.parse_args()
    print(f"{'gpus':>5} {'server':>8} {'series':>7} {'bytes':>8} {'p50 ms':>7} {'p99 ms':>7} {'healthz p99':>11} "
          f"{'p99 ratio':>9} {'CPU %':>6}")
    with contextlib.ExitStack() as stack:
        roots = {"this": None}
        if a.against:
            roots = {a.against[:8]: stack.enter_context(tree_at(a.against)), **roots}
        for n in [int(x) for x in a.gpus.split(",")]:
            procs = {}
            try:
                for name, root in roots.items():
                    kw = {"root": root} if root else {}
                    procs[name] = start_gpulse("--source", "sim", "--sim.gpus", str(n),
                                               "--sim.scenario", "sync-stall", **kw)
                time.sleep(2)
                rows = {}
                sessions = {name: requests.Session() for name in procs}
                heads = {name: {"Accept-Encoding": "gzip" if a.gzip and name == "this" else "identity"}
                         for name in procs}
                lat: dict[str, dict[str, list[float]]] = {name: {"metrics": [], "healthz": []} for name in procs}
                cpu0 = {name: cpu_seconds(p.pid) for name, (p, _) in procs.items()}
                t0 = time.monotonic()
                for path in ("metrics", "healthz"):
                    for i in range(a.scrapes):
                        order = list(procs) if i % 2 else list(reversed(procs))
                        for name in order:
                            lat[name][path].append(one(sessions[name], procs[name][1] + "/" + path, heads[name]))
                wall = time.monotonic() - t0
                for name, (p, url) in procs.items():
                    r = sessions[name].get(url + "/metrics", headers=heads[name], stream=True)
                    size = len(r.raw.read(decode_content=False))
                    series = sum(1 for line in requests.get(url + "/metrics").text.splitlines()
                                 if line and not line.startswith("#"))
                    m, h = lat[name]["metrics"], lat[name]["healthz"]
                    rows[name] = (percentile(m, 99), 100 * (cpu_seconds(p.pid) - cpu0[name]) / wall)
                    print(f"{n:>5} {name:>8} {series:>7} {size:>8} {percentile(m, 50):>7.2f} {percentile(m, 99):>7.2f} "
                          f"{percentile(h, 99):>11.2f} {percentile(m, 99) / percentile(h, 99):>9.2f} {rows[name][1]:>6.1f}")
                paced = {}
                if a.paced:
                    cpu0 = {name: cpu_seconds(p.pid) for name, (p, _) in procs.items()}
                    t0 = time.monotonic()
                    while time.monotonic() < t0 + a.paced:
                        for name in procs:
                            one(sessions[name], procs[name][1] + "/metrics", heads[name])
                        time.sleep(1.0)
                    wall = time.monotonic() - t0
                    for name, (p, _) in procs.items():
                        paced[name] = 100 * (cpu_seconds(p.pid) - cpu0[name]) / wall
                        print(f"{n:>5} {name:>8} scraped once a second for {wall:.0f}s: CPU {paced[name]:.2f} % of one core")
                if len(rows) == 2:
                    (p99_old, cpu_old), (p99_new, cpu_new) = rows.values()
                    line = f"this ÷ {a.against[:8]}: p99 {p99_new / p99_old:.2f}, CPU scraped back to back {cpu_new / cpu_old:.2f}"
                    if paced:
                        old, new = paced.values()
                        line += f", CPU scraped once a second {new / old:.2f}"
                    print(f"{n:>5} {'ratio':>8} {line}")
            finally:
                for p, _ in procs.values():
                    p.terminate()
                    p.wait()


if __name__ == "__main__":
    main()
