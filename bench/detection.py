"""Detection quality on the evaluation corpus built from real recordings.

    .venv/bin/python bench/detection.py [--quick] [--cases REGEX] [--workers 2] [--out bench/out]

1. Writes the corpus (bench/lib/corpus: the real 8xH100 logs, the Alibaba PAI jobs, the
   seed case, recurring-stall cases and negatives; labels from the recordings).
2. For every case, with the real code:
   - report:  `gpulse report --input case.csv`, read from findings.json;
   - live:    the same log through the exporter's engine (`run_offline` over the
              replay source, what `gpulse serve --source replay` runs): its exact
              counters, its confirmed-straggler gauge (gpulse_gpu_straggler),
              its stall-period and imbalance gauges held for PERSIST seconds;
   - alerts:  the exporter's series scraped every 15 s (rendered by the real
              collector) in ONE promtool unit-test file, each case its own `node`,
              evaluated with the shipped rules (prometheus/rules, unchanged); the
              first firing per alert comes back from the ALERTS series;
   - baseline: the same alerts written over an instantaneous utilisation gauge
              (each GPU's latest log row at the scrape instant), as dcgm-exporter
              data is usually alerted on. Thresholds, guards and hold times are the
              shipped ones (the table and the rule file).
3. Prints per family (stall, rhythm, straggler, imbalance) and detector precision,
   recall, F1 and the median time to detect (from the labelled onset; the report
   reads a whole run, so it has none), and writes bench/out/detection.json.

Scoring: stall and imbalance per case; rhythm per case whose period is known (a
period off by more than 15 % is a miss and a false alarm); straggler per case: a
hit when a flagged GPU is one of the true stragglers, a false alarm when a flagged
GPU is not.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "exporter")]     # bench.lib, testing/; gpulse

from bench.lib.corpus import build  # noqa: E402
from bench.detection_corpus import (BASELINE_METRIC, RHYTHM_TOLERANCE, SCRAPE, Verdict, observe,  # noqa: E402
                              report_verdict)
from gpulse.analysis.thresholds import value  # noqa: E402

RULES = ROOT / "prometheus" / "rules"
SHIPPED = [RULES / "gpulse-recording.rules.yml", RULES / "gpulse-training.rules.yml"]
FAMILIES = ("stall", "rhythm", "straggler", "imbalance")
DETECTORS = ("report", "live", "alerts", "baseline")
ALERTS = {"stall": ("GpulseSyncStalls", "BaselineSyncStalls"),
          "straggler": ("GpulseStragglerGPU", "BaselineStragglerGPU"),
          "imbalance": ("GpulseWorkloadImbalance", "BaselineWorkloadImbalance")}
# shipped alerts that page the same family under another name: a straggler is paged
# when it costs its peers in one stretch or in recurring ones; the first firing counts
ALSO = {"GpulseStragglerGPU": ("GpulseStragglerGPURecurring",)}


def shipped_holds() -> dict[str, str]:
    doc = yaml.safe_load((RULES / "gpulse-training.rules.yml").read_text(encoding="utf-8"))
    return {r["alert"]: r.get("for", "0s") for g in doc["groups"] for r in g["rules"] if "alert" in r}


def baseline_rules() -> dict:
    """The three alerts over the instantaneous gauge: the share of scrapes in which
    every GPU read idle (episodes = changes of that 0/1 series), and the mean of the
    scraped utilisation values; thresholds from the table, hold times as shipped."""
    holds = shipped_holds()
    u = BASELINE_METRIC
    idle = value("idle_ratio") * 100
    gap, z, floor = value("straggler_cost_ratio"), value("straggler_z"), value("z_mad_floor")
    gated = " * on (node) group_left () (gpulse_group_active == 1)"

    def peer(w: str) -> list[dict]:
        return [
            {"record": f"node_gpu:baseline_util:avg{w}", "expr": f"avg_over_time({u}[{w}]) / 100{gated}"},
            {"record": f"node_gpu:baseline_util:peer_gap{w}",
             "expr": f"node_gpu:baseline_util:avg{w} - on (node) group_left () "
                     f"quantile by (node) (0.5, node_gpu:baseline_util:avg{w})"}]
    return {"groups": [{"name": "baseline", "rules": [
        {"record": "node:baseline_coidle:bool", "expr": f"max by (node) ({u}) < bool {idle:g}"},
        {"alert": "BaselineSyncStalls",
         "expr": (f"avg_over_time(node:baseline_coidle:bool[2m]) >= {value('stall_page_ratio')}"
                  " and on (node) gpulse_group_active == 1"
                  f" and on (node) changes(node:baseline_coidle:bool[10m]) >= {2 * value('stall_recurring_episodes') - 1:g}"),
         "for": holds["GpulseSyncStalls"]},
        *peer("5m"), *peer("2m"),
        {"record": "node_gpu:baseline_util:peer_deviation5m",
         "expr": "node_gpu:baseline_util:peer_gap5m / on (node) group_left () "
                 f"clamp_min(1.4826 * quantile by (node) (0.5, abs(node_gpu:baseline_util:peer_gap5m)), {floor})"},
        {"alert": "BaselineStragglerGPU",
         "expr": (f"node_gpu:baseline_util:peer_gap5m and abs(node_gpu:baseline_util:peer_gap5m) >= {gap}"
                  f" and abs(node_gpu:baseline_util:peer_deviation5m) > {z}"
                  f" and abs(node_gpu:baseline_util:peer_gap2m) >= {gap}"
                  " and on (node) increase(gpulse_group_sampled_seconds_total[5m]) >= "
                  f"{value('straggler_settle_seconds'):g}"),
         "for": holds["GpulseStragglerGPU"]},
        {"alert": "BaselineWorkloadImbalance",
         "expr": (f"1 - min by (node) (node_gpu:baseline_util:avg5m) / (max by (node) (node_gpu:baseline_util:avg5m) > 0)"
                  f" > {value('imbalance_alert_ratio')}"
                  f" and on (node) max by (node) (node_gpu:baseline_util:avg5m) > {value('imbalance_min_active_ratio')}"),
         "for": holds["GpulseWorkloadImbalance"]},
    ]}]}


def _fmt(v) -> str:
    return "_" if v is None else repr(round(v, 6))


def write_test_file(observed: list, baseline_path: Path | None, path: Path,
                    alerts: dict[str, str] | None = None) -> int:
    """One promtool unit-test file: every observed series as input, the shipped rules
    (and the baseline's, when given), and per alert of `alerts` (name -> the labels
    to group its firings by; default: every alert of ALERTS) a query for its first
    firing, read back by first_firing. Returns the number of scrapes."""
    n = max(o.scrapes for o in observed)
    if alerts is None:
        alerts = {name: "node, gpu" if fam == "straggler" else "node"
                  for fam, names in ALERTS.items() for first in names for name in (first, *ALSO.get(first, ()))}
    rules = (*SHIPPED, baseline_path) if baseline_path is not None else SHIPPED
    lines = ["rule_files:"] + [f"  - {p}" for p in rules]
    lines += [f"evaluation_interval: {SCRAPE}s", "tests:", f"  - interval: {SCRAPE}s", "    input_series:"]
    for o in observed:
        for key, col in o.series.items():
            col = col + [None] * (n - len(col))
            lines.append(f"      - series: '{key}'")
            lines.append(f"        values: '{' '.join(_fmt(v) for v in col)}'")
    lines.append("    promql_expr_test:")
    for name, by in alerts.items():
        expr = (f'min by ({by}) (min_over_time(timestamp(ALERTS{{alertname="{name}",alertstate="firing"}})'
                f"[{n * SCRAPE}s:{SCRAPE}s]))")
        lines += [f"      - expr: '{expr}'", f"        eval_time: {n * SCRAPE}s", "        exp_samples: []"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return n


_GOT = re.compile(r"\{([^{}]*)\} ([-+0-9.E]+)")


def first_firing(test_file: Path) -> dict[str, dict[tuple[str, str], float]]:
    """alert -> {(node, gpu or ''): first firing time on promtool's timeline}. Every
    expectation is empty, so promtool prints each non-empty result as a failure."""
    r = subprocess.run(["promtool", "test", "rules", str(test_file)], capture_output=True, text=True)
    out = r.stdout + r.stderr
    if "expr:" not in out and r.returncode != 0:
        raise SystemExit(f"promtool failed on {test_file}: {out.strip().splitlines()[-1:] or r.returncode}")
    found: dict[str, dict[tuple[str, str], float]] = {}
    current = None
    for line in out.splitlines():
        m = re.search(r'alertname=\\"(\w+)\\"', line)
        if line.strip().startswith("expr:") and m:
            current = m.group(1)
        elif line.strip().startswith("got:") and current:
            for labels, v in _GOT.findall(line):
                d = dict(re.findall(r'(\w+)="([^"]*)"', labels))
                found.setdefault(current, {})[(d.get("node", ""), d.get("gpu", ""))] = float(v)
    return found


def alert_verdicts(fired: dict, node: str, baseline: bool) -> Verdict:
    k = 1 if baseline else 0
    def t(fam: str) -> dict:
        first: dict = {}
        for name in (ALERTS[fam][k], *ALSO.get(ALERTS[fam][k], ())):
            for key, v in fired.get(name, {}).items():
                if key[0] == node:
                    first[key] = min(first.get(key, float("inf")), v + SCRAPE)
        return first
    st, sg, im = t("stall"), t("straggler"), t("imbalance")
    return Verdict(stall=bool(st), stall_at=min(st.values(), default=None), period=None,
                   stragglers={gpu: v for (_, gpu), v in sg.items()},
                   imbalance=bool(im), imbalance_at=min(im.values(), default=None))


def score(rows: list[dict], family: str, detector: str) -> dict | None:
    tp = fp = fn = tn = 0
    lags, errors = [], []
    for r in rows:
        truth, v = r["truth"], r["verdicts"].get(detector)
        if v is None:
            return None
        if family == "stall":
            pos, hit, claim, onset, at = truth.stall, v.stall, v.stall, truth.stall_onset, v.stall_at
        elif family == "imbalance":
            pos, hit, claim, onset, at = truth.imbalance, v.imbalance, v.imbalance, None, v.imbalance_at
        elif family == "rhythm":
            if not truth.rhythm_scored or detector in ("alerts", "baseline"):
                continue
            pos, claim = truth.period is not None, v.period is not None
            hit = pos and claim and abs(v.period - truth.period) <= RHYTHM_TOLERANCE * truth.period
            onset = at = None
            if pos and claim and not hit:
                fp += 1
                errors.append(("wrong period", r["name"], truth.period, v.period))
        else:
            true, flagged = set(truth.stragglers), set(v.stragglers)
            pos, hit, claim = bool(true), bool(true & flagged), bool(flagged - true)
            # time to detect: the first true straggler found, from its own onset
            lag = min((v.stragglers[g] - truth.straggler_onsets[g] for g in true & flagged), default=None)
            onset, at = (0.0, lag) if lag is not None else (None, None)
            if claim:
                fp += 1
                errors.append(("false straggler", r["name"], sorted(flagged - true), sorted(true)))
            claim = False
        if pos and hit:
            tp += 1
            if onset is not None and at is not None and detector != "report":
                lags.append(at - onset)
        elif pos:
            fn += 1
            errors.append(("missed", r["name"]))
        elif claim and family not in ("straggler",):
            fp += 1
            errors.append(("false alarm", r["name"]))
        else:
            tn += 1
    if tp + fp + fn + tn == 0:
        return None
    p = tp / (tp + fp) if tp + fp else float("nan")
    rc = tp / (tp + fn) if tp + fn else float("nan")
    f1 = 2 * p * rc / (p + rc) if tp else 0.0
    return dict(family=family, detector=detector, tp=tp, fp=fp, fn=fn, tn=tn, precision=p, recall=rc, f1=f1,
                median_detect_s=statistics.median(lags) if lags else None,
                max_detect_s=max(lags) if lags else None, errors=errors)


def _observe(args):
    name, path, node = args
    t0 = time.perf_counter()
    o = observe(str(path), node)
    rep = report_verdict(str(path))
    return name, o, rep, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description="detection quality on the corpus built from real recordings")
    ap.add_argument("--quick", action="store_true", help="shorter runs, one log format (a few minutes on 2 cores)")
    ap.add_argument("--cases", metavar="REGEX", help="only the cases whose name matches (e.g. 'pai|ckpt500')")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", default=str(ROOT / "bench" / "out"))
    ap.add_argument("--causes", action="store_true", help="then the straggler-cause confusion matrix (cause_matrix.py)")
    args = ap.parse_args()
    out_dir = Path(args.out)
    t0 = time.perf_counter()
    built = build(out_dir / "corpus", args.quick, args.cases)
    if not built:
        raise SystemExit(f"no case matches --cases {args.cases!r}")
    t_build = time.perf_counter() - t0
    nodes = {c.name: f"c{i:02d}" for i, (c, _) in enumerate(built)}
    with Pool(args.workers) as pool:
        got = pool.map(_observe, [(c.name, p, nodes[c.name]) for c, p in built], chunksize=1)
    t_obs = time.perf_counter() - t0 - t_build
    by_name = {name: (o, rep) for name, o, rep, _ in got}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline.rules.yml"
        base.write_text(yaml.safe_dump(baseline_rules(), sort_keys=False), encoding="utf-8")
        tf = Path(tmp) / "detection.test.yml"
        t1 = time.perf_counter()
        write_test_file([o for o, _ in by_name.values()], base, tf)
        fired = first_firing(tf)
        t_prom = time.perf_counter() - t1
    if not fired and not args.cases:
        raise SystemExit("promtool reported no firing alert for any case; has its output format changed?")
    rows = []
    for c, path in built:
        o, rep = by_name[c.name]
        rows.append(dict(name=c.name, truth=c.truth, verdicts={
            "report": rep, "live": o.live,
            "alerts": alert_verdicts(fired, o.node, False), "baseline": alert_verdicts(fired, o.node, True)}))
    results = [s for fam in FAMILIES for det in DETECTORS if (s := score(rows, fam, det))]

    print(f"corpus: {len(built)} cases ({'quick' if args.quick else 'full'}) written in {t_build:.0f} s; "
          f"engine + report {t_obs:.0f} s with {args.workers} workers; promtool {t_prom:.0f} s")
    print(f"\n{'family':10} {'detector':9} {'P':>6} {'R':>6} {'F1':>6} {'TP':>3} {'FP':>3} {'FN':>3} {'TN':>3} "
          f"{'median s':>9} {'max s':>7}")
    for x in results:
        med = "-" if x["median_detect_s"] is None else f"{x['median_detect_s']:.0f}"
        mx = "-" if x["max_detect_s"] is None else f"{x['max_detect_s']:.0f}"
        print(f"{x['family']:10} {x['detector']:9} {x['precision']:6.3f} {x['recall']:6.3f} {x['f1']:6.3f} "
              f"{x['tp']:3d} {x['fp']:3d} {x['fn']:3d} {x['tn']:3d} {med:>9} {mx:>7}")
    print("\nmedian s / max s: time to detect from the labelled onset (live, alerts, baseline).")
    print("\nerrors:")
    for x in results:
        for e in x["errors"]:
            print(f"  {x['family']:9} {x['detector']:8} {e}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "detection.json").write_text(json.dumps(dict(
        quick=args.quick, results=results,
        cases=[dict(name=r["name"], truth=r["truth"].__dict__, verdicts={k: v.__dict__ for k, v in r["verdicts"].items()})
               for r in rows]), indent=1, default=str), encoding="utf-8")
    print(f"\nwrote {out_dir / 'detection.json'}; total {time.perf_counter() - t0:.0f} s")
    if args.causes:
        from bench.cause_matrix import run as cause_matrix
        print("\nstraggler causes:")
        cause_matrix(out_dir, args.quick, args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
