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

    .venv/bin/python bench/report_render.py [--hours 4] [--gpus 64]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "exporter"))

from gpulse.config import load_config  # noqa: E402
from gpulse.report.findings import analyse  # noqa: E402
from gpulse.report.inputs import from_source  # noqa: E402
from gpulse.report.outputs import write_outputs  # noqa: E402
from gpulse.sources.sim import SimSource  # noqa: E402


def run(gpus: int, seconds: float, out: str) -> dict[str, float]:
    cfg = load_config(overrides={"source": "sim", "sim.scenario": "checkpoint", "sim.gpus": gpus,
                                 "sample_interval": 1.0, "analysis_interval": 1.0, "history": 10,
                                 "node_name": "bench"}, environ={})
    t0 = time.perf_counter()
    rec = from_source(SimSource(cfg), cfg, f"sim checkpoint {gpus} GPUs", until=seconds)
    t1 = time.perf_counter()
    a = analyse(rec)
    t2 = time.perf_counter()
    paths = write_outputs(a, out)
    t3 = time.perf_counter()
    return {"ticks": rec.ticks, "gpus": len(rec.gpus), "engine": t1 - t0, "analyse": t2 - t1, "render": t3 - t2,
            "html_mb": os.path.getsize(paths["report.html"]) / 1e6,
            "png_mb": os.path.getsize(paths["heatmap.png"]) / 1e6,
            "json_mb": os.path.getsize(paths["findings.json"]) / 1e6,
            "episodes": len(a.episodes)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=4.0)
    ap.add_argument("--gpus", type=int, default=64)
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = run(8, 1800, os.path.join(tmp, "base"))
        big = run(ns.gpus, ns.hours * 3600, os.path.join(tmp, "big"))
    size = (big["ticks"] * big["gpus"]) / (base["ticks"] * base["gpus"])
    print(f"{'run':<28}{'GPU-ticks':>11}{'engine s':>10}{'analyse s':>11}{'render s':>10}"
          f"{'report s':>10}{'html MB':>9}{'png MB':>8}{'json MB':>9}{'stalls':>8}")
    for name, r in (("baseline 8 GPUs x 30 min", base), (f"{ns.gpus} GPUs x {ns.hours:g} h", big)):
        print(f"{name:<28}{r['ticks'] * r['gpus']:>11}{r['engine']:>10.2f}{r['analyse']:>11.2f}{r['render']:>10.2f}"
              f"{r['analyse'] + r['render']:>10.2f}{r['html_mb']:>9.2f}{r['png_mb']:>8.2f}{r['json_mb']:>9.2f}"
              f"{r['episodes']:>8}")
    print(f"size ratio {size:.1f}x; time ratio per GPU-tick: engine "
          f"{big['engine'] / base['engine'] / size:.2f}, report (analyse+render) "
          f"{(big['analyse'] + big['render']) / (base['analyse'] + base['render']) / size:.2f}")
    print(f"report stage for the big run: {big['analyse'] + big['render']:.1f} s (target < 30 s), "
          f"report.html {big['html_mb']:.2f} MB (target < 15 MB)")


if __name__ == "__main__":
    main()
