"""python -m bench.corpus --out DIR [--quick]: write the corpus and its labels."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from . import ROOT, build

ap = argparse.ArgumentParser(description="write the detection corpus (nvidia-smi logs + labels.json)")
ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "corpus"))
ap.add_argument("--quick", action="store_true", help="shorter runs, one log format")
ns = ap.parse_args()
t0 = time.perf_counter()
built = build(Path(ns.out), ns.quick)
for c, p in built:
    t = c.truth
    print(f"{c.name:28} stall={t.stall!s:5} period={t.period} stragglers={','.join(t.stragglers) or '-':6} "
          f"imbalance={t.imbalance!s:5} {p.name}")
print(f"{len(built)} cases in {time.perf_counter() - t0:.0f} s -> {ns.out}")
