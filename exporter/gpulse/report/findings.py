"""From a Recording to findings in plain words, each with its remedy.

Everything measured comes from the engine (stall episodes, per-tick integrals, peer
deviations, imbalance); this module decides what a whole run *means*:

The verdicts themselves (what is work, a straggler, a rhythm) are the detection
model's — analysis.verdict, analysis.period, analysis.coidle — with the numbers of
analysis/thresholds.py, the same the live exporter and its page use.

Phases of a peer group
    A *segment* is a stretch in which the group held a workload (memory allocated or
    a process attached). Inside it, *work* runs from the first to the last stretch of
    at least work_sustain_seconds working ticks (analysis.verdict: some GPU non-idle
    for ≥ work_busy_ratio of the tick). Before that
    is *start-up* (loading, compiling, NCCL set-up), after it the *exit*. Between
    segments the GPUs held nothing: a *no-job gap* (crash and restart, requeue), or a
    *no-data gap* when nothing was recorded. Only work time can hold sync stalls, so
    start-up and restarts are never reported as stall problems. A record that ends
    inside a stall of the running job (an open episode: memory still held on every GPU,
    analysis.coidle) has no exit: its work runs to the end of the record.

Stall episodes
    The engine's episodes (every GPU of the group inactive at once, ≥ --min-stall,
    nearby stretches already merged by the StallTracker) that start inside work. For
    each episode spanning a whole tick, members busy ≥ work_busy_ratio during it were
    spin-waiting and the others were off the GPU: the rank(s) everybody waited for.

Recurrence
    Episodes of similar length (within stall_family_factor) form a pattern, so
    frequent short stalls and rare long checkpoints each get their own rhythm. Its
    period is analysis.stall_period over the pattern's episodes in each segment
    (harmonic-aware interval clustering: cycles swallowed by a long stall do not hide
    the rhythm). The headline period is the recurring pattern with the most episodes.

Stragglers
    The engine's per-tick cost to the peers and peer deviation, judged by
    analysis.verdict.deviating, the same test the live page and the exporter's
    verdict use. A GPU deviating the same
    way for ≥ straggler_persistence_ratio of the work ticks is a straggler of the whole
    run; one deviating for ≥ straggler_min_span_seconds in a row is a straggler for
    that span. "busier": it computes while peers wait; "idler": its rank is busy
    elsewhere while peers spin-wait for it. Its figures are over its spans.

One cause, one finding
    An idle straggler and the stall patterns in which it is the rank off the GPU are
    the same cause seen twice (rank 0 checkpointing while the others spin-wait):
    they make one finding, the straggler's, naming the patterns, with one remedy.

Spans
    Every finding says when: `spans`, a list of {start, end} in the input's own time
    (Unix seconds when it recorded a clock).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from ..analysis import Episode, imbalance as imbalance_of, load_balance, peer_deviation, stall_period
from ..analysis.period import families
from ..analysis.thresholds import value
from ..analysis.verdict import deviating, imbalance_explained, is_working, peer_wait, straggler_spans, work_runs
from .clock import clock_of
from .collect import GpuTrack, GroupTrack, Recording

WORK_BUSY = value("work_busy_ratio")
WORK_SUSTAIN = value("work_sustain_seconds")
SPIN_WAITING = value("spin_wait_share_ratio")
STALL_NOTABLE = value("stall_notable_ratio")
IMBALANCE = value("imbalance_alert_ratio")
MISSING_MIN = value("missing_min_seconds")
SCHEMA_ID = "gpulse-findings/3"


@dataclass
class Span:
    kind: str               # startup, work, exit, held_idle, no_job, no_data
    a: int                  # first tick
    b: int                  # last tick (inclusive)
    workload: str = ""
    restart: bool = False   # a no_job gap between two segments: the job exited and came back


@dataclass
class Stall:
    """One of the engine's stall episodes, inside the work of its group's segment
    `segment`, with who waited: the members spin-waiting and those off the GPU."""
    episode: Episode
    workload: str
    segment: int
    gpus: list[str]
    waiting: list[str] = field(default_factory=list)
    off: list[str] = field(default_factory=list)

    @property
    def start(self) -> float:
        return self.episode.start

    @property
    def duration(self) -> float:
        return self.episode.duration

    @property
    def end(self) -> float:
        return self.episode.start + self.episode.duration

    @property
    def stalled(self) -> float:
        return self.episode.stalled

    @property
    def open(self) -> bool:
        """Cut by the end of the record, not ended by work (analysis.coidle)."""
        return self.episode.open


@dataclass
class Finding:
    kind: str
    severity: str           # high, medium, info
    text: str
    remedy: str = ""
    spans: list[tuple[float, float]] = field(default_factory=list)   # (start, end) in input time
    cause: Any = None       # analysis.cause.Verdict of a straggler or imbalance finding


def _nanmean(xs: list[float]) -> float:
    v = [x for x in xs if not math.isnan(x)]
    return sum(v) / len(v) if v else math.nan


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _secs(x: float) -> str:
    if x >= 600:
        return f"{x / 60:.0f} min" if x < 5400 else f"{x / 3600:.1f} h"
    return f"{x:.0f} s" if x >= 10 else f"{x:.1f} s"


class Analysis:
    """All findings of one Recording; `as_json()` is findings.json."""

    def __init__(self, rec: Recording):
        self.rec = rec
        self.iv = rec.interval
        self.t0 = (rec.times[0] - self.iv) if rec.ticks else 0.0
        self.spans: list[Span] = []
        self.work_ticks: dict[str, list[int]] = {}
        self.episodes: list[Stall] = []
        self.patterns: list[dict[str, Any]] = []
        self.stragglers: list[dict[str, Any]] = []
        self.gpu_stats: dict[str, dict[str, float]] = {}
        self.findings: list[Finding] = []
        self.imbalance: dict[str, Any] = {}
        self.straggler_nodes: list[dict[str, Any]] = []
        for gr in rec.groups.values():
            self._group(gr)
        self._gpu_fractions()
        self._stragglers()
        self._straggler_nodes()
        self._imbalance()
        self._patterns()
        self.lost = self._lost()
        self._words()
        self.lost_headline = self._lost_headline(self.lost)

    # ------------------------------------------------------------ time helpers

    def tick_start(self, i: int) -> float:
        return self.rec.times[i] - self.iv

    def tick_end(self, i: int) -> float:
        return self.rec.times[i]

    def label(self, key: str) -> str:
        return self.rec.name(self.rec.gpus[key]) if key in self.rec.gpus else f"GPU {key}"

    def labels(self, keys: list[str]) -> str:
        """'GPU 0', 'GPUs 1–7', 'GPUs 0, 2 and 5'; per node when there are several."""
        by_node: dict[str, list[int | str]] = {}
        for k in keys:
            g = self.rec.gpus.get(k)
            node, gpu = (g.node, g.gpu) if g else ("", k)
            by_node.setdefault(node, []).append(int(gpu) if gpu.isdigit() else gpu)
        multi = self.rec.multi_node
        parts = []
        for node, ids in by_node.items():
            nums = sorted(i for i in ids if isinstance(i, int))
            runs: list[str] = []
            j = 0
            while j < len(nums):
                k = j
                while k + 1 < len(nums) and nums[k + 1] == nums[k] + 1:
                    k += 1
                if k - j >= 2:
                    runs.append(f"{nums[j]}–{nums[k]}")
                else:
                    runs += [str(n) for n in nums[j:k + 1]]
                j = k + 1
            runs += [str(i) for i in ids if not isinstance(i, int)]
            word = "GPU" if len(ids) == 1 else "GPUs"
            text = f"{word} " + (", ".join(runs[:-1]) + " and " + runs[-1] if len(runs) > 1 else runs[0])
            parts.append(f"{node} {text}" if multi and node else text)
        return "; ".join(parts)

    # ------------------------------------------------------------ phases

    def _group(self, gr: GroupTrack) -> None:
        rec = self.rec
        members = [rec.gpus[k] for k in gr.gpus if k in rec.gpus]
        n = rec.ticks
        covered = [any(g.sampled[i] > 0 for g in members) for i in range(n)]
        working = [is_working(max((1.0 - g.idle[i] / g.sampled[i] for g in members if g.sampled[i] > 0),
                                  default=0.0)) for i in range(n)]
        segments: list[tuple[int, int]] = []
        i = 0
        while i < n:
            if gr.holding[i]:
                j = i
                while j + 1 < n and gr.holding[j + 1]:
                    j += 1
                segments.append((i, j))
                i = j + 1
            else:
                i += 1
        # a stall the end of the record cut (analysis.coidle, End of a log) belongs to
        # the work it interrupted, however idle its ticks read
        cut = gr.episodes[-1] if gr.episodes and gr.episodes[-1].open else None
        work: list[int] = []
        seg_work: list[tuple[int, int] | None] = []
        prev_end = -1
        for si, (a, b) in enumerate(segments):
            if a > prev_end + 1 and prev_end >= 0:
                self._gap(prev_end + 1, a - 1, covered, gr.workload, restart=True)
            prev_end = b
            runs = [(a + x, a + y) for x, y in work_runs(working[a:b + 1], self.iv)]
            if not runs:
                self.spans.append(Span("held_idle", a, b, gr.workload))
                seg_work.append(None)
                continue
            ws, we = runs[0][0], runs[-1][1]
            if b == n - 1 and cut is not None and cut.start >= self.tick_start(ws):
                we = b      # the record ends inside a stall of the running job: no exit seen
            if ws > a:
                self.spans.append(Span("startup", a, ws - 1, gr.workload))
            self.spans.append(Span("work", ws, we, gr.workload))
            if we < b:
                self.spans.append(Span("exit", we + 1, b, gr.workload))
            work.extend(range(ws, we + 1))
            seg_work.append((ws, we))
        if segments and segments[0][0] > 0:
            self._gap(0, segments[0][0] - 1, covered, gr.workload, restart=False)
        if segments and segments[-1][1] < n - 1:
            self._gap(segments[-1][1] + 1, n - 1, covered, gr.workload, restart=False)
        self.work_ticks[gr.workload] = work
        self._stall_episodes(gr, members, seg_work)

    def _gap(self, a: int, b: int, covered: list[bool], workload: str, restart: bool) -> None:
        """Ticks a..b without a held workload: no data at all, or no job."""
        nodata = sum(1 for i in range(a, b + 1) if not covered[i])
        kind = "no_data" if nodata > (b - a + 1) / 2 else "no_job"
        self.spans.append(Span(kind, a, b, workload, restart))

    # ------------------------------------------------------------ stalls

    def _stall_episodes(self, gr: GroupTrack, members: list[GpuTrack],
                        seg_work: list[tuple[int, int] | None]) -> None:
        windows = [(si, self.tick_start(w[0]), self.tick_end(w[1])) for si, w in enumerate(seg_work) if w]
        merged: list[Stall] = []
        for ep in gr.episodes:
            win = next((w for w in windows if w[1] <= ep.start < w[2]), None)
            if win is None:
                continue            # start-up, exit: not a stall of the running job
            merged.append(Stall(ep, gr.workload, win[0], list(gr.gpus)))
        for e in merged:
            self._who_waited(e, members)
        self.episodes.extend(merged)

    def _who_waited(self, e: Stall, members: list[GpuTrack]) -> None:
        """Members busy during the stall were spin-waiting; the rest were off the GPU."""
        ticks = [i for i in self._ticks_between(e.start, e.end)
                 if self.tick_start(i) >= e.start - 1e-6 and self.tick_end(i) <= e.end + 1e-6]
        if not ticks:
            return
        for g in members:
            b = _nanmean([g.fraction("busy", i) for i in ticks])
            if math.isnan(b):
                continue
            (e.waiting if b >= WORK_BUSY else e.off).append(g.key)
        if not e.waiting:
            e.off = []          # everybody idle: nobody in particular was waited for

    def _ticks_between(self, a: float, b: float) -> range:
        if not self.rec.ticks:
            return range(0)
        first = max(0, int(math.floor((a - self.rec.times[0]) / self.iv)))
        last = min(self.rec.ticks - 1, int(math.ceil((b - self.rec.times[0]) / self.iv)) + 1)
        return range(first, last + 1)

    def _patterns(self) -> None:
        eps = self.episodes
        for fam in ([eps[i] for i in f] for f in families([e.duration for e in eps])):
            fam.sort(key=lambda e: e.start)
            periods = []
            spans = []
            for si in sorted({e.segment for e in fam}):
                starts = [e.start for e in fam if e.segment == si]
                spans.append((starts[0], max(e.end for e in fam if e.segment == si)))
                span = next((s for s in self.spans if s.kind == "work" and self.tick_start(s.a) <= starts[0] < self.tick_end(s.b)), None)
                if span is None:
                    continue
                p = stall_period(starts, now=self.tick_end(span.b),
                                 durations=[e.duration for e in fam if e.segment == si])
                if p is not None:
                    periods.append(p)
            offs = [tuple(e.off) for e in fam if e.off]
            common_off = max(set(offs), key=offs.count) if offs else ()
            spinners = [e for e in fam if e.waiting]
            covered = sum(b - a for a, b in _union(spans))
            self.patterns.append({
                "count": len(fam),
                # its share of the stretches it covers, once they are long enough to judge
                "span_share": (sum(e.stalled for e in fam) / covered
                               if covered >= value("stall_min_span_seconds") else None),
                "duration_seconds": median(e.duration for e in fam),
                "stalled_seconds": sum(e.stalled for e in fam),
                "period_seconds": median(periods) if periods else None,
                "off_gpu": list(common_off) if offs and offs.count(common_off) * 2 >= len(fam) else [],
                "spin_waiting": bool(spinners) and len(spinners) * 2 >= len(fam),
                "workloads": sorted({e.workload for e in fam}),
                "spans": spans,
            })
        self.patterns.sort(key=lambda p: -p["stalled_seconds"])

    def _work_spans(self) -> list[tuple[float, float]]:
        return [(self.tick_start(s.a), self.tick_end(s.b)) for s in sorted(self.spans, key=lambda s: s.a)
                if s.kind == "work"]

    # ------------------------------------------------------------ per GPU

    def _all_work(self) -> dict[str, list[int]]:
        """Work ticks of each GPU's group."""
        out = {}
        for gr in self.rec.groups.values():
            for k in gr.gpus:
                out[k] = self.work_ticks.get(gr.workload, [])
        return out

    def _stats(self, k: str, ticks: list[int]) -> dict[str, float | None]:
        """Busy, active, spin-wait and idle fractions of GPU k over `ticks`."""
        g = self.rec.gpus[k]
        sampled = g.sampled
        idx = [i for i in ticks if sampled[i] > 0]
        sums = {f: sum(arr[i] for i in idx) for f, arr in (("busy", g.busy), ("active", g.active),
                                                           ("spin_wait", g.spin_wait), ("idle", g.idle))}
        s = sum(sampled[i] for i in idx)
        return {
            "busy_fraction": sums["busy"] / s if s else None,
            "active_fraction": sums["active"] / s if s else None,
            "spin_wait_fraction": sums["spin_wait"] / s if s else None,
            "idle_fraction": sums["idle"] / s if s else None,
            "sampled_seconds": s,
        }

    def _gpu_fractions(self) -> None:
        work = self._all_work()
        for k in self.rec.gpus:
            self.gpu_stats[k] = self._stats(k, work.get(k, []))

    def _stragglers(self) -> None:
        """analysis.verdict over the engine's per-tick costs and deviations (see module doc)."""
        work = self._all_work()
        for gr in self.rec.groups.values():
            keys = [k for k in gr.gpus if self.gpu_stats.get(k, {}).get("busy_fraction") is not None]
            if len(keys) < value("straggler_min_gpus"):
                continue          # two GPUs: who deviates from whom is undefined
            best: dict[str, dict[str, Any]] = {}
            cost_min = value("straggler_cost_ratio")
            cache: dict[tuple, dict[str, dict[str, float | None]]] = {}
            for signal, sign in (("active", 1.0), ("busy", -1.0)):
                for k in keys:
                    g = self.rec.gpus[k]
                    dev = g.dev_active if signal == "active" else g.dev_busy
                    costs = g.cost_active if signal == "active" else g.cost_busy
                    ticks = work.get(k, [])
                    if not any(costs[i] >= cost_min for i in ticks):   # NaN compares false
                        continue          # the common case, cheaply: never cost anyone enough
                    persistence, spans = straggler_spans(
                        [deviating(sign * dev[i], costs[i]) for i in ticks], ticks, self.iv)
                    if not spans:
                        continue
                    span_ticks = [i for a, b in spans for i in range(a, b + 1)]
                    key = tuple(spans)
                    if key not in cache:     # a straggler's signals often share spans
                        cache[key] = ({kk: self.gpu_stats[kk] for kk in keys} if span_ticks == ticks
                                      else {kk: self._stats(kk, span_ticks) for kk in keys})
                    stats = cache[key]
                    xs = {kk: st[f"{signal}_fraction"] for kk, st in stats.items()
                          if st[f"{signal}_fraction"] is not None}
                    if k not in xs or len(xs) < value("straggler_min_gpus"):
                        continue
                    z = peer_deviation(xs)[k]
                    med = median(xs.values())
                    spin = median(st["spin_wait_fraction"] or 0.0 for st in stats.values())
                    hot, cold = peer_wait(stats[k]["active_fraction"] or 0.0, stats[k]["busy_fraction"] or 0.0,
                                          median(st["active_fraction"] or 0.0 for st in stats.values()),
                                          median(st["busy_fraction"] or 0.0 for st in stats.values()), spin)
                    cand = {"key": k, "node": g.node, "gpu": g.gpu, "workload": gr.workload,
                            "direction": "busier" if sign > 0 else "idler", "signal": signal,
                            "gap": abs(xs[k] - med), "cost": max(0.0, hot if sign > 0 else cold),
                            "fraction": xs[k], "peer_median": med,
                            "z": z, "persistence": persistence,
                            "whole_run": persistence >= value("straggler_persistence_ratio"),
                            "spans": [(self.tick_start(a), self.tick_end(b)) for a, b in spans],
                            "lost_gpu_seconds": g.lost_to,
                            "stats": stats}
                    if k not in best or cand["cost"] > best[k]["cost"]:
                        best[k] = cand
            self.stragglers.extend(best.values())

    def _straggler_nodes(self) -> None:
        """A slow node of a multi-node workload (analysis.verdict at node level): the
        mean of its GPUs against the median of the workload's per-node means, windowed
        like the engine's GPU verdict. Its GPUs are then named once, as the node."""
        rec = self.rec
        if not rec.multi_node:
            return
        window = max(1, round(rec.window / self.iv))
        for gr in rec.groups.values():
            by_node: dict[str, list[GpuTrack]] = {}
            for k in gr.gpus:
                if k in rec.gpus:
                    by_node.setdefault(rec.gpus[k].node, []).append(rec.gpus[k])
            if len(by_node) < value("straggler_min_gpus"):
                continue
            ticks = self.work_ticks.get(gr.workload, [])
            if not ticks:
                continue
            # per node and tick: (active, busy, spin, sampled) summed over its GPUs
            sums = {n: [[sum(getattr(g, f)[i] for g in gs if g.sampled[i] > 0) for i in ticks]
                        for f in ("active", "busy", "spin_wait", "sampled")] for n, gs in by_node.items()}
            flags: dict[tuple[str, str], list[bool]] = {(n, s): [] for n in by_node for s in ("active", "busy")}
            costs: dict[tuple[str, str], list[float]] = {key: [] for key in flags}
            run = {n: [0.0, 0.0, 0.0, 0.0] for n in by_node}
            for j in range(len(ticks)):
                frac: dict[str, tuple[float, float, float]] = {}
                for n, (act, bsy, spn, smp) in sums.items():
                    r = run[n]
                    for x, arr in enumerate((act, bsy, spn, smp)):
                        r[x] += arr[j] - (arr[j - window] if j >= window else 0.0)
                    if r[3] > 0:
                        frac[n] = (r[0] / r[3], r[1] / r[3], r[2] / r[3])
                if len(frac) < value("straggler_min_gpus"):
                    for key in flags:
                        flags[key].append(False)
                        costs[key].append(0.0)
                    continue
                ma = median(v[0] for v in frac.values())
                mb = median(v[1] for v in frac.values())
                ms = median(v[2] for v in frac.values())
                za = peer_deviation({n: v[0] for n, v in frac.items()})
                zb = peer_deviation({n: v[1] for n, v in frac.items()})
                for n in by_node:
                    if n not in frac:
                        hot = cold = 0.0
                        ok_a = ok_b = False
                    else:
                        hot, cold = peer_wait(frac[n][0], frac[n][1], ma, mb, ms)
                        ok_a, ok_b = deviating(za[n], hot), deviating(-zb[n], cold)
                    flags[(n, "active")].append(ok_a)
                    flags[(n, "busy")].append(ok_b and not ok_a)
                    costs[(n, "active")].append(hot)
                    costs[(n, "busy")].append(cold)
            for (n, signal), fl in flags.items():
                _, spans = straggler_spans(fl, ticks, self.iv)
                if not spans:
                    continue
                pos = {t: j for j, t in enumerate(ticks)}
                idx = [pos[i] for a, b in spans for i in range(a, b + 1) if i in pos]
                node_cost = sum(costs[(n, signal)][j] for j in idx) / len(idx)
                f = 0 if signal == "active" else 1
                means = {m: (sum(sums[m][f][j] for j in idx) / max(1e-9, sum(sums[m][3][j] for j in idx)))
                         for m in by_node}
                others = len(gr.gpus) - len(by_node[n])
                keys = {g.key for g in by_node[n]}
                self.straggler_nodes.append({
                    "node": n, "workload": gr.workload, "direction": "busier" if signal == "active" else "idler",
                    "signal": signal, "cost": max(0.0, node_cost), "fraction": means[n],
                    "peer_median": median(means.values()),
                    "z": peer_deviation(means)[n], "gpus": len(by_node[n]), "keys": keys,
                    "spans": [(self.tick_start(a), self.tick_end(b)) for a, b in spans],
                    "lost_gpu_seconds": sum(rec.gpus[k].lost_to for k in keys),
                    "others": others})
                # named once, as the node: its GPUs' own verdicts in that direction go
                self.stragglers = [st for st in self.stragglers
                                   if not (st["key"] in keys and st["workload"] == gr.workload
                                           and st["signal"] == signal)]

    def _lost(self) -> dict[str, Any]:
        """GPU-seconds lost, from the engine's counters (gpulse_group_lost_seconds_total):
        the figure the exporter and the rules give for the same run."""
        by: dict[tuple[str, str], float] = {}
        for gr in self.rec.groups.values():
            for key, v in gr.lost.items():
                by[key] = by.get(key, 0.0) + v
        work = sum((st.get("sampled_seconds") or 0.0) for st in self.gpu_stats.values())
        total = sum(by.values())
        return {"gpu_seconds": total, "work_gpu_seconds": work,
                "by_reason": [{"reason": r, "cause": c, "gpu_seconds": v}
                              for (r, c), v in sorted(by.items(), key=lambda kv: -kv[1]) if v > 0]}

    def _lost_headline(self, lost: dict[str, Any]) -> str:
        """'This run lost N GPU-hours of M (X %): Y % to GPU 3 (throttling), ...'."""
        total, work = lost["gpu_seconds"], lost["work_gpu_seconds"]
        if work <= 0:
            return ""
        if total < 1.0:
            return f"This run lost no GPU time to sync stalls, stragglers or imbalance (of {_hours(work)})."
        parts = []
        named = 0.0
        for nd in sorted(self.straggler_nodes, key=lambda d: -d["lost_gpu_seconds"]):
            if nd["lost_gpu_seconds"] > 0:
                parts.append(f"{_pct(nd['lost_gpu_seconds'] / work)} waiting for node {nd['node']}"
                             + (f" ({nd['cause']})" if nd.get("cause") else ""))
                named += nd["lost_gpu_seconds"]
        for st in sorted(self.stragglers, key=lambda s: -s["lost_gpu_seconds"]):
            if st["lost_gpu_seconds"] > 0:
                parts.append(f"{_pct(st['lost_gpu_seconds'] / work)} waiting for {self.label(st['key'])}"
                             + (f" ({st['cause']})" if st.get("cause") else ""))
                named += st["lost_gpu_seconds"]
        for item in lost["by_reason"]:
            if item["reason"] == "sync_stall":
                parts.append(f"{_pct(item['gpu_seconds'] / work)} to sync stalls")
            elif item["reason"] == "imbalance":
                parts.append(f"{_pct(item['gpu_seconds'] / work)} to imbalance")
        rest = sum(i["gpu_seconds"] for i in lost["by_reason"] if i["reason"] == "straggler") - named
        if rest >= 0.005 * work:
            parts.append(f"{_pct(rest / work)} waiting for stragglers of shorter spans")
        return (f"This run lost {total / 3600:.2f} of {_hours(work)} ({_pct(total / work)})"
                + (": " + ", ".join(parts) if parts else "") + ".")

    def _imbalance(self) -> None:
        vals: list[float] = []
        for gr in self.rec.groups.values():
            vals += [gr.imbalance[i] for i in self.work_ticks.get(gr.workload, []) if not math.isnan(gr.imbalance[i])]
        by_gpu = {k: s["active_fraction"] for k, s in self.gpu_stats.items() if s["active_fraction"] is not None}
        acts = list(by_gpu.values())
        vals.sort()

        def q(p: float) -> float | None:
            return vals[min(len(vals) - 1, int(p * len(vals)))] if vals else None
        whole = imbalance_of(acts, self.rec.idle_threshold) if acts else None
        self.imbalance = {
            # a measurement always; whether stragglers explain it is the verdict beside
            # it, as the exporter's gpulse_group_imbalance_explained beside its ratio
            "whole_run": whole,
            "explained": bool(whole is not None and imbalance_explained(by_gpu, {s["key"] for s in self.stragglers})),
            "load_balance": load_balance(acts, self.rec.idle_threshold) if acts else None,
            "mean": sum(vals) / len(vals) if vals else None,
            "p50": q(0.5), "p90": q(0.9), "max": vals[-1] if vals else None,
        }

    # ------------------------------------------------------------ words

    def work_seconds(self, workload: str | None = None) -> float:
        """Seconds some group (or `workload`) worked: groups working at once count once."""
        return sum(b - a for a, b in _union([(self.tick_start(s.a), self.tick_end(s.b)) for s in self.spans
                                             if s.kind == "work" and (workload is None or s.workload == workload)]))

    def _words(self) -> None:
        F = self.findings
        pattern_findings = [(p, f) for p in self.patterns if (f := self._pattern_words(p)) is not None]
        for nd in sorted(self.straggler_nodes, key=lambda d: -d["cost"]):
            gr = self.rec.groups.get(nd["workload"])
            peers = gr.gpus if gr else []
            # the node's cause: its GPUs' one verdict when they agree (a power-capped
            # rack), else the first GPU's against the other nodes'
            verdicts = [self.rec.cause_of(k, [p for p in peers if p not in nd["keys"]] + [k], nd["spans"])
                        for k in sorted(nd["keys"])]
            causes = {v.cause for v in verdicts}
            v = verdicts[0] if len(causes) == 1 else next((v for v in verdicts if v.cause != "unknown"), verdicts[0])
            nd["cause"] = v.cause
            F.append(_with_cause(self._node_words(nd), v))
        for st in sorted(self.stragglers, key=lambda s: -s["cost"]):
            gr = self.rec.groups.get(st["workload"])
            v = self.rec.cause_of(st["key"], gr.gpus if gr else [], st["spans"])
            st["cause"] = v.cause
            f = _with_cause(self._straggler_words(st, v.cause), v)
            F.append(self._one_cause(st, f, pattern_findings))
        imb = self._imbalance_words()
        if imb:
            # the busiest GPU against the rest: its ranks share one cause
            acts = {k: s["active_fraction"] for k, s in self.gpu_stats.items() if s["active_fraction"] is not None}
            F.append(_with_cause(imb, self.rec.cause_of(max(acts, key=acts.get), list(acts), imb.spans)))
        F.extend(f for _, f in pattern_findings)
        F.extend(self._missing_words())
        F.extend(self._phase_words())
        limit = self._input_limit()
        if limit is not None:
            F.append(limit)
        if not any(f.severity in ("high", "medium") for f in F):
            w = self.work_seconds()
            if w > 0:
                busy = [s["busy_fraction"] for s in self.gpu_stats.values() if s["busy_fraction"] is not None]
                caveat = ("; spin-waits shorter than about a second cannot be seen in this input (see the note "
                          "on power), so this holds for longer stalls only") if limit is not None else ""
                F.insert(0, Finding("healthy", "info",
                                    f"No sync-stall or imbalance problem found: over {_secs(w)} of work the GPUs were "
                                    f"busy {_pct(median(busy))} (median) and evenly loaded{caveat}.", "",
                                    self._work_spans()))
            elif not any(f.kind == "no_work" for f in F):
                F.insert(0, Finding("no_work", "info", "The GPUs never worked: no GPU was busy for a sustained "
                                    f"stretch ({_pct(WORK_BUSY)} or more for {WORK_SUSTAIN:g} s).",
                                    "check that the job ran on these GPUs and the time range is right",
                                    [(self.tick_start(0), self.tick_end(self.rec.ticks - 1))] if self.rec.ticks else []))
        order = {"high": 0, "medium": 1, "info": 2}
        F.sort(key=lambda f: order[f.severity])

    def _one_cause(self, st: dict[str, Any], f: Finding,
                   pattern_findings: list[tuple[dict[str, Any], Finding]]) -> Finding:
        """An idle straggler and the stall patterns in which it is the one off the GPU
        are one cause (its rank's work off the GPU): one finding, not one per view.
        The patterns' findings are taken out of pattern_findings."""
        if st["direction"] != "idler":
            return f
        same = [(p, pf) for p, pf in pattern_findings
                if p["off_gpu"] == [st["key"]] and st["workload"] in p["workloads"]]
        if not same:
            return f
        for item in same:
            pattern_findings.remove(item)
        same.sort(key=lambda x: -x[0]["count"])
        f.text += (" The same cause shows as every GPU stalling together: "
                   + "; ".join(p["summary"] for p, _ in same) + ".")
        order = {"high": 0, "medium": 1, "info": 2}
        f.severity = min([f.severity] + [pf.severity for _, pf in same], key=order.__getitem__)
        f.spans = _union(f.spans + [s for _, pf in same for s in pf.spans])
        return f

    def _straggler_words(self, st: dict[str, Any], why: str) -> Finding:
        """The straggler's sentence; `why` is its analysis.cause verdict, the one
        judge of whether an idle straggler's peers wait for it or out-compute it."""
        k = st["key"]
        gr = self.rec.groups.get(st["workload"])
        peers = [p for p in (gr.gpus if gr else []) if p != k]
        stats = st["stats"]
        peers = [p for p in peers if p in stats]
        me = stats[k]
        peer_busy = median(stats[p]["busy_fraction"] for p in peers
                           if stats[p]["busy_fraction"] is not None)
        peer_spin = median((stats[p]["spin_wait_fraction"] or 0.0) for p in peers)
        when = "" if st["whole_run"] else "; ".join(
            f"from {self._when(a)} for {_secs(b - a)}" for a, b in st["spans"])
        what = "of the work time" if st["whole_run"] else f"of its straggling time ({when})"
        rank = st["gpu"] if st["gpu"].isdigit() else k
        sev = "high" if st["cost"] >= value("straggler_high_gap_ratio") else "medium"
        spans = st["spans"]
        if st["direction"] == "idler":
            power = (f" at idle-level power (spin-waiting {_pct(peer_spin)} of the time)"
                     if peer_busy > 0 and peer_spin >= SPIN_WAITING * peer_busy else "")
            if why == "off_gpu":
                text = (f"{self.label(k)} was idle {_pct(me['idle_fraction'])} {what} while "
                        f"{self.labels(peers)} read {_pct(peer_busy)} busy{power}, i.e. waiting for it: "
                        f"rank {rank} is the bottleneck and its work is off the GPU (checkpointing, data loading, "
                        "host-side preprocessing).")
            elif why == "more_work":
                text = (f"{self.label(k)} was busy only {_pct(me['busy_fraction'])} {what} against "
                        f"{_pct(peer_busy)} for {self.labels(peers)}, which compute meanwhile: it gets too "
                        "little work.")
            else:
                text = (f"{self.label(k)} was busy only {_pct(me['busy_fraction'])} {what} against "
                        f"{_pct(peer_busy)} for {self.labels(peers)}.")
            return Finding("straggler", sev, text, "", spans)   # the cause's remedy is set by _with_cause
        peer_act = median(stats[p]["active_fraction"] or 0.0 for p in peers)
        wait = f", spending {_pct(peer_spin)} of the time spin-waiting" if peer_spin >= value("spin_wait_mention_ratio") else ""
        lost = (f" They lost {_hours(st['lost_gpu_seconds'])} waiting for it ({_pct(st['cost'])} of their time)."
                if st["lost_gpu_seconds"] >= 1 else "")
        text = (f"{self.label(k)} worked {_pct(me['active_fraction'])} {what} against {_pct(peer_act)} "
                f"for {self.labels(peers)}{wait}: they wait for it at every synchronisation point.{lost}")
        return Finding("straggler", sev, text, "", spans)   # the cause's remedy is set by _with_cause

    def _node_words(self, nd: dict[str, Any]) -> Finding:
        when = "; ".join(f"from {self._when(a)} for {_secs(b - a)}" for a, b in nd["spans"])
        what = "real work" if nd["signal"] == "active" else "busy time"
        lost = (f"; they lost {_hours(nd['lost_gpu_seconds'])} waiting for it" if nd["lost_gpu_seconds"] >= 1 else "")
        text = (f"Node {nd['node']} is a straggler of workload {nd['workload'] or '(the node group)'}: its "
                f"{nd['gpus']} GPUs averaged {_pct(nd['fraction'])} {what} against a median of "
                f"{_pct(nd['peer_median'])} for the workload's nodes ({when}), so the other nodes' "
                f"{nd['others']} GPUs wait for it {_pct(nd['cost'])} of their time at every synchronisation "
                f"point{lost}.")
        sev = "high" if nd["cost"] >= value("straggler_high_gap_ratio") else "medium"
        return Finding("straggler_node", sev, text, "", list(nd["spans"]))

    def _imbalance_words(self) -> Finding | None:
        # the pager's definition over the whole run: the same spread, the same busiest-GPU guard
        imb = self.imbalance.get("whole_run")
        if imb is None or not imb > IMBALANCE:
            return None
        acts = {k: s["active_fraction"] for k, s in self.gpu_stats.items() if s["active_fraction"] is not None}
        hi_v, lo_v = max(acts.values()), min(acts.values())
        if not hi_v > value("imbalance_min_active_ratio"):
            return None
        mid = (hi_v + lo_v) / 2
        hi = sorted((k for k, v in acts.items() if v >= mid), key=lambda k: self.rec.ordered_gpus().index(self.rec.gpus[k]))
        lo = sorted((k for k, v in acts.items() if v < mid), key=lambda k: self.rec.ordered_gpus().index(self.rec.gpus[k]))
        if imbalance_explained(acts, {s["key"] for s in self.stragglers}):
            return None           # stragglers explain it; their findings say more
        text = (f"{self.labels(hi)} at {_pct(min(acts[k] for k in hi))}"
                f"{'' if len(hi) == 1 else ' or more'} and {self.labels(lo)} under "
                f"{_pct(max(acts[k] for k in lo) + 0.005)} (real work over the whole run; imbalance "
                f"{imb:.2f}, load balance {self.imbalance['load_balance']:.2f}): work is unevenly distributed.")
        remedy = ("rebalance: data/pipeline/tensor parallel sizing, dynamic load balancing; more GPUs or "
                  "overclocking will not help")
        return Finding("imbalance", "high" if imb >= value("imbalance_high_ratio") else "medium", text, remedy,
                       self._work_spans())

    def _pattern_words(self, p: dict[str, Any]) -> Finding | None:
        work = self.work_seconds()
        share = p["stalled_seconds"] / work if work > 0 else 0.0
        local = p["span_share"]
        d = p["duration_seconds"]
        period = p["period_seconds"]
        if period is None and max(share, local or 0.0) < STALL_NOTABLE:
            return None
        who = ""
        if p["off_gpu"]:
            all_keys = sorted({k for gr in self.rec.groups.values() for k in gr.gpus})
            waiting = [k for k in all_keys if k not in p["off_gpu"]]
            ranks = ", ".join(self.rec.gpus[k].gpu for k in p["off_gpu"] if k in self.rec.gpus)
            who = (f"; during them {self.labels(p['off_gpu'])} work{'s' if len(p['off_gpu']) == 1 else ''} off "
                   f"the GPU while {self.labels(waiting)} spin-wait for {'it' if len(p['off_gpu']) == 1 else 'them'}")
            cause = f"consistent with periodic checkpointing by rank {ranks}" if period else \
                f"rank {ranks} holds everybody up with work off the GPU"
        elif period is not None and period >= value("period_checkpoint_seconds"):
            cause = "consistent with periodic checkpointing, evaluation or logging"
        elif period is not None:
            cause = "consistent with a step-level wait: the input pipeline not keeping up or exposed communication"
        else:
            cause = "the whole job waits together without a steady rhythm (input pipeline, I/O, host-side work)"
        rhythm = f" every ~{_secs(period)}" if period else ""
        times = f"{p['count']} time{'s' if p['count'] != 1 else ''}"
        # a pattern confined to part of a long run costs its own stretch more than the run
        during = (f"{_pct(local)} of the time from {self._when(p['spans'][0][0])} to {self._when(p['spans'][-1][1])}, "
                  if local is not None and _pct(local) != _pct(share) else "")
        p["summary"] = f"~{_secs(d)}{rhythm} ({times}, {during}{_pct(share)} of the work time)"
        text = (f"All GPUs stall together for ~{_secs(d)}{rhythm} ({times}, {during}{_pct(share)} of the work time)"
                f"{who}: {cause}.")
        if p["off_gpu"] or (period is not None and period >= value("period_checkpoint_seconds")):
            remedy = ("make checkpointing asynchronous (snapshot to host memory, write in the background), "
                      "checkpoint less often, or write to faster storage")
        elif period is not None:
            remedy = ("more data-loader workers, prefetching and pinned memory; overlap communication with "
                      "computation (bucketed all-reduce) or use larger steps")
        else:
            remedy = "profile a stall (torch profiler, nsys) to see what every rank waits on"
        worst = max(share, local or 0.0)
        sev = "high" if worst >= value("stall_high_ratio") else "medium" if worst >= STALL_NOTABLE or period else "info"
        return Finding("sync_stall", sev, text, remedy, p["spans"])

    def _missing_words(self) -> list[Finding]:
        """A GPU silent for MISSING_MIN seconds of work while its peers report (lost,
        hung, off the bus): the engine marks it down; the report says when."""
        out = []
        need = max(1, math.ceil(MISSING_MIN / self.iv))
        for gr in self.rec.groups.values():
            ticks = self.work_ticks.get(gr.workload, [])
            members = [self.rec.gpus[k] for k in gr.gpus if k in self.rec.gpus]
            for g in members:
                best: tuple[int, int] | None = None
                run_start = None
                for n, i in enumerate(ticks + [-1]):
                    silent = i >= 0 and not g.sampled[i] > 0 and any(o.sampled[i] > 0 for o in members if o is not g)
                    if silent and run_start is None:
                        run_start = n
                    elif not silent and run_start is not None:
                        if best is None or n - run_start > best[1] - best[0]:
                            best = (run_start, n)
                        run_start = None
                if best is None or best[1] - best[0] < need:
                    continue
                a, b = ticks[best[0]], ticks[best[1] - 1]
                secs = self.tick_end(b) - self.tick_start(a)
                to_end = b == ticks[-1]
                text = (f"{self.label(g.key)} stopped reporting at {self._when(self.tick_start(a))} while its peers "
                        + ("went on, and never came back" if to_end else f"went on, for {_secs(secs)}")
                        + ": lost, hung or fallen off the bus; its peers' numbers cover that time without it.")
                out.append(Finding("gpu_missing", "high" if to_end else "medium", text,
                                   "check the node's kernel log for XID errors (79: fallen off the bus) and the "
                                   "GPU's health; drain the node if it repeats",
                                   [(self.tick_start(a), self.tick_end(b))]))
        return out

    def _input_limit(self) -> Finding | None:
        """Say what the input cannot show instead of guessing: with power averaged over
        about a second, power-gated activity reads a shorter spin-wait as work."""
        if not self.rec.power_averaged or self.rec.activity != "power-gated" or self.work_seconds() <= 0:
            return None
        return Finding("input_limit", "info",
                       "Power in this input lags utilisation by about a second (nvidia-smi's power.draw is a 1 s "
                       "average): a rank spin-waiting for less than that reads as working, so sub-second sync "
                       "stalls in which some ranks spin-wait, and step-level stragglers, cannot be judged from it. "
                       "Stalls in which every GPU goes idle, and longer spin-waits, are measured as usual.",
                       "log power.draw.instant instead of power.draw, or use SM activity (dcgm-exporter with "
                       "profiling, --source dcgm) to judge short spin-waits",
                       self._work_spans())

    def _phase_words(self) -> list[Finding]:
        out = []
        for s in self.spans:
            dur = self.tick_end(s.b) - self.tick_start(s.a)
            when = self._when(self.tick_start(s.a))
            before = len(out)
            if s.kind == "no_job" and s.restart:
                out.append(Finding("gap", "medium",
                                   f"No job for {_secs(dur)} from {when}: the job exited and a new run started "
                                   f"afterwards — a crash and restart (or requeue), reported as a gap, not as a "
                                   "sync stall.",
                                   "find why the job exited (its logs, XID errors, OOM kills); resume from the "
                                   "last checkpoint sooner"))
            elif s.kind == "no_data":
                out.append(Finding("gap", "info", f"No samples for {_secs(dur)} from {when}: a gap in the data; "
                                   "nothing is concluded about it."))
            elif s.kind == "startup" and dur >= value("phase_notable_seconds"):
                out.append(Finding("startup", "info",
                                   f"Start-up took {_secs(dur)} from {when} (memory held, no sustained work: "
                                   "loading, compiling, communicator set-up); it is not counted as stalls.",
                                   "if it matters: cache the dataset and compiled kernels, load checkpoints in "
                                   "parallel"))
            elif s.kind == "held_idle" and dur >= value("phase_notable_seconds"):
                out.append(Finding("held_idle", "info",
                                   f"Memory held for {_secs(dur)} from {when} without sustained work."))
            if len(out) > before:
                out[-1].spans = [(self.tick_start(s.a), self.tick_end(s.b))]
        return out

    def _when(self, t: float) -> str:
        return clock_of(self.rec).when(t, self.t0)

    # ------------------------------------------------------------ JSON

    def _gpu_ref(self, key: str) -> dict[str, str]:
        g = self.rec.gpus.get(key)
        return {"node": g.node if g else "", "gpu": g.gpu if g else key}

    def _time(self, t: float) -> tuple[float, str | None]:
        iso = (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1000):03d}Z"
               if self.rec.epoch else None)
        return round(t - self.t0, 3), iso

    def as_json(self) -> dict[str, Any]:
        rec = self.rec
        end = rec.times[-1] if rec.ticks else self.t0
        work = self.work_seconds()
        stalled = sum(e.stalled for e in self.episodes)
        start_iso = self._time(self.t0)[1]
        doc: dict[str, Any] = {
            "schema": SCHEMA_ID,
            "source": rec.source,
            "run": {
                "start_time": start_iso,
                "end_time": self._time(end)[1],
                "duration_seconds": round(end - self.t0, 3),
                "work_seconds": round(work, 3),
                "tick_seconds": rec.interval,
                "activity": rec.activity,
                "idle_threshold": rec.idle_threshold,
                "gpus": len(rec.gpus),
            },
            "gpus": [],
            "phases": [],
            "gaps": [],
            "stall_episodes": [],
            "stall_fraction": round(stalled / work, 6) if work > 0 else None,
            "stall_period_seconds": None,
            "stall_patterns": [],
            "stragglers": [],
            "straggler_nodes": [],
            "lost": {**{k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.lost.items()
                        if k != "by_reason"},
                     "by_reason": [{**i, "gpu_seconds": round(i["gpu_seconds"], 3)} for i in self.lost["by_reason"]],
                     "headline": self.lost_headline},
            "imbalance": {k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.imbalance.items()},
            "findings": [{"kind": f.kind, "severity": f.severity, "text": f.text, "remedy": f.remedy,
                          "spans": _spans(f.spans),
                          **({"cause": f.cause.cause, "evidence": list(f.cause.evidence),
                              "missing": list(f.cause.missing)} if f.cause is not None else {})}
                         for f in self.findings],
            "recommendations": [],
            "notes": list(rec.notes) + [
                f"The record ends inside a sync stall of {self.labels(e.gpus)}, {_secs(e.duration)} long so far, "
                "with memory still held: it counts as an open episode, its length a lower bound."
                for e in self.episodes if e.open],
        }
        for g in rec.ordered_gpus():
            st = self.gpu_stats.get(g.key, {})
            doc["gpus"].append({"node": g.node, "gpu": g.gpu, "workload": g.workload,
                                **{k: (round(v, 6) if v is not None else None) for k, v in st.items()}})
        for s in sorted(self.spans, key=lambda s: (s.a, s.workload)):
            start, iso = self._time(self.tick_start(s.a))
            item = {"kind": s.kind, "start": start, "start_time": iso,
                    "duration_seconds": round(self.tick_end(s.b) - self.tick_start(s.a), 3), "workload": s.workload}
            doc["phases"].append(item)
            if s.kind in ("no_job", "no_data"):
                doc["gaps"].append({**item, "restart": bool(s.restart)})
        for e in sorted(self.episodes, key=lambda e: e.start):
            start, iso = self._time(e.start)
            doc["stall_episodes"].append({
                "start": start, "start_time": iso, "duration_seconds": round(e.duration, 3),
                "stalled_seconds": round(e.stalled, 3), "workload": e.workload,
                "gpus": [self._gpu_ref(k) for k in e.gpus],
                "waiting_gpus": [self._gpu_ref(k) for k in e.waiting],
                "off_gpu": [self._gpu_ref(k) for k in e.off],
                "open": e.open,
            })
        for p in self.patterns:
            doc["stall_patterns"].append({
                "count": p["count"], "duration_seconds": round(p["duration_seconds"], 3),
                "stalled_seconds": round(p["stalled_seconds"], 3),
                "span_share": round(p["span_share"], 6) if p["span_share"] is not None else None,
                "period_seconds": round(p["period_seconds"], 3) if p["period_seconds"] is not None else None,
                "off_gpu": [self._gpu_ref(k) for k in p["off_gpu"]], "workloads": p["workloads"],
                "spans": _spans(p["spans"]),
            })
        recurring = [p for p in self.patterns if p["period_seconds"] is not None]
        if recurring:   # the headline: the rhythm with the most stalls (two long ones are weak evidence)
            head = max(recurring, key=lambda p: (p["count"], p["stalled_seconds"]))
            doc["stall_period_seconds"] = round(head["period_seconds"], 3)
        for st in sorted(self.stragglers, key=lambda s: -s["cost"]):
            doc["stragglers"].append({k: (round(v, 6) if isinstance(v, float) else _spans(v) if k == "spans" else v)
                                      for k, v in st.items() if k not in ("key", "stats", "cause")})
        for nd in sorted(self.straggler_nodes, key=lambda d: -d["cost"]):
            doc["straggler_nodes"].append({k: (round(v, 6) if isinstance(v, float) else _spans(v) if k == "spans" else v)
                                           for k, v in nd.items() if k not in ("keys", "others", "cause", "signal")})
        seen = set()
        for f in self.findings:
            if f.remedy and f.remedy not in seen:
                seen.add(f.remedy)
                doc["recommendations"].append(f.remedy)
        return doc


def _with_cause(f: Finding, v: Any) -> Finding:
    """The finding with its cause (analysis.cause.Verdict); the cause's remedy replaces the general one."""
    f.cause, f.remedy = v, v.remedy
    return f


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} GPU-hours"


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _spans(spans: list[tuple[float, float]]) -> list[dict[str, float]]:
    return [{"start": round(a, 3), "end": round(b, 3)} for a, b in spans]


def analyse(rec: Recording) -> Analysis:
    return Analysis(rec)
