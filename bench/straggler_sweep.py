#!/usr/bin/env python3
"""Straggler sensitivity: which slowdowns the report, the live gauges and the shipped
alerts name, on synchronous training jobs with one slow GPU or node.

    .venv/bin/python bench/straggler_sweep.py [--quick] [--cases REGEX] [--workers 2] [--out bench/out]

1. Builds the cases (bench/lib/corpus/sweep.py): 8-GPU jobs with a straggler at +5, +10,
   +15, +20 and +30 % for each cause (more work, thermal, power cap, degraded link,
   off-GPU) on different GPU indices; controls that must name nothing (per-rank
   jitter of +-2 % and +-8 %, a drift of all ranks, a hotter GPU, uneven memory);
   4 nodes x 8 GPUs with one GPU, then a whole node +25 %, and a 4 x 8 control. The
   ground truth is each GPU's and node's cost (the share of its peers' time spent
   waiting for it), computed from the timeline; a case is positive at cost >= 5 %.
2. For every case, with the real code:
   - live:   each node's log through `gpulse export --input LOG --node N --workload W`
             (drive.run_offline over the replay source, rendered by the real
             collector at every 15 s scrape): the first scrape in which
             `gpulse_gpu_straggler` reads 1 (and any `gpulse_node_straggler` series
             naming a node), the `gpulse_gpu_straggler_cause` it shows longest;
   - alerts: the same scrapes of all its nodes in one promtool unit-test file with the
             shipped rules (detection.write_test_file / first_firing): the first firing
             of `GpulseStragglerGPU` or `GpulseStragglerGPURecurring` per GPU and, when
             the rules define it, `GpulseStragglerNode` per node;
   - report: `gpulse report --input LOG` for one node; for 4 x 8, the exports
             backfilled (`promtool tsdb create-blocks-from openmetrics`) into a real
             Prometheus and `gpulse report --prometheus URL --workload W`; its
             findings.json `stragglers` (with `node`) and their `cause`.
3. Prints recall per slowdown and per cause, precision over all cases, the 4 x 8
   cells, the checkpointing rank of the ckpt/ cases (a recurring straggler in the
   truth: sweep.py) and the median and max time to detect / to page from the
   labelled onset (a recurring straggler's own: its second checkpoint), and writes
   bench/out/straggler_sweep.json.

Scoring: a positive case is a hit when a detector names one of its stragglers (for a
slow node: the node or one of its GPUs); a case where a detector names a GPU or node
that is not a straggler is a false positive. Borderline cases (cost within 1 % of the
5 % threshold: the +5 % ones) are scored apart, as "named k of n".
"""
from __future__ import annotations

import argparse
import calendar
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict
from multiprocessing import Pool
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "exporter")]     # bench.lib, testing/; gpulse

from bench.lib.corpus import sweep  # noqa: E402
from bench.dashboards_scale import Prometheus, need  # noqa: E402
from bench.detection import ALSO, RULES, SHIPPED, first_firing, write_test_file  # noqa: E402
from bench.detection_corpus import SCRAPE, report_doc  # noqa: E402
from bench.lib.verdicts import finding_cause, series_key  # noqa: E402

DETECTORS = ("report", "live", "alerts")
GPU_ALERT, NODE_ALERT = "GpulseStragglerGPU", "GpulseStragglerNode"
EPOCH = "2026/03/02 10:00:00"            # smi.write_log's default: the logs' first second
NA_NODE = "n/a (no node alert in rules)"
_LINE = re.compile(r"^([A-Za-z_:][\w:]*)(\{.*\})? (\S+) (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def node_alert_defined() -> bool:
    for f in SHIPPED:
        doc = yaml.safe_load(f.read_text(encoding="utf-8"))
        if any(r.get("alert") == NODE_ALERT for g in doc["groups"] for r in g["rules"]):
            return True
    return False


class Scrapes:
    """The series of one case's exports, one value per scrape (None: absent), in the
    shape detection.write_test_file reads (`series`, `scrapes`)."""

    def __init__(self, texts: list[str]):
        raw: dict[str, dict[float, float]] = {}
        self.labels: dict[str, tuple[str, dict]] = {}
        for text in texts:
            for line in text.splitlines():
                if not line or line[0] == "#":
                    continue
                m = _LINE.match(line)
                if m is None:
                    continue
                name, labels, value, ts = m.groups()
                if name == "gpulse_build_info":
                    continue        # its python_version says nothing of the run
                d = dict(_LABEL.findall(labels or ""))
                key = series_key(name, d)
                raw.setdefault(key, {})[float(ts)] = float(value)
                self.labels[key] = (name, d)
        times = sorted({t for pts in raw.values() for t in pts})
        self.t0, self.t1 = times[0], times[-1]
        self.scrapes = int(round((self.t1 - self.t0) / SCRAPE)) + 1
        self.series: dict[str, list] = {}
        for key, pts in raw.items():
            col: list = [None] * self.scrapes
            for t, v in pts.items():
                col[int(round((t - self.t0) / SCRAPE))] = v
            self.series[key] = col

    def time(self, i: int) -> float:
        return self.t0 + i * SCRAPE

    def first_one(self, name: str, by: tuple[str, ...]) -> dict[str, float]:
        """Per value of the `by` labels ("node/gpu" or "node"), the first scrape time at
        which a series `name` reads 1."""
        out: dict[str, float] = {}
        for key, col in self.series.items():
            n, d = self.labels[key]
            if n != name:
                continue
            i = next((i for i, v in enumerate(col) if v == 1), None)
            if i is not None:
                k = "/".join(d.get(b, "") for b in by)
                out[k] = min(out.get(k, float("inf")), self.time(i))
        return out

    def causes(self) -> dict[str, str]:
        """Per GPU ("node/gpu"), the cause gpulse_gpu_straggler_cause showed longest."""
        held: dict[str, Counter] = {}
        for key, col in self.series.items():
            n, d = self.labels[key]
            if n == "gpulse_gpu_straggler_cause":
                held.setdefault(f"{d.get('node')}/{d.get('gpu')}", Counter())[d.get("cause", "")] += \
                    sum(1 for v in col if v == 1)
        return {k: c.most_common(1)[0][0] for k, c in held.items() if c}


def export(path: Path, node: str, workload: str) -> str:
    r = subprocess.run([sys.executable, "-m", "gpulse", "export", "--input", str(path), "--node", node,
                        "--workload", workload], capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT / "exporter"), "PATH": "/usr/bin:/bin"})
    if r.returncode != 0:
        raise SystemExit(f"gpulse export failed on {path}: {r.stderr.strip()[-300:]}")
    return r.stdout


def report_named(doc: dict, case: sweep.SweepCase) -> tuple[set[str], dict[str, str]]:
    """What findings.json names: GPUs as "node/gpu" (a one-node log's report names no
    node: its GPUs are the case's node 0), nodes as "node" (`straggler_nodes`); the
    cause given each GPU."""
    named, causes = set(), {}
    one = case.nodes == 1
    for s in doc.get("stragglers", []):
        node = case.node(0) if one else str(s.get("node") or "")
        if s.get("gpu") in (None, ""):
            if node:
                named.add(node)
            continue
        key = f"{node}/{s['gpu']}"
        named.add(key)
        causes[key] = finding_cause(doc, str(s["gpu"])) if one else (s.get("cause") or "none")
    for nd in doc.get("straggler_nodes", []):     # a slow node, named once as the node
        named.add(str(nd["node"]))
    return named, causes


def report_prometheus(case: sweep.SweepCase, texts: list[str], t0: float, t1: float, work: Path) -> dict:
    """Backfill the exports into a real Prometheus and run `gpulse report --prometheus`."""
    data = work / "data"
    for n, text in enumerate(texts):
        om = work / f"n{n}.om"
        om.write_text(text, encoding="utf-8")
        r = subprocess.run([need("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"promtool could not backfill {om}: {r.stderr.strip()[-300:]}")
    prom = Prometheus(data, work, retention="100y")
    prom.start()
    try:
        return report_doc("--prometheus", prom.url, "--workload", case.workload,
                          "--start", str(int(t0)), "--end", str(int(t1) + 1))
    finally:
        prom.stop()


def run_case(args: tuple[sweep.SweepCase, Path, bool]) -> dict:
    case, out, node_alert = args
    t_start = time.perf_counter()
    sweep.build(case, out / "logs")
    texts = [export(p, case.node(n), case.workload) for n, p in enumerate(case.paths)]
    sc = Scrapes(texts)
    epoch = calendar.timegm(time.strptime(EPOCH, "%Y/%m/%d %H:%M:%S"))

    def lag(key: str, t: float) -> float:
        """t from the labelled onset of the straggler `key` (the case's, for others)."""
        return t - epoch - case.onsets.get(key, case.onset)
    named: dict[str, dict[str, float | None]] = {}
    causes: dict[str, dict[str, str]] = {}
    # live: the gauges of every node's exporter
    live = sc.first_one("gpulse_gpu_straggler", ("node", "gpu"))
    live.update(sc.first_one("gpulse_node_straggler", ("node",)))
    named["live"] = {k: lag(k, t) for k, t in live.items()}
    causes["live"] = sc.causes()
    # alerts: the shipped rules over the scrapes of all its nodes
    with tempfile.TemporaryDirectory() as tmp:
        tf = Path(tmp) / "sweep.test.yml"
        alerts = {name: "node, gpu" for name in (GPU_ALERT, *ALSO.get(GPU_ALERT, ()))}
        alerts.update({NODE_ALERT: "node"} if node_alert else {})
        write_test_file([sc], None, tf, alerts)
        fired = first_firing(tf)
        named["alerts"] = {}
        for name in alerts:     # the first firing of any of them
            for (n, g), t in fired.get(name, {}).items():
                k = f"{n}/{g}" if g else n
                named["alerts"][k] = min(named["alerts"].get(k, float("inf")), lag(k, sc.t0 + t))
        node_alerts = sorted(n for (n, _g) in fired.get(NODE_ALERT, {}))
        if case.nodes == 1:
            doc = report_doc("--input", str(case.paths[0]))
        else:
            doc = report_prometheus(case, texts, sc.t0, sc.t1, Path(tmp))
    rep, causes["report"] = report_named(doc, case)
    named["report"] = {k: None for k in rep}
    return dict(case=case, named=named, causes=causes, node_alerts=node_alerts,
                seconds=time.perf_counter() - t_start)


# -- scoring ------------------------------------------------------------------------------

def judge(case: sweep.SweepCase, named: dict) -> dict:
    """hit / false positive / the time to detect of one detector on one case."""
    slow_nodes = set(case.slow_nodes)
    true = set(case.stragglers) | slow_nodes

    def is_true(k: str) -> bool:
        return k in true or k.split("/")[0] in slow_nodes

    hits = [k for k in named if is_true(k)]
    false = sorted(k for k in named if not is_true(k))
    lags = [named[k] for k in hits if named[k] is not None]
    return dict(hit=bool(hits), false=false, lag=min(lags) if lags else None)


def score(rows: list[dict], detector: str) -> dict:
    tp = fp = fn = tn = 0
    by_slow: dict[str, list[int]] = {}
    by_cause: dict[str, list[int]] = {}
    lags, errors, border = [], [], [0, 0]
    for r in rows:
        c, j = r["case"], r["judged"][detector]
        if c.borderline:
            border[0] += bool(j["hit"] or j["false"])
            border[1] += 1
            continue
        if j["false"]:
            fp += 1
            errors.append(("false", c.name, j["false"]))
        if c.positive:
            tp += j["hit"]
            fn += not j["hit"]
            if not j["hit"]:
                errors.append(("missed", c.name))
            if c.nodes == 1:
                by_slow.setdefault(f"+{round(c.slowdown * 100)}%", [0, 0])
                by_slow[f"+{round(c.slowdown * 100)}%"][0] += j["hit"]
                by_slow[f"+{round(c.slowdown * 100)}%"][1] += 1
                by_cause.setdefault(c.cause, [0, 0])
                by_cause[c.cause][0] += j["hit"]
                by_cause[c.cause][1] += 1
            if j["hit"] and j["lag"] is not None:
                lags.append(j["lag"])
        elif not j["false"]:
            tn += 1
    return dict(detector=detector, tp=tp, fp=fp, fn=fn, tn=tn,
                precision=tp / (tp + fp) if tp + fp else None, recall=tp / (tp + fn) if tp + fn else None,
                by_slowdown=by_slow, by_cause=by_cause, borderline=border,
                median_lag_s=statistics.median(lags) if lags else None, max_lag_s=max(lags) if lags else None,
                errors=errors)


def _r(hit_n: list[int] | None) -> str:
    return "-" if not hit_n else f"{hit_n[0] / hit_n[1]:.2f} ({hit_n[0]}/{hit_n[1]})"


def _p(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def _s(x) -> str:
    return "-" if x is None else f"{x:.0f}"


def print_tables(rows: list[dict], results: dict[str, dict], node_alert: bool) -> None:
    slows = [f"+{round(s * 100)}%" for s in sweep.SLOWDOWNS if s > sweep.SLOWDOWNS[0]]
    print(f"\nrecall per slowdown (8 GPUs; +5 % is borderline: 'named' = cases with any name)")
    print(f"{'detector':9}" + "".join(f"{s:>14}" for s in slows) + f"{'+5% named':>12}")
    for d in DETECTORS:
        x = results[d]
        b = x["borderline"]
        print(f"{d:9}" + "".join(f"{_r(x['by_slowdown'].get(s)):>14}" for s in slows)
              + f"{(f'{b[0]}/{b[1]}' if b[1] else '-'):>12}")
    print(f"\nrecall per cause (8 GPUs, cost >= {sweep.COST_LIMIT:.0%})")
    print(f"{'detector':9}" + "".join(f"{c:>14}" for c in sweep.CAUSES))
    for d in DETECTORS:
        print(f"{d:9}" + "".join(f"{_r(results[d]['by_cause'].get(c)):>14}" for c in sweep.CAUSES))
    print(f"\n{'detector':9} {'P':>5} {'R':>5} {'TP':>3} {'FP':>3} {'FN':>3} {'TN':>3} {'median s':>9} {'max s':>6}"
          "   (time to detect / to page from onset)")
    for d in DETECTORS:
        x = results[d]
        print(f"{d:9} {_p(x['precision']):>5} {_p(x['recall']):>5} {x['tp']:3d} {x['fp']:3d} {x['fn']:3d} "
              f"{x['tn']:3d} {_s(x['median_lag_s']):>9} {_s(x['max_lag_s']):>6}")
    multi = [r for r in rows if r["case"].nodes > 1]
    if multi:
        print("\n4 x 8 jobs: what each detector names (true ones marked *)")
        for r in multi:
            c = r["case"]
            print(f"  {c.name:14} truth: {', '.join(c.slow_nodes) or ', '.join(c.stragglers) or 'nothing'}")
            for d in DETECTORS:
                names = sorted(r["named"][d])
                shown = ", ".join(n + ("*" if n in c.stragglers or n in c.slow_nodes
                                       or n.split("/")[0] in c.slow_nodes else "") for n in names)
                print(f"    {d:7} {len(names):2d} named: {shown[:150] or '-'}")
            node = (", ".join(r["node_alerts"]) or "none") if node_alert else NA_NODE
            print(f"    {NODE_ALERT}: {node}")
    ckpt = [r for r in rows if r["case"].checkpoint]
    if ckpt:
        print("\nthe checkpointing rank 0 of the ckpt/ cases (a recurring straggler in the truth): named")
        for d in DETECTORS:
            hits = [r for r in ckpt if f"{r['case'].node(0)}/0" in r["named"][d]]
            print(f"  {d:7} {len(hits)}/{len(ckpt)}")
    print("\ncause named for the straggler (report | live; accepted):")
    for r in rows:
        c = r["case"]
        keys = [(f"{c.node(0)}/{c.slow[0][1]}", c.accept)] if c.kind == "gpu" and c.nodes == 1 else []
        if c.checkpoint and f"{c.node(0)}/0" in c.onsets:
            keys.append((f"{c.node(0)}/0", ("off_gpu",)))
        for key, accept in keys:
            rep, live = r["causes"]["report"].get(key, "-"), r["causes"]["live"].get(key, "-")
            print(f"  {c.name:22} {key.rsplit('/', 1)[1]:>2} {rep:18} {live:18} {','.join(accept)}")
    print("\nerrors:")
    for d in DETECTORS:
        for e in results[d]["errors"]:
            print(f"  {d:7} {e}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="straggler sensitivity: recall per slowdown and cause, precision, "
                                             "time to page, for the report, the live gauges and the shipped alerts")
    ap.add_argument("--quick", action="store_true", help="a subset: thermal +10/+20 %%, two controls, the 4 x 8 "
                                                         "slow node, and thermal +10 %% and the hot GPU control with "
                                                         "rank 0 checkpointing (ckpt/; a few minutes on 2 cores)")
    ap.add_argument("--cases", metavar="REGEX", help="only the cases whose name matches (e.g. 'power|control')")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", default=str(ROOT / "bench" / "out"))
    args = ap.parse_args(argv)
    if args.workers < 1:
        raise SystemExit("--workers: must be at least 1")
    try:
        select = re.compile(args.cases) if args.cases else None
    except re.error as e:
        raise SystemExit(f"--cases: not a regular expression: {e}") from None
    if not (sweep.DATA / "traces").is_dir():
        raise SystemExit(f"straggler_sweep: the recorded data is missing: {sweep.DATA}/traces")
    need("promtool")
    cases = [c for c in sweep.cases(args.quick) if select is None or select.search(c.name)]
    if not cases:
        raise SystemExit(f"no case matches --cases {args.cases!r}")
    out = Path(args.out)
    node_alert = node_alert_defined()
    t0 = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="gpulse-sweep-"))
    try:
        with Pool(args.workers) as pool:
            rows = pool.map(run_case, [(c, work, node_alert) for c in cases], chunksize=1)
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=False)
    for r in rows:
        r["judged"] = {d: judge(r["case"], r["named"][d]) for d in DETECTORS}
    results = {d: score(rows, d) for d in DETECTORS}
    print(f"straggler sweep: {len(cases)} cases ({'quick' if args.quick else 'full'}), {args.workers} workers, "
          f"{time.perf_counter() - t0:.0f} s; rules {RULES.relative_to(ROOT)}; "
          f"{'node alert ' + NODE_ALERT if node_alert else NA_NODE}")
    print_tables(rows, results, node_alert)
    out.mkdir(parents=True, exist_ok=True)
    doc = dict(quick=args.quick, cases_regex=args.cases, node_alert=node_alert, results=results,
               cases=[dict(**{k: v for k, v in asdict(r["case"]).items() if k != "paths"},
                           named=r["named"], causes=r["causes"], judged=r["judged"], node_alerts=r["node_alerts"],
                           seconds=round(r["seconds"], 1)) for r in rows])
    (out / "straggler_sweep.json").write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    print(f"\nwrote {out / 'straggler_sweep.json'}; total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
