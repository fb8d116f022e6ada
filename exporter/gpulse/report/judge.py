"""What a whole run means: its phases, stall episodes and rhythms, stragglers,
imbalance and lost time, judged from a Recording. Nothing here is worded
(report/words.py) or written out (report/document.py).

Everything measured comes from the engine (stall episodes, per-tick integrals, peer
deviations, imbalance); this module decides what a whole run *means*. The verdicts themselves (what is work, a straggler, a rhythm) are the detection
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

Causes
    A straggler's (and a slow node's) cause is analysis.cause over its spans against
    its peers (Recording.cause_of), kept with it as `verdict`.
"""
from __future__ import annotations

import bisect
import dataclasses
import math
import re
from dataclasses import dataclass, field
from itertools import chain, filterfalse
from operator import itemgetter
from statistics import median
from typing import Any, Iterable, Sequence

from ..analysis import Episode, imbalance as imbalance_of, load_balance, peer_deviation, stall_period
from ..analysis.cause import Verdict
from ..analysis.period import families
from ..analysis.thresholds import value
from ..analysis.verdict import deviating, imbalance_explained, is_working, peer_wait, straggler_spans, work_runs
from ..model import gpu_sort_key
from .collect import GpuTrack, GroupTrack, Recording

# GPUs of at most this many nodes are named node by node in a sentence; beyond, nodes
# with the same GPUs named are counted
NODES_NAMED = 4

WORK_BUSY = value("work_busy_ratio")
# analysis.cause's power evidence over a whole span ("power 269 W vs peers 267 W")
SPAN_POWER = re.compile(r"power \d+ W( vs peers \d+ W)?")


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


def and_list(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else items[0]


class Judgement:
    """The judged facts of one Recording."""

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
        self._causes()

    # ------------------------------------------------------------ time and names

    def tick_start(self, i: int) -> float:
        return self.rec.times[i] - self.iv

    def tick_end(self, i: int) -> float:
        return self.rec.times[i]

    def label(self, key: str) -> str:
        return self.rec.name(self.rec.gpus[key]) if key in self.rec.gpus else f"GPU {key}"

    def labels(self, keys: list[str]) -> str:
        """'GPU 0', 'GPUs 1–7', 'GPUs 0, 2 and 5'; per node when there are several
        ('n1 GPUs 0–7; n2 GPU 3'), and beyond NODES_NAMED nodes the nodes with the same
        GPUs counted ('GPUs 0–7 of 63 nodes from n00 to n63; n03 GPUs 1–7')."""
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
            text = f"{word} {and_list(runs)}"
            parts.append((node, text))
        if not multi:
            return "; ".join(text for _, text in parts)
        if len(parts) <= NODES_NAMED:
            return "; ".join(f"{node} {text}" if node else text for node, text in parts)
        # a fleet's job: the nodes that have the same GPUs named are counted, first to
        # last, not listed (a straggler's 1,023 peers were 128 nodes in one sentence)
        same: dict[str, list[str]] = {}
        for node, text in parts:
            same.setdefault(text, []).append(node)
        return "; ".join(f"{nodes[0]} {text}" if len(nodes) == 1 else
                         f"{text} of {len(nodes)} nodes from {nodes[0]} to {nodes[-1]}"
                         for text, nodes in same.items())

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
            common_off = max(dict.fromkeys(offs), key=offs.count) if offs else ()   # ties: the first seen
            spinners = [e for e in fam if e.waiting]
            covered = sum(b - a for a, b in union(spans))
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

    def work_spans(self) -> list[tuple[float, float]]:
        return [(self.tick_start(s.a), self.tick_end(s.b)) for s in sorted(self.spans, key=lambda s: s.a)
                if s.kind == "work"]

    def work_seconds(self, workload: str | None = None) -> float:
        """Seconds some group (or `workload`) worked: groups working at once count once."""
        return sum(b - a for a, b in union([(self.tick_start(s.a), self.tick_end(s.b)) for s in self.spans
                                             if s.kind == "work" and (workload is None or s.workload == workload)]))

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
        sums = {f: sum(_picked([arr], idx)) for f, arr in (("busy", g.busy), ("active", g.active),
                                                           ("spin_wait", g.spin_wait), ("idle", g.idle))}
        s = sum(_picked([sampled], idx))
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
                        [deviating(sign * dev[i], costs[i]) for i in ticks], ticks, self.iv,
                        [costs[i] for i in ticks] if signal == "busy" else None)
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
                _, spans = straggler_spans(fl, ticks, self.iv, costs[(n, signal)] if signal == "busy" else None)
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
                    "lost_gpu_seconds": sum(g.lost_to for g in by_node[n]),   # in GPU order: a sum over a set is not reproducible
                    "others": others})
                # named once, as the node: its GPUs' own verdicts in that direction go
                self.stragglers = [st for st in self.stragglers
                                   if not (st["key"] in keys and st["workload"] == gr.workload
                                           and st["signal"] == signal)]

    def _lost(self) -> dict[str, Any]:
        """GPU-seconds lost, from the engine's counters (gpulse_group_lost_seconds_total):
        the figure the exporter and the rules give for the same run. From Prometheus,
        the exporter's own counters over the range (_from_exporter)."""
        by: dict[tuple[str, str], float] = {}
        for gr in self.rec.groups.values():
            for key, v in gr.lost.items():
                by[key] = by.get(key, 0.0) + v
        if self.rec.exporter_counts is not None:
            by = self._from_exporter(by, self.rec.exporter_counts)
        work = sum((st.get("sampled_seconds") or 0.0) for st in self.gpu_stats.values())
        total = sum(by.values())
        return {"gpu_seconds": total, "work_gpu_seconds": work,
                "by_reason": [{"reason": r, "cause": c, "gpu_seconds": v}
                              for (r, c), v in sorted(by.items(), key=lambda kv: -kv[1]) if v > 0]}

    def _from_exporter(self, ticks: dict[tuple[str, str], float],
                       counts: dict[Any, float]) -> dict[tuple[str, str], float]:
        """The lost time the exporter counted at its own rate, which the engine over
        steps of a scrape cannot match: a stall shorter than a step reads there as its
        peers waiting for whichever rank is slowest, and is booked twice if both are
        added. Each node's exporter books only its own GPUs, so per workload and node
        (the rules' gpulse.lost record of the other nodes' loss, docs/activity.md):
        - a node whose exporter booked a straggler: its figure per local peer (its GPUs
          less the stragglers named on it) is what each of the workload's GPUs on other
          nodes lost too, and its named stragglers share that node's total in
          proportion to the engine's booking;
        - a straggler no exporter booked (a slow node; a GPU its node's exporter did
          not confirm) keeps the engine's figure, split over the engine's causes;
        - the stall time the other nodes counted beyond the straggler's node's own
          stalls per GPU was their GPUs spin-waiting for it at once: it moves from
          sync_stall to the straggler."""
        by = {(k[1], k[2]): v for k, v in counts.items() if isinstance(k, tuple) and k[0] == "lost"}
        by_cause = {c: v for (r, c), v in ticks.items() if r == "straggler" and v > 0}
        booked = sum(by_cause.values())
        gpus: dict[str, dict[str, float]] = {}
        lost_at: dict[tuple[str, str, str], dict[str, float]] = {}     # (node, workload, reason) -> by cause
        for k, v in counts.items():
            if isinstance(k, tuple) and k[0] == "gpus_at":
                gpus.setdefault(k[2], {})[k[1]] = v
            elif isinstance(k, tuple) and k[0] == "lost_at":
                lost_at.setdefault(k[1:4], {})[k[4]] = v
        for w in sorted({st["workload"] for st in self.stragglers + self.straggler_nodes}):
            nodes = gpus.get(w, {})
            total = sum(nodes.values())
            extra, worst = 0.0, ("", 0.0)
            for n in sorted({st["node"] for st in self.stragglers if st["workload"] == w} | set(nodes)):
                named = [st for st in self.stragglers if st["workload"] == w and st["node"] == n]
                causes = lost_at.get((n, w, "straggler"), {})
                mine = sum(causes.values())
                engine_n = sum(st["lost_gpu_seconds"] for st in named)
                if mine > 0 and nodes.get(n, 0) > len(named):
                    per_peer = mine / (nodes[n] - len(named))
                    remote = per_peer * (total - nodes[n])
                    for c, v in causes.items():
                        if v > 0:
                            by[("straggler", c)] = by.get(("straggler", c), 0.0) + v / mine * remote
                    if engine_n > 0:
                        for st in named:
                            st["lost_gpu_seconds"] *= (mine + remote) / engine_n
                    extra += remote
                    worst = max(worst, (n, remote), key=lambda x: x[1])
                elif engine_n > 0:
                    self._book_engine(by, by_cause, booked, engine_n)
                    extra += engine_n
                    worst = max(worst, (n, engine_n), key=lambda x: x[1])
            for st in self.straggler_nodes:
                if st["workload"] == w and st["lost_gpu_seconds"] > 0:
                    self._book_engine(by, by_cause, booked, st["lost_gpu_seconds"])
                    extra += st["lost_gpu_seconds"]
                    worst = max(worst, (st["node"], st["lost_gpu_seconds"]), key=lambda x: x[1])
            n = worst[0]
            if extra > 0 and nodes.get(n):
                stalls = {m: sum(lost_at.get((m, w, "sync_stall"), {}).values()) for m in nodes}
                moved = min(extra, max(0.0, sum(stalls.values()) - stalls[n] * total / nodes[n]))
                if moved > 0:
                    by[("sync_stall", "")] = by.get(("sync_stall", ""), 0.0) - moved
        return by

    @staticmethod
    def _book_engine(by: dict[tuple[str, str], float], by_cause: dict[str, float], booked: float,
                     seconds: float) -> None:
        """Add the engine's figure for a straggler no exporter booked, under the
        engine's causes in their proportions."""
        for c, v in by_cause.items():
            by[("straggler", c)] = by.get(("straggler", c), 0.0) + seconds * v / booked

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

    # ------------------------------------------------------------ causes

    def _causes(self) -> None:
        """Each straggler's and slow node's analysis.cause verdict over its spans."""
        for nd in self.straggler_nodes:
            gr = self.rec.groups.get(nd["workload"])
            peers = gr.gpus if gr else []
            # the node's cause: its GPUs' one verdict when they agree (a power-capped
            # rack), else the first GPU's against the other nodes'
            verdicts = [self.rec.cause_of(k, peers, nd["spans"], exclude=nd["keys"])
                        for k in sorted(nd["keys"], key=gpu_sort_key)]
            causes = {v.cause for v in verdicts}
            v = verdicts[0] if len(causes) == 1 else next((v for v in verdicts if v.cause != "unknown"), verdicts[0])
            nd["verdict"], nd["cause"] = v, v.cause
        for st in self.stragglers:
            gr = self.rec.groups.get(st["workload"])
            peers = gr.gpus if gr else []
            v = self.rec.cause_of(st["key"], peers, st["spans"])
            st["idle_power"] = self._idle_power(st["key"], [p for p in peers if p != st["key"]], st["spans"]) \
                if st["direction"] == "idler" else None
            if v.cause == "off_gpu" and st["idle_power"] is not None:
                # its peers wait while it is off the GPU: their power is figured over
                # those ticks, not over the span, where its working ticks lift it to the
                # mean of work and waiting (the item analysis.cause wrote as "power ...")
                own, waiting, working = st["idle_power"]
                item = f"power while it was idle {own:.0f} W vs peers {waiting:.0f} W (peers {working:.0f} W while it worked)"
                v = dataclasses.replace(v, evidence=tuple(item if SPAN_POWER.fullmatch(e) else e for e in v.evidence))
            st["verdict"], st["cause"] = v, v.cause

    def _idle_power(self, key: str, peers: list[str], spans: list[tuple[float, float]]
                    ) -> tuple[float, float, float] | None:
        """Over the ticks of `spans` in which GPU `key` was idle most of the tick: its
        mean power and its peers'; and its peers' over the ticks in which it was not.
        None where power was not recorded."""
        rec = self.rec
        g = rec.gpus[key]
        others = [rec.gpus[p] for p in peers if p in rec.gpus]
        idle: list[int] = []
        busy: list[int] = []
        for a, b in spans:
            for i in range(bisect.bisect_right(rec.times, a + 1e-6), bisect.bisect_right(rec.times, b + 1e-6)):
                if g.sampled[i] > 0:
                    (idle if g.idle[i] >= 0.5 * g.sampled[i] else busy).append(i)
        own = _nanmean(_picked([g.power], idle))
        waiting = _nanmean(_picked([o.power for o in others], idle))
        working = _nanmean(_picked([o.power for o in others], busy))
        return None if math.isnan(own) or math.isnan(waiting) or math.isnan(working) else (own, waiting, working)

    def imbalance_cause(self, spans: list[tuple[float, float]]) -> Verdict:
        """Why the load is uneven: the busiest GPU against the rest over `spans` (its
        ranks share one cause)."""
        acts = {k: s["active_fraction"] for k, s in self.gpu_stats.items() if s["active_fraction"] is not None}
        return self.rec.cause_of(max(acts, key=acts.get), list(acts), spans)


def _nanmean(xs: Iterable[float]) -> float:
    v = list(filterfalse(math.isnan, xs))
    return sum(v) / len(v) if v else math.nan


def _picked(tracks: list[Sequence[float]], ticks: list[int]) -> Iterable[float]:
    """Each track's values at `ticks`, track after track (a straggler's peers' power
    over its idle ticks: a thousand GPUs' worth per straggler at fleet size)."""
    if len(ticks) == 1:
        i = ticks[0]
        return (t[i] for t in tracks)
    return chain.from_iterable(map(itemgetter(*ticks), tracks)) if ticks else ()


def union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out
