#!/usr/bin/env python3
"""Stall visibility: do the dashboards show the stalls of real runs, at every zoom?

    .venv/bin/python bench/stall_visibility.py                  # ckpt50, ckpt1000, ckpt1 at 15 s
    .venv/bin/python bench/stall_visibility.py --scrape-interval 30s --traces ckpt50

For each real 8xH100 trace of ../shared/data: `gpulse export` it (the real CLI) at the
scrape interval, backfill it with `promtool tsdb create-blocks-from openmetrics`,
start the Debian `prometheus` on the blocks, backfill the shipped recording rules with
`promtool tsdb create-blocks-from rules` (one pass per rule level), then send the
cluster dashboard's "GPU heatmap" and "Sync stalls" targets the way Grafana would for a
1,600 px panel (variables filled: the trace's node, every colouring, both cell
sources) at 15 m, 1 h and whole-run ranges ending at the end of the run. Against the
stall episodes the engine found in the same replay it prints:

- dark columns: the share of stall episodes lasting at least 2 scrape intervals that
  have a column in which every GPU of the group is at most mid-tone (work score
  <= idle_ratio + SPIN_WEIGHT x (1 - idle_ratio): no GPU more than idle-level active,
  the rest at most spinning) in a cell inside the episode;
- sub-scrape stall time in the strip: of the stalled time in episodes shorter than one
  scrape interval, the share the strip shows (strip share x cell length, at most the
  episode time in the cell), over cells that touch no longer episode.

Target >= 95 % for both wherever a cell is no longer than the stall.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import requests

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "grafana"))
sys.path.insert(0, str(ROOT / "exporter"))
sys.path.insert(0, str(ROOT))          # bench.lib, testing/

from bench.dashboards_scale import Prometheus, backfill_rules, need  # noqa: E402
from gpulse.analysis.thresholds import value as threshold  # noqa: E402
from gpulse.drive import run_offline  # noqa: E402
from gpulse.export import replay_config  # noqa: E402
from gpulse.palette import SPIN_WEIGHT  # noqa: E402
from testing.grafana_queries import (choices, fixed_values, format_value, panel_queries,  # noqa: E402
                                     parse_duration_ms, substitute, variable_defaults)

DATA = ROOT.parent / "shared" / "data" / "traces" / "h100-8gpu"
DASHBOARD = ROOT / "grafana" / "dashboards" / "gpulse-cluster-heatmap.json"
HEATMAP, STRIP = "GPU heatmap", "Sync stalls"
WIDTH_PX = 1600
RANGES = ("15m", "1h", "run")
# a cell no brighter than this for every GPU is a stall column: no GPU more than
# idle-level active, the rest at most spinning
DARK = threshold("idle_ratio") + SPIN_WEIGHT * (1 - threshold("idle_ratio"))


@dataclass(frozen=True)
class Episode:
    start: float
    end: float
    stalled: float


def episodes(log: Path, node: str) -> tuple[list[Episode], tuple[float, float]]:
    """The stall episodes of the replay (the engine's own view of the truth), and
    the recorded start and end of the log."""
    from gpulse.sources.replay import ReplaySource

    cfg = replay_config(str(log), node=node)
    source = ReplaySource(cfg)
    found, counted, snap = [], {}, None
    for _, snap in run_offline(source, cfg):
        for gv in snap.groups:
            # the episodes counted since the last tick: the snapshot keeps only the latest
            # few hundred, the last `pending` of them not final yet
            new = gv.stalls_total - counted.get(gv.workload, 0)
            if new > 0:
                found += gv.episodes[:len(gv.episodes) - gv.pending][-new:]
            counted[gv.workload] = gv.stalls_total
    if snap is not None:    # what the end of the record makes final
        found += [e for gv in snap.groups for e in gv.ending]
    eps = [Episode(e.start, e.start + e.duration, e.stalled) for e in found]
    return sorted(eps, key=lambda e: e.start), (source.run.start, source.run.end)


def export_and_load(log: Path, node: str, scrape: str, data: Path, work: Path) -> None:
    om = work / f"{node}.om"
    with om.open("wb") as out:
        p = subprocess.run([sys.executable, "-m", "gpulse", "export", "--input", str(log), "--scrape-interval",
                            scrape, "--node", node], stdout=out, stderr=subprocess.PIPE,
                           env={"PYTHONPATH": str(ROOT / "exporter"), "PATH": "/usr/bin:/bin"})
    if p.returncode != 0:
        raise SystemExit(f"stall_visibility: gpulse export failed: {p.stderr.decode().strip()}")
    p = subprocess.run([need("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"stall_visibility: promtool failed: {p.stderr.strip()[-500:]}")


def grafana_request(dash: dict, title: str, node: str, range_s: float, scrape: str, **choice: str):
    defs = variable_defaults(dash)
    values = {**fixed_values(dash), **{k: format_value(v, "$__all") for k, v in defs.items() if v["type"] == "query"}}
    values.update(node=format_value(defs["node"], node), **choice)
    q = next(q for q in panel_queries(dash) if q.panel == title)
    timing = q.timing(int(range_s * 1000), width_px=WIDTH_PX, scrape_interval=scrape)
    return substitute(q.expr, timing, values), timing.step_ms / 1000


def query_range(url: str, expr: str, start: float, end: float, step: float) -> list:
    # Grafana aligns the range to whole steps
    start, end = start // step * step, -(-end // step) * step
    r = requests.post(url + "/api/v1/query_range", data=dict(query=expr, start=start, end=end, step=step),
                      timeout=120).json()
    if r["status"] != "success":
        raise SystemExit(f"stall_visibility: {r.get('error')}")
    return r["data"]["result"]


def dark_share(cells: dict[float, list[float]], step: float, long_eps: list[Episode], gpus: int) -> float | None:
    """Share of the long episodes with a cell inside them where every GPU is dark."""
    if not long_eps or not gpus:
        return None
    seen = 0
    for e in long_eps:
        inside = [t for t in cells if e.start <= t - step and t <= e.end]
        if any(len(cells[t]) == gpus and max(cells[t]) <= DARK + 1e-9 for t in inside):
            seen += 1
    return seen / len(long_eps)


def strip_share(strip: dict[float, float], step: float, short_eps: list[Episode],
                other_eps: list[Episode]) -> tuple[float | None, float]:
    """Share of the short episodes' stalled time the strip shows, and that time.

    Each short episode claims the cells its span touches plus the next one (the
    stall counter trails the samples by up to one analysis tick, so a stall at
    a cell's end may be counted in the next cell); episodes claiming a common
    cell are judged together: shown = min(their stalled time, the strip's
    stalled seconds over their cells). Cells that an episode of a scrape
    interval or longer touches are left out: there the strip is all stall anyway."""
    times = sorted(strip)

    def claimed(e: Episode) -> set[float]:
        cells = [t for t in times if t - step < e.end and t >= e.start]
        if not cells:
            return set()
        nxt = [t for t in times if t > cells[-1]][:1]
        return set(cells) | set(nxt)

    busy = set().union(*(claimed(e) for e in other_eps)) if other_eps else set()
    clusters: list[tuple[set[float], float]] = []
    for e in short_eps:
        cells = claimed(e)
        if not cells or cells & busy:
            continue
        merged, stalled = set(cells), e.stalled
        for c in [c for c in clusters if c[0] & merged]:
            clusters.remove(c)
            merged |= c[0]
            stalled += c[1]
        clusters.append((merged, stalled))
    total = sum(st for _, st in clusters)
    if total <= 0:
        return None, 0.0
    shown = sum(min(st, sum(strip.get(t, 0.0) * step for t in cells)) for cells, st in clusters)
    return shown / total, total


def measure(traces: list[Path], scrape: str, work: Path, ranges=RANGES, metrics=None, cells_modes=None,
            progress=print) -> list[dict]:
    scrape_s = parse_duration_ms(scrape) / 1000
    dash = json.loads(DASHBOARD.read_text())
    metrics = metrics or choices(dash, "metric")
    cells_modes = cells_modes or choices(dash, "cells")
    data = work / "data"
    runs = []
    for log in traces:
        node = "h100-" + log.stem
        t0 = time.monotonic()
        export_and_load(log, node, scrape, data, work)
        eps, (start, end) = episodes(log, node)
        runs.append((log, node, eps, start, end))
        progress(f"  {log.name}: exported and backfilled in {time.monotonic() - t0:.1f} s, "
                 f"{len(eps)} stall episodes")
    prom = Prometheus(data, work, retention="100y")
    prom.start()
    try:
        t0 = time.monotonic()
        backfill_rules(prom, int(min(r[3] for r in runs)) - 600, int(max(r[4] for r in runs)) + 600, work)
        progress(f"  recording rules backfilled in {time.monotonic() - t0:.0f} s")
        out = []
        for log, node, eps, start, end in runs:
            long_eps = [e for e in eps if e.end - e.start >= 2 * scrape_s]
            short_eps = [e for e in eps if e.end - e.start < scrape_s]
            other_eps = [e for e in eps if e.end - e.start >= scrape_s]
            for rng in ranges:
                span = end - start if rng == "run" else parse_duration_ms(rng) / 1000
                q_start = start if rng == "run" else end - span
                for cells in cells_modes:
                    expr, step = grafana_request(dash, STRIP, node, span, scrape, cells=cells)
                    strip = {float(t): float(v) for s in query_range(prom.url, expr, q_start, end, step)
                             for t, v in s["values"]}
                    in_range = [e for e in long_eps if e.start >= q_start]
                    row = dict(trace=log.stem, range=rng, cells=cells, step=step, long=len(in_range),
                               short=len(short_eps))
                    row["strip"], row["short_s"] = strip_share(strip, step, short_eps, other_eps)
                    for metric in metrics:
                        expr, step = grafana_request(dash, HEATMAP, node, span, scrape, metric=metric,
                                                     cells=cells, order="natural")
                        cols: dict[float, list[float]] = {}
                        series = query_range(prom.url, expr, q_start, end, step)
                        for s in series:
                            for t, v in s["values"]:
                                cols.setdefault(float(t), []).append(float(v))
                        row[f"dark {metric}"] = dark_share(cols, step, in_range, len(series))
                    out.append(row)
        return out
    finally:
        prom.stop()


def pct(x: float | None) -> str:
    return "   -  " if x is None else f"{100 * x:5.1f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default="ckpt50,ckpt1000,ckpt1")
    ap.add_argument("--scrape-interval", default="15s")
    args = ap.parse_args(argv)
    traces = [DATA / f"{name}.csv" for name in args.traces.split(",")]
    missing = [str(t) for t in traces if not t.is_file()]
    if missing:
        raise SystemExit(f"stall_visibility: missing {', '.join(missing)} (see ../shared/data/README.md)")
    work = Path(tempfile.mkdtemp(prefix="gpulse-stall-visibility-"))
    try:
        print(f"stall visibility at a {args.scrape_interval} scrape, {WIDTH_PX} px panels, dark = work score "
              f"<= {DARK:.2f}")
        rows = measure(traces, args.scrape_interval, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    metrics = [k for k in rows[0] if k.startswith("dark ")]
    head = f"{'trace':<10}{'range':<6}{'cells from':<15}{'cell':>6}{'long':>6}" + "".join(
        f"{k.replace('dark ', 'dark:'):>14}" for k in metrics) + f"{'short':>7}{'short s':>9}{'in strip':>10}"
    print(head)
    for r in rows:
        print(f"{r['trace']:<10}{r['range']:<6}{r['cells']:<15}{r['step']:>5g}s{r['long']:>6}"
              + "".join(f"{pct(r[k]):>14}" for k in metrics)
              + f"{r['short']:>7}{r['short_s']:>8.1f}s{pct(r['strip']):>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
