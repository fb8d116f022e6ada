"""Fingerprints of what the report concludes, to show a refactor changes nothing.

    .venv/bin/python bench/findings_hash.py [--only REGEX] [--corpus bench/out/corpus]

For every real 8xH100 checkpoint trace in ../shared/data, a few simulator runs and,
with --corpus, every log of a detection corpus (bench/corpus, written by
bench/detection.py under its --out), the report's
pipeline runs as `gpulse report` runs it, and two SHA-256 prefixes are printed:

    tracks    the per-tick Recording the engine's snapshots leave (report/collect.py):
              times, every GPU's integrals, deviations, costs and cause signals, every
              group's holding, stall seconds, imbalance, episodes and lost seconds
    findings  findings.json as written (strict JSON, keys sorted)

Run it before and after a change: equal lines mean the change kept the report's
behaviour on that input. Floats are hashed by their exact bits.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT / "exporter"))

from gpulse.config import load_config  # noqa: E402
from gpulse.report.findings import analyse  # noqa: E402
from gpulse.report.inputs import from_log, from_source  # noqa: E402
from gpulse.safetext import dumps, finite  # noqa: E402
from gpulse.sources.sim import SimSource  # noqa: E402

LOGS = [f"traces/h100-8gpu/ckpt{n}.csv" for n in (1, 10, 50, 100, 500, 1000)]
SIMS = (("checkpoint", 8, 900.0), ("straggler", 8, 600.0), ("imbalance", 4, 300.0), ("sync-stall", 4, 120.0),
        ("straggler-throttled", 8, 600.0), ("straggler-off-gpu", 8, 600.0), ("gpu-lost", 4, 120.0))


def _floats(h: "hashlib._Hash", xs) -> None:
    xs = list(xs)
    h.update(struct.pack(f"<{len(xs)}d", *xs))


def tracks_hash(rec) -> str:
    h = hashlib.sha256()
    _floats(h, rec.times)
    for k, g in sorted(rec.gpus.items()):
        h.update(f"gpu {k} {g.node} {g.gpu} {g.workload} {g.lost_to!r}".encode())
        for name in ("busy", "active", "spin_wait", "idle", "sampled", "dev_busy", "dev_active",
                     "cost_active", "cost_busy", "signals"):
            _floats(h, getattr(g, name))
        h.update(repr(list(g.signal_ticks)).encode())
        h.update(repr(g.signals_end).encode())
    for w, gr in sorted(rec.groups.items()):
        h.update(f"group {w} {gr.gpus} {sorted(gr.lost.items())!r}".encode())
        h.update(bytes(gr.holding))
        _floats(h, gr.stall)
        _floats(h, gr.imbalance)
        for e in gr.episodes:
            h.update(repr((e.start, e.duration, e.stalled, e.open)).encode())
    h.update(repr((rec.power_averaged, rec.notes)).encode())
    return h.hexdigest()[:16]


def findings_hash(rec) -> str:
    doc = finite(analyse(rec).as_json())
    return hashlib.sha256(dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def inputs(corpus: str | None):
    for rel in LOGS:
        yield rel, lambda rel=rel: from_log(str(DATA / rel))
    for path in sorted(Path(corpus).rglob("*.csv")) if corpus else ():
        yield f"corpus {path.relative_to(corpus)}", lambda path=path: from_log(str(path))
    for scenario, gpus, seconds in SIMS:
        def run(scenario=scenario, gpus=gpus, seconds=seconds):
            cfg = load_config(overrides={"source": "sim", "sim.scenario": scenario, "sim.gpus": gpus,
                                         "history": 10, "node_name": "bench"}, environ={})
            return from_source(SimSource(cfg), cfg, f"sim {scenario}", until=seconds)
        yield f"sim {scenario} {gpus} GPUs {seconds:g} s", run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", metavar="REGEX", help="only the inputs whose name matches")
    ap.add_argument("--corpus", metavar="DIR", help="also every log under DIR (a detection corpus)")
    ns = ap.parse_args()
    if not (DATA / "traces").is_dir():
        raise SystemExit(f"findings_hash: the recorded data is missing: {DATA}")
    print(f"{'input':<56}{'tracks':>18}{'findings':>18}")
    for name, make in inputs(ns.corpus):
        if ns.only and not re.search(ns.only, name):
            continue
        rec = make()
        print(f"{name:<56}{tracks_hash(rec):>18}{findings_hash(rec):>18}", flush=True)


if __name__ == "__main__":
    main()
