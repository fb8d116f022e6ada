"""One corpus case (bench/lib/corpus) through every detector but promtool.

`observe(case_name, path, node)` replays the log through the real engine
(`gpulse.drive.run_offline` over `ReplaySource`, what `gpulse serve --source replay`
runs) and keeps, per analysis tick, what the live gauges say, and at every scrape
instant what Prometheus would scrape:

- the exporter's series the shipped rules read, rendered by the real collector
  (`gpulse.collector.snapshot_families`), labelled with the case's own `node`;
- the baseline signal: the utilisation of each GPU's latest log row at the scrape
  instant, as an instantaneous gauge (`DCGM_FI_DEV_GPU_UTIL` alerted on directly).

`report_verdict(path)` runs `gpulse report` on the log and reads findings.json.

Every verdict maps onto the four families of the corpus labels: stall (recurring sync
stalls costing >= stall_page_ratio), rhythm (their period), straggler (which GPUs),
imbalance. Thresholds come from gpulse.analysis.thresholds.
"""
from __future__ import annotations

import bisect
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "exporter"), str(ROOT)]   # gpulse, testing/

from bench.lib.verdicts import series_key  # noqa: E402
from gpulse.analysis.thresholds import value  # noqa: E402
from gpulse.collector import snapshot_families  # noqa: E402
from testing.config import test_config  # noqa: E402
from gpulse.drive import run_offline  # noqa: E402
from gpulse.sources.recorded import read_log  # noqa: E402
from gpulse.sources.replay import ReplaySource  # noqa: E402

SCRAPE = 15
KEEP = {
    "gpulse_gpu_busy_seconds_total", "gpulse_gpu_active_seconds_total", "gpulse_gpu_sampled_seconds_total",
    "gpulse_group_active", "gpulse_group_sync_stall_seconds_total", "gpulse_group_sync_stalls_total",
    "gpulse_group_sampled_seconds_total", "gpulse_group_stall_period_seconds",
    "gpulse_gpu_spin_wait_seconds_total", "gpulse_group_lost_seconds_total",
}
BASELINE_METRIC = "DCGM_FI_DEV_GPU_UTIL"
PERSIST = 60.0          # a live gauge verdict must hold this long (seconds of ticks)
RHYTHM_TOLERANCE = 0.15


@dataclass
class Verdict:
    stall: bool = False
    stall_at: float | None = None            # seconds after the log's first row
    period: float | None = None
    stragglers: dict[str, float] = field(default_factory=dict)   # gpu -> first seen
    imbalance: bool = False
    imbalance_at: float | None = None


@dataclass
class Observed:
    node: str
    duration: float
    live: Verdict
    series: dict[str, list]                   # series text -> value per scrape (None = absent)
    scrapes: int


class _Persist:
    """First time a condition has held for PERSIST seconds in a row."""

    def __init__(self):
        self.since: dict[str, float] = {}
        self.first: dict[str, float] = {}

    def see(self, key: str, cond: bool, t: float) -> None:
        if not cond:
            self.since.pop(key, None)
            return
        s = self.since.setdefault(key, t)
        if t - s >= PERSIST and key not in self.first:
            self.first[key] = t


def observe(path: str, node: str) -> Observed:
    cfg = test_config(source="replay", replay__file=str(path), replay__speed=0, node_name=node)
    src = ReplaySource(cfg)
    ratio, episodes = value("stall_page_ratio"), value("stall_recurring_episodes")
    imb_lim, imb_min = value("imbalance_alert_ratio"), value("imbalance_min_active_ratio")
    hist: list[tuple[float, float, float, int]] = []     # t, stall s, holding s, episodes
    periods: list[float] = []
    pers = _Persist()
    confirmed: dict[str, float] = {}     # gpu -> first tick gpulse_gpu_straggler read 1
    stall_at = None
    series: dict[str, list] = {}
    n = 0
    start = None
    rows_t: dict[str, list[float]] = {}
    rows_u: dict[str, list[float]] = {}
    for _, snap in run_offline(src, cfg):
        if start is None:
            # the replay streams its log; the rows for the gauge baseline are read apart
            whole = read_log(str(path))
            start = whole.start
            for r in whole.records:
                rows_t.setdefault(r.gpu, []).append(r.t)
                rows_u.setdefault(r.gpu, []).append(100.0 * (r.sample.util or 0.0))
        t = (snap.t or start) - start
        if not snap.groups:
            continue
        g = snap.groups[0]
        # live: the exporter's exact counters, as its page and the rules read them
        hist.append((t, g.stall_seconds, g.holding_seconds, g.stalls_total))
        j2 = bisect.bisect_left([h[0] for h in hist[-400:]], t - 120.0) + max(0, len(hist) - 400)
        j10 = bisect.bisect_left([h[0] for h in hist[-1200:]], t - 600.0) + max(0, len(hist) - 1200)
        a, b = hist[j2], hist[-1]
        held = b[2] - a[2]
        if (stall_at is None and g.holding and held > 0 and (b[1] - a[1]) / held >= ratio
                and b[3] - hist[j10][3] >= episodes):
            stall_at = t
        # like every live gauge verdict here, the period gauge must hold PERSIST seconds
        pers.see("period", g.stall_period is not None, t)
        if g.stall_period is not None and t - pers.since["period"] >= PERSIST:
            periods.append(g.stall_period)
        for v in snap.gpus:
            # the exporter's own confirmation (gpulse_gpu_straggler), which already persists
            if v.straggler is not None and g.holding:
                confirmed.setdefault(v.info.gpu, t)
        acts = [v.active_ratio for v in snap.gpus if v.active_ratio is not None]
        pers.see("imbalance", g.holding and bool(acts) and max(acts) > imb_min
                 and (g.imbalance or 0.0) > imb_lim and not g.imbalance_explained, t)
        # a scrape every SCRAPE seconds of the log's own time
        if t + 1e-6 >= (n + 1) * SCRAPE:
            vals: dict[str, float] = {}
            for fam in snapshot_families(snap):
                for smp in fam.samples:
                    if smp.name in KEEP:
                        vals[series_key(smp.name, smp.labels)] = smp.value
            for gpu, ts in rows_t.items():
                k = bisect.bisect_right(ts, (snap.t or start)) - 1
                if k >= 0:
                    vals[series_key(BASELINE_METRIC, {"node": node, "gpu": gpu})] = rows_u[gpu][k]
            for key, val in vals.items():
                col = series.setdefault(key, [None] * n)
                col.extend([None] * (n - len(col)))
                col.append(val)
            n += 1
    for col in series.values():
        col.extend([None] * (n - len(col)))
    live = Verdict(stall=stall_at is not None, stall_at=stall_at,
                   period=sorted(periods)[len(periods) // 2] if periods else None,
                   stragglers=confirmed,
                   imbalance="imbalance" in pers.first, imbalance_at=pers.first.get("imbalance"))
    return Observed(node, hist[-1][0] if hist else 0.0, live, series, n)


def report_doc(*args: str) -> dict:
    """findings.json of `gpulse report ARGS` (e.g. --input LOG, or --prometheus URL ...),
    run as its own process on this tree."""
    with tempfile.TemporaryDirectory() as out:
        r = subprocess.run([sys.executable, "-m", "gpulse", "report", *args, "--out", out, "--quiet"],
                           capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "exporter"), "PATH": "/usr/bin:/bin"})
        if r.returncode != 0:
            raise SystemExit(f"gpulse report failed on {' '.join(args)}: "
                             f"{(r.stderr or r.stdout).strip().splitlines()[-1:]}")
        return json.loads((Path(out) / "findings.json").read_text(encoding="utf-8"))


def report_verdict(path: str) -> Verdict:
    """`gpulse report` on the log: recurring stall patterns, the headline period, the
    stragglers and the imbalance finding of findings.json."""
    doc = report_doc("--input", str(path))
    work = doc["run"]["work_seconds"] or 0.0
    ratio = value("stall_page_ratio")
    recurring = [p for p in doc["stall_patterns"] if p["count"] >= value("stall_recurring_episodes")]
    # over the whole work, or over the stretch a pattern covers (a pattern inside a long run)
    stall = work > 0 and (sum(p["stalled_seconds"] for p in recurring) / work >= ratio
                          or any((p["span_share"] or 0.0) >= ratio for p in recurring))
    kinds = {f["kind"] for f in doc["findings"]}
    return Verdict(stall=stall,
                   period=doc["stall_period_seconds"],
                   stragglers={str(s["gpu"]): 0.0 for s in doc["stragglers"]},
                   imbalance="imbalance" in kinds)
