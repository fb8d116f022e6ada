"""python -m bench.lib.corpus --out DIR [--quick] [--causes]: write the corpus and its labels
(--causes: the straggler-cause cases of causes.py and causes.json)."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from . import ROOT, build

ap = argparse.ArgumentParser(description="write the detection corpus (nvidia-smi logs + labels.json)")
ap.add_argument("--out", default=None, help="default bench/out/corpus (bench/out/causes with --causes)")
ap.add_argument("--quick", action="store_true", help="shorter runs, one log format")
ap.add_argument("--causes", action="store_true", help="the straggler-cause cases instead (causes.json)")
ns = ap.parse_args()
t0 = time.perf_counter()
ns.out = ns.out or str(ROOT / "bench" / "out" / ("causes" if ns.causes else "corpus"))
if ns.causes:
    from .causes import build as build_causes
    got = build_causes(Path(ns.out), ns.quick)
    for c in got:
        print(f"{c.name:30} {c.cause:18} evidence={c.evidence!s:5} accept={','.join(c.accept):22} gpu={c.gpu or '-'}")
    n = len(got)
else:
    built = build(Path(ns.out), ns.quick)
    for c, p in built:
        t = c.truth
        print(f"{c.name:28} stall={t.stall!s:5} period={t.period} stragglers={','.join(t.stragglers) or '-':6} "
              f"imbalance={t.imbalance!s:5} {p.name}")
    n = len(built)
print(f"{n} cases in {time.perf_counter() - t0:.0f} s -> {ns.out}")
