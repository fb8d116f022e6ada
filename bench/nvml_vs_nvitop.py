"""gpulse's NVML source against nvitop-exporter, on the same fake libnvidia-ml.

    .venv/bin/python bench/nvml_vs_nvitop.py [--seconds 60] [--gpus 8,64] [--scrape-every 15]

Each exporter runs as its own process at its defaults on its own copy of the fake
driver (tests/fakenvml, loaded through LD_LIBRARY_PATH) with the same scenario and
GPU count: `gpulse serve --source nvml`, and nvitop-exporter at its default 1 s
interval. Both run at the same time and are measured over the same window, so load
from anything else on the machine falls on both alike (each uses a few % of one
core at most, so they barely compete). After a warm-up, over --seconds:

    cpu        CPU seconds per wall second (utime + stime from /proc), in % of a core,
               while scraped every --scrape-every seconds like Prometheus would
    rss        resident memory at the end
    p99        /metrics latency over a burst of --latency-scrapes scrapes, 0.2 s apart,
               after the CPU window (so the burst does not count as CPU), alternating
               between the two exporters
    threads    gpulse's CPU per thread (on-CPU time from /proc/<pid>/task/*/schedstat,
               which counts nanoseconds, not clock ticks) and its voluntary wake-ups
               per second, in thread-creation order: the main thread (the HTTP
               event loop), then the sampler, then any HTTP worker threads
    calls      NVML device calls per GPU per second, counted by the fake library
    util every seconds between utilisation observations of one GPU: driver samples
               handed out by nvmlDeviceGetSamples plus nvmlDeviceGetUtilizationRates
               reads, also counted by the fake library

and prints nvitop/gpulse ratios. Targets: gpulse resolves utilisation ≥ 5× finer and
uses ≤ 0.5× the CPU. nvitop-exporter (pinned) is installed into bench/out/nvitop-venv
on first use, apart from the project's environment.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the repository root: bench.lib
from bench.lib.proc import ROOT, cpu_seconds, free_port, percentile, rss_bytes, start_gpulse, wait_ready  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
import fakenvml  # noqa: E402  (the test double lives with the tests)

OUT = ROOT / "bench" / "out"
NVITOP_VENV = OUT / "nvitop-venv"
NVITOP_PIN = "nvitop-exporter==1.7.2"
WARMUP = 5.0

# Every GPU computes at 95 % with a 0.3 s stall every 2 s: enough change that
# utilisation resolution matters, the same work for both exporters.
SCENARIO = """\
gpus {gpus}
util * square period=2 duty=0.85 high=0.95 low=0 phase=1.65
power * follow idle=90 max=604
memory * const 66571993088
"""


def nvitop_exporter() -> Path:
    exe = NVITOP_VENV / "bin" / "nvitop-exporter"
    if not exe.exists():
        print(f"installing {NVITOP_PIN} into {NVITOP_VENV} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(NVITOP_VENV)], check=True)
        subprocess.run([str(NVITOP_VENV / "bin" / "pip"), "install", "-q", NVITOP_PIN], check=True)
    return exe


def start_nvitop(env: dict) -> tuple[subprocess.Popen, str]:
    port = free_port()
    p = subprocess.Popen([str(nvitop_exporter()), "--bind-address", "127.0.0.1", "--port", str(port)],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_ready(p, url + "/metrics", 60, "nvitop-exporter did not start on the fake library")
    return p, url


def stats_now(path: Path) -> dict:
    deadline = time.monotonic() + 5
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"the fake library wrote no statistics to {path}")
        time.sleep(0.1)
    return fakenvml.read_stats(path)


def task_cpu(pid: int) -> dict[int, tuple[float, int]]:
    """Per live thread: (on-CPU seconds, voluntary context switches)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                ns = int(fh.read().split()[0])
            with open(f"/proc/{pid}/task/{tid}/status") as fh:
                vol = next(int(line.split()[1]) for line in fh if line.startswith("voluntary_ctxt_switches"))
        except (FileNotFoundError, ProcessLookupError):
            continue                      # the thread ended between the listing and the read
        out[int(tid)] = (ns / 1e9, vol)
    return out


def observations(s: dict) -> int:
    return s.get("util_samples", 0) + s["calls"].get("nvmlDeviceGetUtilizationRates", 0)


class Run:
    """One exporter process on its own fake library, measured between mark() and done()."""

    def __init__(self, kind: str, gpus: int):
        self.kind, self.gpus = kind, gpus
        scen = OUT / f"nvml-scenario-{gpus}.txt"
        scen.write_text(SCENARIO.format(gpus=gpus))
        self.stats = OUT / f"nvml-stats-{kind}-{gpus}.txt"
        self.stats.unlink(missing_ok=True)
        env = dict(os.environ, **fakenvml.env(scen, self.stats))
        if kind == "gpulse":
            self.proc, self.url = start_gpulse("--source", "nvml", env=env)
        else:
            self.proc, self.url = start_nvitop(env)
        self.session = requests.Session()
        self.latencies: list[float] = []

    def scrape(self) -> float:
        a = time.perf_counter()
        self.session.get(self.url + "/metrics", timeout=10).content
        return time.perf_counter() - a

    def mark(self) -> None:
        self.s0, self.c0, self.t0 = stats_now(self.stats), cpu_seconds(self.proc.pid), time.monotonic()
        self.tasks0 = task_cpu(self.proc.pid)

    def done(self) -> None:
        self.s1, self.c1, self.t1 = stats_now(self.stats), cpu_seconds(self.proc.pid), time.monotonic()
        self.tasks1 = task_cpu(self.proc.pid)
        self.rss = rss_bytes(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def figures(self) -> dict:
        s0, s1 = self.s0, self.s1
        span = s1["elapsed"] - s0["elapsed"]
        obs = observations(s1) - observations(s0)
        return {
            "cpu": (self.c1 - self.c0) / (self.t1 - self.t0),
            "rss": self.rss,
            "p99": percentile(self.latencies, 99),
            "calls": (s1["device_calls"] - s0["device_calls"]) / span / self.gpus,
            "every": span * self.gpus / obs if obs else float("inf"),
            "threads": [((c1 - self.tasks0.get(tid, (0.0, 0))[0]) / (self.t1 - self.t0),
                         (v1 - self.tasks0.get(tid, (0.0, 0))[1]) / (self.t1 - self.t0))
                        for tid, (c1, v1) in sorted(self.tasks1.items())],
            "calls_by_symbol": {k: (v - s0["calls"].get(k, 0)) / span / self.gpus for k, v in s1["calls"].items()
                                if v > s0["calls"].get(k, 0)},
        }


def measure(gpus: int, seconds: float, scrape_every: float, latency_scrapes: int) -> dict[str, dict]:
    runs = [Run(kind, gpus) for kind in ("gpulse", "nvitop-exporter")]
    try:
        time.sleep(WARMUP)
        for r in runs:
            r.mark()
        t0 = time.monotonic()
        nxt = t0
        while time.monotonic() - t0 < seconds:
            if time.monotonic() >= nxt:
                for r in runs:
                    r.scrape()
                nxt += scrape_every
            time.sleep(0.05)
        time.sleep(0.6)                 # let the fake libraries rewrite their statistics
        for r in runs:
            r.done()
        for _ in range(latency_scrapes):
            for r in runs:
                r.latencies.append(r.scrape())
            time.sleep(0.2)
    finally:
        for r in runs:
            r.stop()
    return {r.kind: r.figures() for r in runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--gpus", default="8,64")
    ap.add_argument("--scrape-every", type=float, default=15.0)
    ap.add_argument("--latency-scrapes", type=int, default=100)
    ap.add_argument("--calls", action="store_true", help="also list NVML calls per GPU per second by symbol")
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    fakenvml.build()
    nvitop_exporter()
    print(f"CPU over {a.seconds:g} s per run after {WARMUP:g} s warm-up, /metrics scraped every "
          f"{a.scrape_every:g} s; p99 over {a.latency_scrapes} scrapes 0.2 s apart")
    print(f"{'gpus':>4} {'exporter':<15} {'cpu %core':>9} {'rss MB':>7} {'p99 ms':>7} {'calls/GPU/s':>11} {'util every s':>12}")
    for n in (int(x) for x in a.gpus.split(",")):
        res = measure(n, a.seconds, a.scrape_every, a.latency_scrapes)
        for k, r in res.items():
            print(f"{n:>4} {k:<15} {100 * r['cpu']:>9.2f} {r['rss'] / 1e6:>7.1f} {1000 * r['p99']:>7.1f} "
                  f"{r['calls']:>11.1f} {r['every']:>12.3f}")
        g, v = res["gpulse"], res["nvitop-exporter"]
        print(f"{'':>4} {'ratio':<15} cpu gpulse/nvitop {g['cpu'] / v['cpu']:.2f} (target <= 0.5), "
              f"resolution {v['every'] / g['every']:.1f}x finer (target >= 5), "
              f"rss {g['rss'] / v['rss']:.2f}, p99 {g['p99'] / v['p99']:.2f}, calls {g['calls'] / v['calls']:.2f}")
        print(f"{'':>4} gpulse threads, % of a core (wake-ups/s): "
              + ", ".join(f"{100 * c:.3f} ({w:.1f})" for c, w in g["threads"]))
        if a.calls:
            for k, r in res.items():
                top = sorted(r["calls_by_symbol"].items(), key=lambda x: -x[1])
                print(f"{'':>4} {k} calls/GPU/s: " + ", ".join(f"{s} {c:.2f}" for s, c in top))


if __name__ == "__main__":
    main()
