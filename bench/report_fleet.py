#!/usr/bin/env python3
"""`gpulse report --prometheus` for a whole job: time and memory against the fleet targets.

    .venv/bin/python bench/report_fleet.py                 # 64 GPUs (baseline), then 256
    .venv/bin/python bench/report_fleet.py --gpus 64,1024  # the 1,024-GPU target; ~10 minutes here

For each size: the real 8×H100 traces (../shared/data/traces/h100-8gpu) are
exported with the engine `gpulse export` runs, at a 15 s scrape; node n of the job
replays trace n mod 6, its training section tiled over --hours (start-up once, then
the section again and again, counters running on), shifted by a few scrapes per
node and with its counters starting where an exporter running for a while would
have them. Only what the report reads is written (busy, active, sampled, memory
used and total, with the job/instance/node/gpu/workload labels a scrape of an
attributing exporter carries), as OpenMetrics, loaded with `promtool tsdb
create-blocks-from openmetrics` into the Debian `prometheus`. Then `gpulse report
--prometheus URL --workload W --start .. --end ..` runs as its own process and the
bench prints its wall time and peak RSS, the ratio to the targets (15 s, 1 GB) and
to the first (baseline) size.
"""
from __future__ import annotations

import argparse
import io
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))          # bench.lib, testing/
sys.path.insert(0, str(ROOT / "exporter"))

from bench.dashboards_scale import BLOCK_S, Prometheus, load_windows, sizes_and_hours  # noqa: E402

TRACES = ROOT.parent / "shared" / "data" / "traces" / "h100-8gpu"
TRACE_NAMES = ("ckpt1", "ckpt10", "ckpt50", "ckpt100", "ckpt500", "ckpt1000")
SCRAPE_S = 15
WORKLOAD = "llm-pretrain"
# the tiled section of each trace: after start-up, before the job exits (seconds from its start)
BODY = (105.0, 660.0)
# family -> (metric name in the file, counter?)
FAMILIES = {
    "busy": ("gpulse_gpu_busy_seconds", True),
    "active": ("gpulse_gpu_active_seconds", True),
    "sampled": ("gpulse_gpu_sampled_seconds", True),
    "memory": ("gpulse_gpu_memory_used_bytes", False),
    "memory_total": ("gpulse_gpu_memory_total_bytes", False),
}
# the 1,024-GPU × 4 h report's targets (bench/README.md, "Report at fleet scale")
TARGET_S, TARGET_RSS = 15.0, 1e9


class Trace:
    """One trace as exported at the scrape interval: per GPU and family, the value
    (gauge) or increment (counter) of every scrape."""

    def __init__(self, name: str):
        from gpulse.export import export, replay_config
        buf = io.BytesIO()
        export(replay_config(str(TRACES / f"{name}.csv"), node="n"), SCRAPE_S, buf)
        names = {m + ("_total" if c else ""): k for k, (m, c) in FAMILIES.items()}
        raw: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for line in buf.getvalue().decode().splitlines():
            if line.startswith("#"):
                continue
            head, _, rest = line.partition("} ")
            metric, _, labels = head.partition("{")
            fam = names.get(metric)
            if fam is None:
                continue
            gpu = labels.split('gpu="', 1)[1].split('"', 1)[0]
            value, ts = rest.split()
            raw.setdefault((fam, gpu), []).append((float(ts), float(value)))
        t0 = min(ts for pts in raw.values() for ts, _ in pts)
        self.gpus = sorted({g for _, g in raw}, key=int)
        self.start: dict[tuple[str, str], list[float]] = {}
        self.body: dict[tuple[str, str], list[float]] = {}
        for (fam, gpu), pts in raw.items():
            counter = FAMILIES[fam][1]
            vals = [v for _, v in pts]
            steps = [b - a for a, b in zip([0.0] + vals, vals)] if counter else vals
            rel = [t - t0 for t, _ in pts]
            self.start[(fam, gpu)] = [s for s, r in zip(steps, rel) if r < BODY[0]]
            self.body[(fam, gpu)] = [s for s, r in zip(steps, rel) if BODY[0] <= r < BODY[1]]

    def values(self, fam: str, gpu: str, n: int, shift: int, base: float) -> list[float]:
        """n scrapes of one series: start-up, then the body tiled from `shift`."""
        head, body = self.start[(fam, gpu)], self.body[(fam, gpu)]
        seq = (head + [body[(shift + i) % len(body)] for i in range(max(0, n - len(head)))])[:n]
        if not FAMILIES[fam][1]:
            return seq
        out, acc = [], base
        for d in seq:
            acc += d
            out.append(acc)
        return out


def write_hour(path: Path, traces: list[Trace], gpus: int, start: int, w0: int, w1: int) -> int:
    """The scrapes in [w0, w1) of every GPU of the job, as one OpenMetrics file."""
    n_all = (w1 - start) // SCRAPE_S
    first = (w0 - start) // SCRAPE_S
    times = [start + SCRAPE_S * k for k in range(first, n_all)]
    nodes = math.ceil(gpus / 8)
    samples = 0
    with open(path, "w", encoding="ascii") as fh:
        for fam, (metric, counter) in FAMILIES.items():
            if not all((fam, "0") in tr.start for tr in traces):
                continue                  # not in these logs (nvidia-smi here records no memory.total)
            fh.write(f"# TYPE {metric} {'counter' if counter else 'gauge'}\n")
            sample = metric + ("_total" if counter else "")
            for n in range(nodes):
                tr = traces[n % len(traces)]
                node = f"gpu-node-{n:04d}"
                for gpu in tr.gpus[:min(8, gpus - 8 * n)]:
                    # an exporter that has been up a while, shifted by a few scrapes per node
                    base = 3600.0 * (1 + n % 7) if counter else 0.0
                    vals = tr.values(fam, gpu, n_all, shift=n % 5, base=base)[first:]
                    labels = (f'{{job="gpulse",instance="{node}:9400",node="{node}",gpu="{gpu}",'
                              f'workload="{WORKLOAD}"}}')
                    fh.write("".join(f"{sample}{labels} {v!r} {t}\n" for v, t in zip(vals, times)))
                    samples += len(vals)
        fh.write("# EOF\n")
    return samples


def backfill(traces: list[Trace], gpus: int, hours: float, data: Path, scratch: Path) -> tuple[int, int, int]:
    end = int(time.time()) // BLOCK_S * BLOCK_S
    start = end - int(hours * 3600)
    samples = load_windows(lambda om, w0, w1: write_hour(om, traces, gpus, start, w0, w1), start, end, data,
                           scratch, f"gpulse-report-{gpus}")
    return start, end, sum(samples)


def report(url: str, start: int, end: int, out: Path) -> tuple[float, float, float, str]:
    """(wall seconds, CPU seconds, peak RSS bytes, first finding) of one `gpulse report`
    process. The RSS is read from wait4() of that process alone; its output goes to
    files (a pipe nobody reads while waiting would stall a report that prints much)."""
    cmd = [sys.executable, "-m", "gpulse", "report", "--prometheus", url, "--workload", WORKLOAD,
           "--start", str(start), "--end", str(end), "--out", str(out), "--quiet"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "exporter"))
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "stdout.txt", "w+") as so, open(out / "stderr.txt", "w+") as se:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=so, stderr=se, text=True)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        so.seek(0)
        se.seek(0)
        out_text, err = so.read(), se.read()
    if p.returncode != 0:
        raise SystemExit(f"report_fleet: gpulse report failed ({p.returncode}): {err.strip()[-500:]}")
    first = out_text.strip().splitlines()[0] if out_text.strip() else ""
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024.0, first[:160]


def measure(traces: list[Trace], gpus: int, hours: float, scratch: Path, keep: bool) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"gpulse-report-{gpus}-"))
    prom = None
    try:
        t0 = time.monotonic()
        start, end, samples = backfill(traces, gpus, hours, work / "data", scratch)
        print(f"  {gpus} GPUs: {samples:,} samples backfilled in {time.monotonic() - t0:.0f} s", flush=True)
        prom = Prometheus(work / "data", work)
        prom.start()
        wall, cpu, rss, first = report(prom.url, start, end, work / "out")
        print(f"  {gpus} GPUs: gpulse report {wall:.1f} s wall, {cpu:.1f} s CPU, {rss / 1e6:.0f} MB peak RSS; "
              f"{first}", flush=True)
        return {"gpus": gpus, "wall": wall, "cpu": cpu, "rss": rss, "samples": samples}
    finally:
        if prom:
            prom.stop()
        if keep:
            print(f"  kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="64,256", help="job sizes, the first is the baseline (default %(default)s)")
    ap.add_argument("--hours", type=float, default=4.0, help="range backfilled and reported on (default %(default)s)")
    ap.add_argument("--keep", action="store_true", help="keep the TSDB directories")
    args = ap.parse_args(argv)
    sizes = sizes_and_hours(args, "report_fleet")
    if not TRACES.is_dir():
        raise SystemExit(f"report_fleet: {TRACES} not found (the shared data folder beside the checkout)")
    scratch = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path(tempfile.gettempdir())
    t0 = time.monotonic()
    traces = [Trace(n) for n in TRACE_NAMES]
    print(f"report at fleet scale: {args.hours:g} h at a {SCRAPE_S} s scrape, traces exported in "
          f"{time.monotonic() - t0:.0f} s", flush=True)
    runs = [measure(traces, g, args.hours, scratch, args.keep) for g in sizes]
    base = runs[0]
    print()
    print(f"{'GPUs':>6} {'wall s':>8} {'CPU s':>8} {'RSS MB':>8} {f'wall/{TARGET_S:g}s':>9} {'RSS/1GB':>8} "
          f"{'wall/base':>10} {'RSS/base':>9}")
    for r in runs:
        print(f"{r['gpus']:>6} {r['wall']:8.1f} {r['cpu']:8.1f} {r['rss'] / 1e6:8.0f} {r['wall'] / TARGET_S:9.2f} "
              f"{r['rss'] / TARGET_RSS:8.2f} {r['wall'] / base['wall']:10.2f} {r['rss'] / base['rss']:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
