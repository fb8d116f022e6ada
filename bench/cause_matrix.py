"""Straggler-cause accuracy on the labelled cause cases built from real recordings.

    .venv/bin/python bench/cause_matrix.py [--quick] [--workers 2] [--out bench/out] [--only REGEX]
    .venv/bin/python bench/detection.py --causes ...      (the same, after the detection table)

1. Writes the cause cases (bench/lib/corpus/causes.py: the Alibaba PAI job's slow worker
   with the health columns of each cause, its cold-rank variant, the 8xH100
   checkpoint logs, the seed case; each labelled with its cause and whether the log
   carries the evidence for it).
2. For every case, with the real code:
   - report: `gpulse report --input case.csv`, the `cause` of the straggler's
     finding in findings.json (the imbalance finding for the seed case);
   - live:   the log through the exporter's engine (`run_offline` over the replay
             source, what `gpulse serve --source replay` runs) and the real
             collector: the `cause` label of `gpulse_gpu_straggler_cause` for the
             straggler, the one it carried longest while confirmed (cases without
             a straggler, the 4-GPU seed case, have no live verdict).
3. Prints the confusion matrix and per class precision, recall and accuracy per
   detector, and writes bench/out/cause_matrix.json.

Scoring: a case counts under its labelled cause when its log carries the evidence,
else under "unknown". An answer in the case's accepted set is a hit (a case without
the evidence accepts "unknown"; the seed case without clocks also its likely cause);
"unknown" where the evidence was there is a miss, as is no finding at all ("none").
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from multiprocessing import Pool
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "exporter")]     # bench.lib, testing/; gpulse

from bench.lib.corpus.causes import CAUSES, CauseCase, build, expected  # noqa: E402
from bench.lib.verdicts import NONE, finding_cause  # noqa: E402
from gpulse.cli import main as gpulse_main  # noqa: E402
from gpulse.collector import snapshot_families  # noqa: E402
from testing.config import test_config  # noqa: E402
from gpulse.drive import run_offline  # noqa: E402
from gpulse.sources.replay import ReplaySource  # noqa: E402

DETECTORS = ("report", "live")
LIVE_EVERY = 5.0            # seconds of log time between the live gauge reads


def report_cause(c: CauseCase) -> tuple[str, dict]:
    """`gpulse report` on the case's log (the CLI's own entry point, in this worker)."""
    with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
        rc = gpulse_main(["report", "--input", str(c.path), "--out", out, "--quiet"])
        if rc != 0:
            raise SystemExit(f"gpulse report failed on {c.path} (exit {rc})")
        doc = json.loads((Path(out) / "findings.json").read_text(encoding="utf-8"))
    f = next((f for f in doc["findings"] if f["kind"] == ("straggler" if c.gpu else "imbalance")
              and f.get("cause") is not None and (not c.gpu or finding_cause(doc, c.gpu) == f["cause"])), {})
    return finding_cause(doc, c.gpu), {"evidence": f.get("evidence"), "missing": f.get("missing"),
                                        "remedy": f.get("remedy"), "schema": doc.get("schema")}


class LiveCause:
    """The straggler-cause gauge as the exporter serves it, read every LIVE_EVERY
    seconds of log time from the snapshots of a replay (`look`): the cause it carried
    longest for the straggler `gpu`, and every cause it showed (`result`)."""

    def __init__(self, gpu: str) -> None:
        self.gpu, self.last = gpu, None
        self.held: Counter = Counter()
        self.others: Counter = Counter()

    def look(self, snap) -> None:
        if snap.t is None or (self.last is not None and snap.t - self.last < LIVE_EVERY):
            return
        self.last = snap.t
        for fam in snapshot_families(snap):
            if fam.name != "gpulse_gpu_straggler_cause":
                continue
            for s in fam.samples:
                if s.value == 1:
                    (self.held if s.labels.get("gpu") == self.gpu else self.others)[s.labels.get("cause", "")] += 1

    def result(self) -> tuple[str, dict]:
        cause = self.held.most_common(1)[0][0] if self.held else NONE
        return cause, {"reads": dict(self.held), "other_gpus": dict(self.others)}


def live_cause(c: CauseCase) -> tuple[str, dict]:
    """LiveCause of the case's log replayed through the exporter's engine."""
    cfg = test_config(source="replay", replay__file=str(c.path), replay__speed=0, node_name="cause")
    live = LiveCause(c.gpu)
    for _, snap in run_offline(ReplaySource(cfg), cfg):
        live.look(snap)
    return live.result()


def _run(c: CauseCase) -> tuple[str, dict]:
    t0 = time.perf_counter()
    got = {"report": report_cause(c)}
    if c.replay:
        got["live"] = live_cause(c)
    return c.name, {"answers": got, "seconds": time.perf_counter() - t0}


def matrix(cases: list[CauseCase], answers: dict[str, str]) -> dict:
    """Confusion counts {expected: {answer: n}} (a hit counts on the diagonal) and per
    class precision, recall and one-vs-rest accuracy."""
    cols = (*CAUSES, NONE)
    m = {k: {a: 0 for a in cols} for k in CAUSES}
    scored = [c for c in cases if c.name in answers]
    for c in scored:
        want, got = expected(c), answers[c.name]
        m[want][want if got in c.accept else (got if got in cols else NONE)] += 1
    n = len(scored)
    per = {}
    for k in CAUSES:
        tp = m[k][k]
        fn = sum(m[k].values()) - tp
        fp = sum(m[r][k] for r in CAUSES) - tp
        per[k] = {"n": sum(m[k].values()), "tp": tp, "fp": fp, "fn": fn,
                  "precision": tp / (tp + fp) if tp + fp else None,
                  "recall": tp / (tp + fn) if tp + fn else None,
                  "accuracy": (n - fp - fn) / n if n else None}
    return {"matrix": m, "classes": per, "cases": n,
            "overall": sum(m[k][k] for k in CAUSES) / n if n else None}


def _f(x) -> str:
    return "    -" if x is None else f"{x:5.2f}"


def print_matrix(det: str, res: dict) -> None:
    cols = (*CAUSES, NONE)
    short = {"throttling": "thrott", "degraded_hardware": "hw", "more_work": "work", "off_gpu": "offgpu",
             "unknown": "unkn", NONE: "none"}
    print(f"\n{det}: {res['cases']} cases, {res['overall']:.2f} right overall" if res["cases"] else f"\n{det}: no cases")
    print(f"  {'expected / answer':20}" + "".join(f"{short[c]:>7}" for c in cols)
          + f"{'P':>7}{'R':>7}{'acc':>7}")
    for k in CAUSES:
        row, cl = res["matrix"][k], res["classes"][k]
        print(f"  {k:20}" + "".join(f"{row[c]:7d}" for c in cols)
              + f"  {_f(cl['precision'])}  {_f(cl['recall'])}  {_f(cl['accuracy'])}")


def run(out_dir: Path, quick: bool = False, workers: int = 2, only: str = "") -> dict:
    t0 = time.perf_counter()
    cases = [c for c in build(out_dir / "causes", quick) if re.search(only, c.name)]
    t_build = time.perf_counter() - t0
    with Pool(workers) as pool:
        got = dict(pool.map(_run, cases, chunksize=1))
    results = {}
    for det in DETECTORS:
        answers = {name: r["answers"][det][0] for name, r in got.items() if det in r["answers"]}
        results[det] = matrix(cases, answers)
    print(f"cause cases: {len(cases)} ({'quick' if quick else 'full'}) written in {t_build:.0f} s; "
          f"report + replay {time.perf_counter() - t0 - t_build:.0f} s with {workers} workers")
    for det in DETECTORS:
        print_matrix(det, results[det])
    print("\nper case (expected | accepted | report | live):")
    wrong = 0
    for c in cases:
        a = got[c.name]["answers"]
        rep, live = a["report"][0], a.get("live", ("-",))[0]
        mark = "" if rep in c.accept and live in (*c.accept, "-") else "  <-- miss"
        wrong += bool(mark)
        print(f"  {c.name:30} {expected(c):18} {','.join(c.accept):22} {rep:18} {live:18}{mark}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "cause_matrix.json").write_text(json.dumps(dict(
        quick=quick, results=results,
        cases=[dict(name=c.name, cause=c.cause, evidence=c.evidence, accept=list(c.accept), gpu=c.gpu,
                    expected=expected(c), **{d: dict(zip(("answer", "detail"), got[c.name]["answers"][d]))
                                             for d in got[c.name]["answers"]}) for c in cases]),
        indent=1, default=str), encoding="utf-8")
    print(f"\nwrote {out_dir / 'cause_matrix.json'}; {wrong} case(s) missed; total {time.perf_counter() - t0:.0f} s")
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description="straggler-cause confusion matrix on the labelled cause cases")
    ap.add_argument("--quick", action="store_true", help="one log format (a minute or two on 2 cores)")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", default=str(ROOT / "bench" / "out"))
    ap.add_argument("--only", default="", metavar="REGEX", help="only the cases whose name matches (all are written)")
    args = ap.parse_args()
    run(Path(args.out), args.quick, args.workers, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
