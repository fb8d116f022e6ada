"""Time `gpulse report` on one multi-node job: a log per node, the report over all of them.

Builds N nodes × 8 GPUs of nvidia-smi `--query-gpu` CSV at 100 ms with the straggler
sweep's generator (bench/lib/corpus/sweep.py: data-parallel steps of 1-2.5 s with
their spin-waits, start-up and exit, the real H100 power levels and the nodes' own
query rhythm), one node 25 % slow from its HEALTHY seconds on, the training stretched
so the job runs `--hours`. Then runs `gpulse report --input 'DIR/*.csv'` as its own
process and prints wall time, CPU (user + system) and peak RSS from wait4; with
--profile, once more under cProfile, the functions with the most time of their own.
The logs live in a temporary directory (or --keep DIR, reused when it holds them).

    .venv/bin/python bench/report_job.py                         # 8 nodes × 4 h
    .venv/bin/python bench/report_job.py --nodes 8 --hours 0.25 --profile
    .venv/bin/python bench/report_job.py --against main          # the same logs, both trees
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the repository root: bench.lib
from bench.lib.corpus import sweep  # noqa: E402
from bench.lib.proc import tree_at  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SLOW_NODE = 1


def build(out: Path, nodes: int, hours: float, seed: int = 29) -> list[Path]:
    """The job's logs under `out` (`<workload>-n<N>.csv`), built once."""
    case = sweep.SweepCase(name=f"job-{nodes}x{sweep.GPUS}", kind="node", cause="more_work", slowdown=0.25,
                           nodes=nodes, seed=seed, slow=tuple((SLOW_NODE, g) for g in range(sweep.GPUS)))
    have = sorted(out.glob(f"{case.workload}-n*.csv"))
    if len(have) == nodes:
        return have
    fixed = sweep.LEAD + sweep.STARTUP + sweep.HEALTHY + sweep.TAIL
    saved = sweep.SLOW
    sweep.SLOW = max(60.0, hours * 3600.0 - fixed)
    try:
        return list(sweep.build(case, out).paths)
    finally:
        sweep.SLOW = saved


def run(pattern: str, out: Path, root: Path, profile: Path | None = None) -> tuple[float, float, int, int]:
    """(wall s, CPU s, peak RSS bytes, exit status) of one report process of the tree at `root`."""
    env = dict(os.environ, PYTHONPATH=str(root / "exporter"))
    pre = ["-m", "cProfile", "-o", str(profile)] if profile else []
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, *pre, "-m", "gpulse", "report", "--quiet", "--input", pattern,
                          "--out", str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    took = time.monotonic() - t0
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        err = p.stderr.read().decode(errors="replace") if p.stderr else ""
        print(f"report failed ({rc}): {err.strip()[-300:]}", file=sys.stderr)
    return took, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--hours", type=float, default=4.0)
    ap.add_argument("--keep", metavar="DIR", help="build the logs here and keep them (reused when present)")
    ap.add_argument("--profile", action="store_true", help="also run under cProfile and print the top functions")
    ap.add_argument("--against", metavar="REV", help="also report with the tree at git revision REV")
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpulse-job-") as tmp:
        logs_dir = Path(ns.keep) if ns.keep else Path(tmp) / "logs"
        logs_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        # built in a process of its own: a child's peak RSS (wait4) starts from its
        # parent's size at the fork, and the generator holds the whole job's timelines
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            paths = pool.apply(build, (logs_dir, ns.nodes, ns.hours))
        size = sum(p.stat().st_size for p in paths)
        print(f"{ns.nodes} logs, {size / 1e6:.0f} MB, built in {time.monotonic() - t0:.0f} s", flush=True)
        pattern = str(logs_dir / "*.csv")
        trees = [("this tree", ROOT)]
        ctx = tree_at(ns.against) if ns.against else None
        if ctx is not None:
            trees.append((ns.against[:8], ctx.__enter__()))
        try:
            # CPU and peak RSS: of the report and the processes it reads the logs in
            # (wait4 counts the children a process has waited for)
            print("| tree | wall s | CPU s | peak RSS MiB |")
            print("|---|---|---|---|")
            outs = []
            for k, (name, root) in enumerate(trees):
                outs.append(Path(tmp) / f"out-{k}")
                wall, cpu, rss, rc = run(pattern, outs[-1], root)
                print(f"| {name} | {wall:.1f} | {cpu:.1f} | {rss / 2 ** 20:.0f} |" + ("" if rc == 0 else f" exit {rc}"),
                      flush=True)
            if len(outs) == 2:
                same = (outs[0] / "findings.json").read_bytes() == (outs[1] / "findings.json").read_bytes()
                print(f"findings.json of the two trees: {'byte-identical' if same else 'DIFFERENT'}")
            if ns.profile:
                prof = Path(tmp) / "report.prof"
                run(pattern, Path(tmp) / "out-prof", ROOT, prof)
                pstats.Stats(str(prof)).sort_stats("tottime").print_stats(20)
        finally:
            if ctx is not None:
                ctx.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
