"""Fingerprints of what the report concludes, to show a faster tree concludes the same.

For every input: a hash of findings.json (the report's verdicts, figures and spans) and
a hash of the per-tick fields the report keeps from the engine's snapshots (each GPU's
integrals, peer deviations and costs, each group's holding, stall seconds, imbalance
and episodes: collect.Recording). Inputs: the recorded logs of a directory (the
detection corpus written by `python -m bench.lib.corpus`, and the real traces and captures
of ../shared/data), multi-node jobs (a glob of per-node logs read as one job, as
`gpulse report --input 'GLOB'` reads them), and the simulator run of
bench/report_render.py.

    .venv/bin/python bench/findings_hash.py [--corpus DIR] [--job GLOB ...] [--sim 64x4] [--against REV]

With --against REV the tree at REV computes the same hashes in a process of its own and
every input is compared: the command exits 1 on any difference.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))          # bench.lib

from bench.lib.proc import tree_at  # noqa: E402

LOG_SUFFIXES = (".csv", ".txt", ".log", ".prom")
# an input that is a job: this prefix, then a glob of its per-node logs
JOB = "job:"


def logs(corpus: str | None) -> list[Path]:
    """The corpus's logs, then the real traces and nvidia-smi / dcgm-exporter captures."""
    found: list[Path] = []
    if corpus:
        found += sorted(p for p in Path(corpus).rglob("*") if p.suffix in LOG_SUFFIXES and p.is_file())
    found += sorted((DATA / "traces" / "h100-8gpu").glob("*.csv"))
    found += sorted(p for p in (DATA / "captures").rglob("*") if p.suffix in LOG_SUFFIXES)
    return found


def _tracks_hash(rec) -> str:
    h = hashlib.sha256()
    h.update(struct.pack(f"{len(rec.times)}d", *rec.times))
    for k, g in rec.gpus.items():
        h.update(f"{k}|{g.node}|{g.gpu}|{g.workload}|{g.lost_to!r}".encode())
        for name in ("busy", "active", "spin_wait", "idle", "sampled", "dev_busy", "dev_active",
                     "cost_active", "cost_busy", "signals", "signal_ticks"):
            h.update(bytes(getattr(g, name)))
        h.update(repr(g.signals_end).encode())
    for w, gr in rec.groups.items():
        h.update(f"{w}|{gr.gpus}|{sorted(gr.lost.items())}".encode())
        for name in ("holding", "stall", "imbalance"):
            h.update(bytes(getattr(gr, name)))
        h.update(repr(gr.episodes).encode())
    h.update(repr((rec.notes, rec.power_averaged, rec.activity)).encode())
    return h.hexdigest()[:16]


def _findings_hash(rec) -> str:
    from gpulse.report.findings import analyse
    doc = analyse(rec).as_json()
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def _cpu() -> float:
    """CPU of this process and of the processes it has waited for: a long log or a
    job's logs are read in a process of their own (sources/recorded/ahead.py), whose
    CPU is the work as much as this one's."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def compute(paths: list[str], sims: list[str]) -> dict[str, dict]:
    """input -> {findings, tracks, cpu} (or {error}), by the gpulse on sys.path, with the
    collector set as its CLI sets it for a report (cli.BATCH_GC_THRESHOLDS, where the
    tree has them)."""
    import gc

    from gpulse import cli
    gc.set_threshold(*getattr(cli, "BATCH_GC_THRESHOLDS", gc.get_threshold()))
    from gpulse.config import load_config
    from gpulse.report import inputs
    from gpulse.report.clock import settle
    from gpulse.report.errors import ReportError
    from gpulse.sources.recorded import detect_format
    from gpulse.sources.sim import SimSource
    out: dict[str, dict] = {}
    for p in paths:
        c0 = _cpu()
        try:
            if p.startswith(JOB):
                # one job: its logs' clocks aligned, judged as one workload
                rec = inputs.from_logs([p[len(JOB):]])
                p_first = sorted(glob.glob(p[len(JOB):]))[0]
            else:
                rec = inputs.from_log(p)
                p_first = p
            with open(p_first, encoding="utf-8", errors="replace", newline="") as fh:
                settle(rec, detect_format([fh.readline().rstrip("\r\n") for _ in range(50)]), None)
        except ReportError as e:
            out[p] = {"error": str(e)}
            continue
        out[p] = {"tracks": _tracks_hash(rec), "findings": _findings_hash(rec), "cpu": _cpu() - c0}
    for s in sims:
        gpus, hours = s.split("x")
        cfg = load_config(overrides={"source": "sim", "sim.scenario": "checkpoint", "sim.gpus": int(gpus),
                                     "sample_interval": 1.0, "analysis_interval": 1.0, "history": 10,
                                     "node_name": "bench"}, environ={})
        c0 = _cpu()
        rec = inputs.from_source(SimSource(cfg), cfg, f"sim checkpoint {gpus} GPUs", until=float(hours) * 3600)
        out[f"sim {s}"] = {"tracks": _tracks_hash(rec), "findings": _findings_hash(rec),
                           "cpu": _cpu() - c0}
    return out


def worker(tree: str, paths: list[str], sims: list[str]) -> dict[str, dict]:
    args = [sys.executable, str(Path(__file__).resolve()), "--worker", tree, "--sim", ",".join(sims), "--", *paths]
    p = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=""))
    if p.returncode != 0:
        raise SystemExit(f"the run of {tree} failed (exit {p.returncode}): {p.stderr.strip()[-500:]}")
    return json.loads(p.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", metavar="DIR", help="a corpus written by `python -m bench.lib.corpus --out DIR`")
    ap.add_argument("--job", action="append", default=[], metavar="GLOB",
                    help="a multi-node job: a glob of its per-node logs (repeatable)")
    ap.add_argument("--sim", default="64x4", help="simulator runs, GPUSxHOURS, comma-separated ('' for none)")
    ap.add_argument("--against", metavar="REV", help="compare with the tree at git revision REV")
    ap.add_argument("--worker", metavar="TREE", help=argparse.SUPPRESS)
    ap.add_argument("paths", nargs="*", help=argparse.SUPPRESS)
    ns = ap.parse_args()
    sims = [s for s in ns.sim.split(",") if s]
    if ns.worker:
        sys.path[:0] = [os.path.join(ns.worker, "exporter")]
        print(json.dumps(compute(ns.paths, sims)))
        return 0
    paths = [str(p) for p in logs(ns.corpus)] + [JOB + os.path.abspath(g) for g in ns.job]
    if not paths and not sims:
        raise SystemExit("nothing to hash: give --corpus DIR or --sim")
    mine = worker(str(ROOT), paths, sims)
    theirs = None
    if ns.against:
        with tree_at(ns.against) as old:
            theirs = worker(str(old), paths, sims)
    differ = 0
    every = hashlib.sha256()
    for name, r in mine.items():
        shown = (name if name.startswith(JOB) else
                 os.path.relpath(name, ns.corpus) if ns.corpus and name.startswith(ns.corpus) else Path(name).name)
        line = (f"{shown:<44} error: {r['error'][:60]}" if "error" in r else
                f"{shown:<44} findings {r['findings']} tracks {r['tracks']} cpu {r['cpu']:7.2f} s")
        every.update(json.dumps({k: v for k, v in r.items() if k != "cpu"}, sort_keys=True).encode())
        if theirs is not None:
            o = theirs.get(name, {})
            same = {k: v for k, v in o.items() if k != "cpu"} == {k: v for k, v in r.items() if k != "cpu"}
            differ += not same
            line += (f"  {ns.against[:8]} cpu {o['cpu']:7.2f} s  same" if same and "cpu" in o else
                     "  same" if same else f"  DIFFERS from {ns.against[:8]}: {o}")
        print(line, flush=True)
    print(f"{len(mine)} inputs, all hashes: {every.hexdigest()[:16]}")
    if theirs is not None:
        cpu = lambda d: sum(v.get("cpu", 0.0) for v in d.values())  # noqa: E731
        print(f"{differ} of {len(mine)} differ from {ns.against[:8]}; CPU {cpu(theirs):.1f} s ({ns.against[:8]}) "
              f"-> {cpu(mine):.1f} s (this tree), ratio {cpu(mine) / max(cpu(theirs), 1e-9):.3f}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
