"""How long `gpulse report` takes for a 4-hour, 64-GPU run at 1 s ticks, and how big
its outputs are.

The run is the simulator's `checkpoint` scenario (rank 0 off the GPU for 15 s every
30 s, so there are hundreds of stall episodes to draw), driven through the Engine in
virtual time exactly as `gpulse report --input` drives a log. Stages timed apart:

    engine   source → Engine → per-tick tracks (collect.py)
    analyse  findings (findings.py)
    render   report.html + heatmap.png + findings.json (render.py)

A baseline of 8 GPUs for 30 minutes runs first in the same command; the ratios are
per GPU-tick, so 1.0 means the big run costs exactly its size.

With `--against REV` the same runs are made by the tree at git revision REV
(extracted to a temporary directory) and by this checkout, each in its own process,
both at once, so that whatever else loads the machine loads both alike; `--rounds`
repeats the pair. It prints both and this checkout's time over REV's, in wall time
and in CPU time. On a machine busy with other work the CPU time is the steadier of
the two, and per stage the only fair one: the faster tree reaches its report stage
while the other still runs its engine pass, and that one then finishes alone.

    .venv/bin/python bench/report_render.py [--hours 4] [--gpus 64] [--against REV [--rounds 1]]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))          # bench.lib, testing/

from bench.lib.proc import tree_at  # noqa: E402


def run(gpus: int, seconds: float, out: str) -> dict[str, float]:
    # imported here: a worker puts the tree it measures on sys.path first
    from gpulse.config import load_config
    from gpulse.report.findings import analyse
    from gpulse.report.inputs import from_source
    from gpulse.sources.sim import SimSource
    try:
        from gpulse.report.outputs import write_outputs
    except ImportError:   # older trees wrote the outputs from render.py
        from gpulse.report.render import write_outputs  # type: ignore[no-redef]

    cfg = load_config(overrides={"source": "sim", "sim.scenario": "checkpoint", "sim.gpus": gpus,
                                 "sample_interval": 1.0, "analysis_interval": 1.0, "history": 10,
                                 "node_name": "bench"}, environ={})
    c0, t0 = time.process_time(), time.perf_counter()
    rec = from_source(SimSource(cfg), cfg, f"sim checkpoint {gpus} GPUs", until=seconds)
    t1, c1 = time.perf_counter(), time.process_time()
    a = analyse(rec)
    t2 = time.perf_counter()
    paths = write_outputs(a, out)
    t3, c3 = time.perf_counter(), time.process_time()
    return {"ticks": rec.ticks, "gpus": len(rec.gpus), "engine": t1 - t0, "analyse": t2 - t1, "render": t3 - t2,
            "cpu": c3 - c0, "cpu_engine": c1 - c0, "cpu_report": c3 - c1,
            "html_mb": os.path.getsize(paths["report.html"]) / 1e6,
            "png_mb": os.path.getsize(paths["heatmap.png"]) / 1e6,
            "json_mb": os.path.getsize(paths["findings.json"]) / 1e6,
            "episodes": len(a.episodes)}


def both(gpus: int, hours: float) -> tuple[dict[str, float], dict[str, float]]:
    """The in-command baseline, then the big run."""
    with tempfile.TemporaryDirectory() as tmp:
        base = run(8, 1800, os.path.join(tmp, "base"))
        big = run(gpus, hours * 3600, os.path.join(tmp, "big"))
    return base, big


def table(rows: list[tuple[str, dict[str, float]]]) -> None:
    print(f"{'run':<34}{'GPU-ticks':>11}{'engine s':>10}{'analyse s':>11}{'render s':>10}"
          f"{'report s':>10}{'total s':>9}{'html MB':>9}{'png MB':>8}{'json MB':>9}{'stalls':>8}")
    for name, r in rows:
        print(f"{name:<34}{r['ticks'] * r['gpus']:>11}{r['engine']:>10.2f}{r['analyse']:>11.2f}{r['render']:>10.2f}"
              f"{r['analyse'] + r['render']:>10.2f}{total(r):>9.2f}{r['html_mb']:>9.2f}{r['png_mb']:>8.2f}"
              f"{r['json_mb']:>9.2f}{r['episodes']:>8}")


def total(r: dict[str, float]) -> float:
    return r["engine"] + r["analyse"] + r["render"]


def worker(tree: str, gpus: int, hours: float) -> subprocess.Popen:
    """This script's runs, in a process of their own, importing gpulse from `tree`."""
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", tree,
                             "--gpus", str(gpus), "--hours", str(hours)],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=""))


def against(rev: str, gpus: int, hours: float, rounds: int) -> None:
    with tree_at(rev) as old:
        trees = {rev[:8]: str(old), "this tree": str(ROOT)}
        results: dict[str, list[tuple[dict[str, float], dict[str, float]]]] = {k: [] for k in trees}
        for n in range(rounds):
            procs = {k: worker(t, gpus, hours) for k, t in trees.items()}
            for k, p in procs.items():
                out, _ = p.communicate()
                if p.returncode != 0:
                    raise SystemExit(f"the run of {k} failed (exit {p.returncode})")
                results[k].append(tuple(json.loads(out)))   # type: ignore[arg-type]
            print(f"round {n + 1}/{rounds}:")
            table([(f"{k}: {name}", r) for k in trees
                   for name, r in zip(("8 GPUs x 30 min", f"{gpus} GPUs x {hours:g} h"), results[k][-1])])
    old_k, new_k = list(trees)
    print(f"\n{gpus} GPUs x {hours:g} h, this tree / {old_k}, median over {rounds} round(s) "
          f"(per-round ratios in brackets):")
    for stage, f in (("engine", lambda r: r["engine"]), ("report (analyse+render)", lambda r: r["analyse"] + r["render"]),
                     ("end to end", total), ("engine, CPU", lambda r: r["cpu_engine"]),
                     ("report, CPU", lambda r: r["cpu_report"]), ("end to end, CPU", lambda r: r["cpu"])):
        o = [f(big) for _, big in results[old_k]]
        m = [f(big) for _, big in results[new_k]]
        ratios = [b / a for a, b in zip(o, m)]
        print(f"  {stage:<24} {statistics.median(o):8.2f} s -> {statistics.median(m):8.2f} s   "
              f"ratio {statistics.median(ratios):.3f} [{', '.join(f'{x:.3f}' for x in ratios)}]")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=4.0)
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--against", metavar="REV", help="also run the tree at git revision REV, at the same time")
    ap.add_argument("--rounds", type=int, default=1, help="with --against: pairs of runs")
    ap.add_argument("--worker", metavar="TREE", help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.worker:
        sys.path.insert(0, os.path.join(ns.worker, "exporter"))
        print(json.dumps(both(ns.gpus, ns.hours)))
        return
    if ns.against:
        against(ns.against, ns.gpus, ns.hours, ns.rounds)
        return
    sys.path.insert(0, str(ROOT / "exporter"))
    base, big = both(ns.gpus, ns.hours)
    size = (big["ticks"] * big["gpus"]) / (base["ticks"] * base["gpus"])
    table([("baseline 8 GPUs x 30 min", base), (f"{ns.gpus} GPUs x {ns.hours:g} h", big)])
    print(f"size ratio {size:.1f}x; time ratio per GPU-tick: engine "
          f"{big['engine'] / base['engine'] / size:.2f}, report (analyse+render) "
          f"{(big['analyse'] + big['render']) / (base['analyse'] + base['render']) / size:.2f}")
    print(f"report stage for the big run: {big['analyse'] + big['render']:.1f} s (target < 30 s), "
          f"report.html {big['html_mb']:.2f} MB (target < 15 MB)")


if __name__ == "__main__":
    main()
