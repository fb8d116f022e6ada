"""Detection quality of the shipped sync-stall and straggler alerts.

    .venv/bin/python bench/detection.py [--runs 240] [--seed 1] [--scrape 15,60]

1. Builds a labelled corpus (bench/detection_corpus.py): random seeds, stall lengths
   0.2-5 s, periods 1-60 s, straggler gaps 0-60 %, imbalanced halves, single
   checkpoint pauses, noise; each run a simulated node through the real engine.
2. For each scrape interval writes ONE promtool unit-test file holding every run
   (each its own `node`) and evaluates, with the real promtool:
   - the shipped rules, unchanged (prometheus/rules/gpulse-recording.rules.yml and
     gpulse-training.rules.yml): GpulseSyncStalls, GpulseStragglerGPU;
   - the baseline: the same alerts (thresholds, for:, keep_firing_for: read from the
     shipped file) written over an instantaneous utilisation gauge sampled at the
     scrape interval, as dcgm-exporter data is usually alerted on.
   The first firing time per run comes from the ALERTS series promtool writes while
   it evaluates, read back with a promql_expr_test (promtool prints what it got).
3. Prints precision, recall, F1 and time to fire for each (alert, signal, interval)
   and writes everything to bench/out/detection.json.

Time to fire is reported two ways: from the physical onset of the anomaly, and from
the moment the ground truth first satisfies the alert's condition over its 5 m
window (a windowed mean needs 300 s x threshold / effect to cross the threshold;
that ramp is part of what the alert means, not detection lag). The target
"for: + 2 scrape intervals" is checked against the second.
"""
from __future__ import annotations

import argparse
import json
import math
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
sys.path[:0] = [str(ROOT / "exporter"), str(ROOT / "bench")]

from detection_corpus import (BASELINE_METRIC, DURATION, GAP_THRESHOLD, ONSET,  # noqa: E402
                              STALL_THRESHOLD, Run, make_corpus, simulate)
from gpulse.analysis.coidle import MAX_PENDING, MERGE_RATIO  # noqa: E402

RULES = ROOT / "prometheus" / "rules"
SHIPPED = [RULES / "gpulse-recording.rules.yml", RULES / "gpulse-training.rules.yml"]
WINDOW = 300.0
ALERTS = {  # alert -> (ground truth attribute, baseline alert)
    "GpulseSyncStalls": ("stall_positive", "BaselineSyncStalls"),
    "GpulseStragglerGPU": ("straggler_positive", "BaselineStragglerGPU"),
}


def shipped_holds() -> dict[str, tuple[str, str]]:
    doc = yaml.safe_load((RULES / "gpulse-training.rules.yml").read_text(encoding="utf-8"))
    return {r["alert"]: (r["for"], r.get("keep_firing_for", "0s"))
            for g in doc["groups"] for r in g["rules"] if r.get("alert") in ALERTS}


def baseline_rules() -> dict:
    """GpulseSyncStalls and GpulseStragglerGPU over the instantaneous gauge. Same
    thresholds, guards and hold times; only the signal differs: the share of scrapes
    in which every GPU read idle, and the mean of the scraped utilisation values."""
    holds = shipped_holds()
    u = BASELINE_METRIC
    return {"groups": [{"name": "baseline", "rules": [
        {"record": "node:baseline_coidle:bool", "expr": f"max by (node) ({u}) < bool 5"},
        {"record": "node:baseline_sync_stall:ratio5m", "expr": "avg_over_time(node:baseline_coidle:bool[5m])"},
        # three episodes seen = at least five changes of the 0/1 series
        {"alert": "BaselineSyncStalls",
         "expr": (f"node:baseline_sync_stall:ratio5m > {STALL_THRESHOLD}"
                  " and on (node) gpulse_group_active == 1"
                  " and on (node) changes(node:baseline_coidle:bool[15m]) >= 5"),
         "for": holds["GpulseSyncStalls"][0], "keep_firing_for": holds["GpulseSyncStalls"][1]},
        {"record": "node_gpu:baseline_util:avg5m",
         "expr": f"avg_over_time({u}[5m]) / 100 * on (node) group_left () (gpulse_group_active == 1)"},
        {"record": "node_gpu:baseline_util:peer_gap5m",
         "expr": "node_gpu:baseline_util:avg5m - on (node) group_left () "
                 "quantile by (node) (0.5, node_gpu:baseline_util:avg5m)"},
        {"record": "node_gpu:baseline_util:peer_deviation5m",
         "expr": "node_gpu:baseline_util:peer_gap5m / on (node) group_left () "
                 "clamp_min(1.4826 * quantile by (node) (0.5, abs(node_gpu:baseline_util:peer_gap5m)), 0.02)"},
        {"alert": "BaselineStragglerGPU",
         "expr": (f"node_gpu:baseline_util:peer_gap5m and abs(node_gpu:baseline_util:peer_gap5m) >= {GAP_THRESHOLD}"
                  " and abs(node_gpu:baseline_util:peer_deviation5m) > 3.5"),
         "for": holds["GpulseStragglerGPU"][0], "keep_firing_for": holds["GpulseStragglerGPU"][1]},
    ]}]}


def _fmt(v) -> str:
    return "_" if v is None else repr(round(v, 6))


def write_test_file(runs: list[Run], scrape: int, baseline_path: Path, path: Path) -> None:
    n = round(DURATION / scrape)
    lines = ["rule_files:"] + [f"  - {p}" for p in (*SHIPPED, baseline_path)]
    lines += [f"evaluation_interval: {scrape}s", "tests:", f"  - interval: {scrape}s", "    input_series:"]
    for r in runs:
        for key, col in r.series[scrape].items():
            lines.append(f"      - series: '{key}'")
            lines.append(f"        values: '{' '.join(_fmt(v) for v in col)}'")
    lines.append("    promql_expr_test:")
    for name in [*ALERTS, *(b for _, b in ALERTS.values())]:
        expr = (f'min by (node) (min_over_time(timestamp(ALERTS{{alertname="{name}",alertstate="firing"}})'
                f"[{n * scrape}s:{scrape}s]))")
        lines += [f"      - expr: '{expr}'", f"        eval_time: {n * scrape}s", "        exp_samples: []"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


_GOT = re.compile(r'\{node="(r\d+)"\} ([-+0-9.E]+)')


def first_firing(test_file: Path) -> dict[str, dict[str, float]]:
    """alert -> {node: first firing time (s, promtool's timeline)}.

    Every expectation is empty, so promtool reports each non-empty result as a
    failure and prints it; an alert that never fired prints nothing."""
    r = subprocess.run(["promtool", "test", "rules", str(test_file)], capture_output=True, text=True)
    out = r.stdout + r.stderr
    if "expr:" not in out and r.returncode != 0:
        raise SystemExit(f"promtool failed on {test_file}: {out.strip().splitlines()[-1] if out.strip() else r.returncode}")
    found: dict[str, dict[str, float]] = {}
    current = None
    for line in out.splitlines():
        m = re.search(r'alertname=\\"(\w+)\\"', line)
        if line.strip().startswith("expr:") and m:
            current = m.group(1)
        elif line.strip().startswith("got:") and current:
            found[current] = {node: float(v) for node, v in _GOT.findall(line)}
    return found


def condition_onset(run: Run, alert: str) -> float | None:
    """When the ground truth first meets the alert's condition over its window."""
    if alert == "GpulseSyncStalls" and run.stall_positive:
        f = run.stall_fraction
        ramp = WINDOW * STALL_THRESHOLD / f
        # recurring: three episodes counted (the exporter counts one up to
        # MAX_PENDING after it ends; stalls with work gaps under MERGE_RATIO of
        # their length merge and are never counted), or stalled over half of 15 m
        merged = (1 - f) < MERGE_RATIO * f
        episodes = math.inf if merged else 3 * run.params["period"] + MAX_PENDING
        sustained = 3 * WINDOW * 0.5 / f if f > 0.5 else math.inf
        return ONSET + max(ramp, min(episodes, sustained))
    if alert == "GpulseStragglerGPU" and run.straggler_positive:
        return ONSET + WINDOW * GAP_THRESHOLD / abs(run.gap)
    return None


def score(runs: list[Run], fired: dict[str, float], truth_attr: str, alert: str, scrape: int, hold: float) -> dict:
    tp = fp = fn = tn = early = 0
    from_onset, from_condition, within = [], [], 0
    errors, detections = [], []
    for r in runs:
        truth = getattr(r, truth_attr)
        t = fired.get(r.node)
        t = None if t is None else t + scrape        # promtool's t=0 is the first scrape
        if t is not None and t < ONSET:
            early += 1
        if truth and t is not None:
            tp += 1
            from_onset.append(t - ONSET)
            lag = t - condition_onset(r, alert)
            from_condition.append(lag)
            within += lag <= hold + 2 * scrape
            detections.append((r.node, round(t - ONSET), round(lag)))
        elif truth:
            fn += 1
            errors.append(("missed", r.node, r.kind, r.params, r.stall_fraction, r.gap))
        elif t is not None:
            fp += 1
            errors.append(("false alarm", r.node, r.kind, r.params, r.stall_fraction, r.gap))
        else:
            tn += 1
    p = tp / (tp + fp) if tp + fp else float("nan")
    rc = tp / (tp + fn) if tp + fn else float("nan")
    f1 = 2 * p * rc / (p + rc) if p + rc else float("nan")
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    return dict(tp=tp, fp=fp, fn=fn, tn=tn, precision=p, recall=rc, f1=f1, fired_before_onset=early,
                median_s_from_onset=med(from_onset), median_s_from_condition=med(from_condition),
                share_within_target=within / tp if tp else float("nan"), errors=errors,
                detections=detections)


def _sim(args):
    run, scrapes = args
    return simulate(run, scrapes)


def _seconds(d: str) -> float:
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in re.findall(r"(\d+)([hms])", d))


def main() -> int:
    ap = argparse.ArgumentParser(description="detection quality of the shipped stall/straggler alerts")
    ap.add_argument("--runs", type=int, default=240)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scrape", default="15,60", help="scrape intervals in seconds, comma-separated")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out"))
    args = ap.parse_args()
    scrapes = tuple(int(s) for s in args.scrape.split(","))
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    corpus = make_corpus(args.runs, args.seed)
    with Pool(args.workers) as pool:
        runs = pool.map(_sim, [(r, scrapes) for r in corpus], chunksize=4)
    t_sim = time.perf_counter() - t0
    kinds = {k: sum(r.kind == k for r in runs) for k in sorted({r.kind for r in runs})}
    print(f"corpus: {len(runs)} runs {kinds}; stall positives {sum(r.stall_positive for r in runs)}, "
          f"straggler positives {sum(r.straggler_positive for r in runs)}; simulated in {t_sim:.0f} s "
          f"({DURATION:.0f} s each, anomaly from {ONSET:.0f} s)")

    holds = {a: _seconds(f) for a, (f, _) in shipped_holds().items()}
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline.rules.yml"
        base.write_text(yaml.safe_dump(baseline_rules(), sort_keys=False), encoding="utf-8")
        for scrape in scrapes:
            t1 = time.perf_counter()
            tf = Path(tmp) / f"detection-{scrape}s.test.yml"
            write_test_file(runs, scrape, base, tf)
            fired = first_firing(tf)
            if not any(fired.values()):
                raise SystemExit(f"promtool reported no firing alert for any run at {scrape} s; "
                                 "has its output format changed?")
            t_eval = time.perf_counter() - t1
            for alert, (truth, baseline) in ALERTS.items():
                for signal, name in (("gpulse counters", alert), ("baseline gauge", baseline)):
                    s = score(runs, fired.get(name, {}), truth, alert, scrape, holds[alert])
                    results.append(dict(alert=alert, signal=signal, scrape_s=scrape, **s))
            print(f"promtool evaluated {len(runs)} runs at {scrape} s scrapes in {t_eval:.0f} s")

    print()
    print(f"{'alert':20} {'signal':16} {'scrape':>6} {'P':>6} {'R':>6} {'F1':>6} "
          f"{'TP':>4} {'FP':>4} {'FN':>4} {'early':>5} {'t_onset':>8} {'t_cond':>7} {'<=for+2S':>8}")
    for x in results:
        print(f"{x['alert']:20} {x['signal']:16} {x['scrape_s']:>5}s {x['precision']:6.3f} {x['recall']:6.3f} "
              f"{x['f1']:6.3f} {x['tp']:4d} {x['fp']:4d} {x['fn']:4d} {x['fired_before_onset']:5d} "
              f"{x['median_s_from_onset']:7.0f}s {x['median_s_from_condition']:6.0f}s {x['share_within_target']:8.2f}")
    print("\nt_onset: median time from anomaly onset to firing; t_cond: from the moment the ground truth "
          "met the condition over the 5 m window; <=for+2S: share of detections within for: + 2 scrapes of that.")
    for alert in ALERTS:
        for scrape in scrapes:
            g, b = [x for x in results if x["alert"] == alert and x["scrape_s"] == scrape]
            print(f"{alert} @ {scrape} s: F1 gpulse / baseline = {g['f1']:.3f} / {b['f1']:.3f} "
                  f"(ratio {g['f1'] / b['f1'] if b['f1'] else float('inf'):.2f}); recall {g['recall']:.3f} / {b['recall']:.3f}")
    errs = [e for x in results if x["signal"] == "gpulse counters" for e in x["errors"]]
    if errs:
        print("\ngpulse errors (kind, node, scenario, params, stall fraction, gap):")
        for e in errs:
            print("  ", e)
    (out_dir / "detection.json").write_text(json.dumps(dict(
        runs=len(runs), seed=args.seed, duration_s=DURATION, onset_s=ONSET, results=results,
        corpus=[dict(node=r.node, kind=r.kind, params=r.params, stall_fraction=r.stall_fraction, gap=r.gap,
                     stall_positive=r.stall_positive, straggler_positive=r.straggler_positive) for r in runs],
    ), indent=1, default=str), encoding="utf-8")
    print(f"\nwrote {out_dir / 'detection.json'}; total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
