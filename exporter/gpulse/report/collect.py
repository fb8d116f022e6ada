"""Keep what the report needs of the engine's Snapshots over a whole run.

The engine keeps only a window and a bounded history (it is built to run for
months). A post-mortem needs the whole run, so from every analysis tick's Snapshot
this module copies the tick's share of each GPU's integrals (the difference of the
cumulative `GpuView.totals`), the engine's own peer deviations and costs, every so
often its cause signals, and per peer group the holding state, the tick's sync-stall
seconds, the windowed imbalance and every newly counted stall episode; from the last
Snapshot, the episodes the end of the record makes final. Nothing is recomputed:
these are the engine's numbers, and the Snapshot is all this module reads of it.

Storage is compact (`array('f')`, 4 bytes a value), so a 4-hour, 64-GPU run at 1 s
ticks costs about 30 MB.
"""
from __future__ import annotations

import bisect
import math
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from ..analysis import Episode, cause
from ..analysis.integrate import Integrals
from ..engine import Snapshot
from ..model import gpu_sort_key

NAN = float("nan")

# The per-tick integrals kept for every GPU (seconds within the tick).
FIELDS = ("busy", "active", "spin_wait", "idle", "sampled")
# where the power readings' count and sum sit in the engine's cause-signal sums
POWER_N, POWER_SUM = cause.sums_index("power") - 1, cause.sums_index("power")   # in GpuView.cause_sums
# The engine's cumulative cause signals (analysis.cause) are kept every this many
# seconds, not every tick: a straggler span is minutes long, so its ends move inwards
# by at most this much (never outwards: the idle after a job is no part of its span),
# and 26 doubles a tick would cost 64 GPUs x 4 h about 190 MB.
SIGNALS_EVERY_SECONDS = 10.0
# GPUs in the peer Stretches cause_of keeps for the next GPUs judged over the same
# spans, all together (a Stretch of a thousand GPUs holds ~4 MB of columns): a job's
# stragglers and slow nodes come in no order of their spans
PEER_STRETCH_GPUS = 16384
_ZERO = Integrals()


# a track is one GPU: equal means the same one (list.index, `in`); slots: add() writes
# a dozen of them per GPU per tick
@dataclass(eq=False, slots=True)
class GpuTrack:
    key: str                  # the engine's GPU key ("3", or "node-b:3" for a second node)
    node: str
    gpu: str
    workload: str = ""
    busy: array = field(default_factory=lambda: array("f"))
    active: array = field(default_factory=lambda: array("f"))
    spin_wait: array = field(default_factory=lambda: array("f"))
    idle: array = field(default_factory=lambda: array("f"))
    sampled: array = field(default_factory=lambda: array("f"))
    dev_busy: array = field(default_factory=lambda: array("f"))     # engine's windowed robust z
    dev_active: array = field(default_factory=lambda: array("f"))
    cost_active: array = field(default_factory=lambda: array("f"))  # engine's windowed (hot, cold) cost
    cost_busy: array = field(default_factory=lambda: array("f"))
    lost_to: float = 0.0      # GPU-seconds its peers lost waiting for it (the engine's, booked)
    # mean power of the tick's readings (W; NaN without one): what a sentence about a
    # state (its peers' power while it was idle) is figured over
    power: array = field(default_factory=lambda: array("f"))
    prev: Integrals | None = None   # the cumulative totals of the tick before
    prev_power: tuple[float, float] = (0.0, 0.0)   # the engine's power reading count and sum
    # analysis.cause vectors (len(cause.SLOTS) values each) at ticks signal_ticks,
    # and the one at the end of the run
    signals: array = field(default_factory=lambda: array("d"))
    signal_ticks: array = field(default_factory=lambda: array("l"))
    signals_end: list[float] | None = None

    def signals_at(self, i: int, end: bool) -> Sequence[float] | None:
        """The cause vector at or before tick i (end: at or after; the run's last one
        past the final checkpoint); None before the first."""
        n = len(self.signals) // max(1, len(cause.SLOTS))
        ticks = self.signal_ticks
        j = bisect.bisect_left(ticks, i) if end else bisect.bisect_right(ticks, i) - 1
        return self._signals(j, n)

    def signals_within(self, first: int, last: int,
                       ticks: int) -> tuple[Sequence[float] | None, Sequence[float]] | None:
        """The cause vectors bounding ticks first..last from within: the checkpoint at
        or after the tick before `first` (None: the start of the run) and the one at
        or before `last` (the run's end vector when `last` is its final tick of
        `ticks`), so that no reading from outside the stretch (the idle after a job)
        is charged to it. None when no checkpoints lie that way round (a stretch
        shorter than their spacing)."""
        n = len(self.signals) // max(1, len(cause.SLOTS))
        ts = self.signal_ticks
        if first <= 0:
            start, t0 = None, -1
        else:
            j = bisect.bisect_left(ts, first - 1)
            if j >= n:
                return None
            start, t0 = self._signals(j, n), ts[j]
        if last >= ticks - 1 and self.signals_end is not None:
            end, t1 = self.signals_end, ticks - 1
        else:
            j = bisect.bisect_right(ts, last) - 1
            if j < 0:
                return None
            end, t1 = self._signals(j, n), ts[j]
        return (start, end) if end is not None and t1 > t0 else None

    def _signals(self, j: int, n: int) -> Sequence[float] | None:
        if j >= n:
            return self.signals_end
        if j < 0:
            return None
        w = len(cause.SLOTS)
        return self.signals[j * w:(j + 1) * w]   # an array: copied out once, read as a sequence

    def pad(self, n: int) -> None:
        for name in FIELDS + ("dev_busy", "dev_active", "cost_active", "cost_busy", "power"):
            a = getattr(self, name)
            if len(a) < n:
                a.extend([NAN] * (n - len(a)))

    def fraction(self, name: str, i: int) -> float:
        """Share of tick i's sampled time spent `name` (busy, active...); NaN without data."""
        s = self.sampled[i]
        return getattr(self, name)[i] / s if s > 0 else NAN


@dataclass
class GroupTrack:
    workload: str
    gpus: list[str] = field(default_factory=list)             # GPU keys, sorted
    holding: bytearray = field(default_factory=bytearray)     # 1 while the group held a workload
    stall: array = field(default_factory=lambda: array("f"))  # sync-stall seconds within the tick
    imbalance: array = field(default_factory=lambda: array("f"))
    episodes: list[Episode] = field(default_factory=list)     # every episode, in order
    prev_stall: float = 0.0
    lost: dict[tuple[str, str], float] = field(default_factory=dict)   # the engine's, cumulative
    seen: int = 0                        # episodes counted by the group's tracker, taken
    last_members: tuple[str, ...] = ()   # the engine's member list at the latest tick

    def pad(self, n: int) -> None:
        if len(self.holding) < n:
            self.holding.extend(b"\0" * (n - len(self.holding)))
        for a in (self.stall, self.imbalance):
            if len(a) < n:
                a.extend([NAN] * (n - len(a)))


@dataclass
class Recording:
    """Per-tick tracks of a whole run. Tick i covers (times[i] - interval, times[i]]."""

    source: str                   # what was read, for the report header
    interval: float               # seconds per tick
    idle_threshold: float
    activity: str                 # the engine's activity measure
    window: float                 # the engine's analysis window (seconds)
    gpus: dict[str, GpuTrack] = field(default_factory=dict)
    groups: dict[str, GroupTrack] = field(default_factory=dict)
    times: array = field(default_factory=lambda: array("d"))
    epoch: bool = True            # times are Unix seconds (a clock was recorded)
    log_format: str | None = None  # the recorded log's format, as read (None: from Prometheus)
    power_averaged: bool = False  # the engine found power lagging utilisation (a ~1 s average)
    notes: list[str] = field(default_factory=list)
    clock: Any = None             # report.clock.Clock the times are shown on (None: UTC)
    clocks: dict | None = None    # a job's per-node logs: the clock offset applied per node
    # from Prometheus: the exporter's group counters over the selection (inputs.py), which
    # see the stalls shorter than a step; None: stalls and lost time are the engine's ticks'
    exporter_counts: dict[Any, float] | None = None
    _order: tuple[int, list[GpuTrack]] = field(default=(-1, []), repr=False, compare=False)
    # cause_of's peers over spans, for the next GPUs judged against the same: (GPUs,
    # ticks of the spans, ticks recorded) -> (their Stretch, each GPU's place in it)
    _peers: dict[tuple, tuple[Any, dict[str, int]]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ticks(self) -> int:
        return len(self.times)

    @property
    def multi_node(self) -> bool:
        return len({g.node for g in self.gpus.values()}) > 1

    def name(self, g: GpuTrack) -> str:
        """'GPU 3' on one node, 'node-b GPU 3' when the run spans several."""
        return f"{g.node} GPU {g.gpu}" if self.multi_node and g.node else f"GPU {g.gpu}"

    def cause_of(self, key: str, peers: list[str], spans: list[tuple[float, float]],
                 exclude: Iterable[str] = ()) -> "cause.Verdict":
        """analysis.cause of GPU `key` against `peers` (but itself and `exclude`: a slow
        node's other GPUs) over time spans (start, end)."""
        ticks = [(bisect.bisect_left(self.times, a), bisect.bisect_left(self.times, b)) for a, b in spans]
        own = self._pairs(key, ticks)
        if not own:
            return cause.Verdict("unknown", ("no signals recorded over the span",), ())
        # every GPU judged against one list of peers over the same spans shares one
        # pass over them, its medians taken without itself and `exclude`
        # (Stretch.median: the same values): the stragglers of a workload, and the GPUs
        # of its slow nodes, each against the other nodes'; at fleet size hundreds of
        # them share a few sets of spans
        members = tuple(peers) if key in peers else (*peers, key)
        got = self._peers.get((members, tuple(ticks), self.ticks))
        if got is None:
            kept = [(p, pairs) for p in members if (pairs := self._pairs(p, ticks))]
            while self._peers and sum(len(k[0]) for k in self._peers) + len(members) > PEER_STRETCH_GPUS:
                del self._peers[next(iter(self._peers))]     # the oldest first
            got = self._peers[(members, tuple(ticks), self.ticks)] = (
                cause.span_peers([pairs for _, pairs in kept]), {p: i for i, (p, _) in enumerate(kept)})
        stretch, where = got
        out = tuple(sorted(where[p] for p in {key, *exclude} if p in where))
        return cause.span_verdict(own, stretch, self.power_averaged, out[0] if len(out) == 1 else out)

    def _pairs(self, key: str, ticks: list[tuple[int, int]]) -> list[tuple[Sequence[float] | None, Sequence[float]]]:
        """GPU `key`'s (start, end) cause vectors over each stretch of ticks it has
        signals for."""
        g = self.gpus.get(key)
        if g is None:
            return []
        out = []
        for i0, i1 in ticks:
            pair = g.signals_within(i0, i1, self.ticks)
            if pair is None:    # shorter than the checkpoint spacing: bounded from outside
                end = g.signals_at(i1, end=True)
                pair = (g.signals_at(i0 - 1, end=False), end) if end is not None else None
            if pair is not None:
                out.append(pair)
        return out

    def ordered_gpus(self) -> list[GpuTrack]:
        """Node, then GPU index. Sorted once per set of GPUs: the report asks for it
        per GPU, which at a thousand GPUs was most of the analysis."""
        if self._order[0] != len(self.gpus):
            self._order = (len(self.gpus), sorted(self.gpus.values(),
                                                  key=lambda g: gpu_sort_key(g.node + ":" + g.gpu)))
        return list(self._order[1])


class Collector:
    """Feed it every Snapshot of a run, in order, then call end() with the last."""

    def __init__(self, rec: Recording, node_and_gpu: Callable[[str], tuple[str, str]]):
        self.rec = rec
        self.node_and_gpu = node_and_gpu
        self._every = max(1, math.ceil(SIGNALS_EVERY_SECONDS / rec.interval - 1e-9))

    def add(self, snap: Snapshot) -> None:
        rec = self.rec
        i = rec.ticks
        # ticks are evenly spaced on the source timeline even across gaps, where the
        # engine's clock (the latest sample) stands still
        if i == 0:
            t = snap.t if snap.t is not None else 0.0
        else:
            t = rec.times[-1] + rec.interval
            if snap.t is not None and snap.t > t:   # a final, partial tick
                t = snap.t
        rec.times.append(t)
        for v in snap.gpus:   # every GPU of the snapshot gets one value per track
            k = v.info.gpu
            g = rec.gpus.get(k)
            if g is None:
                node, gpu = self.node_and_gpu(k)
                g = rec.gpus[k] = GpuTrack(k, node, gpu)
                g.pad(i)
            if v.workload:
                g.workload = v.workload
            tot = v.totals            # a new Integrals each tick, which nothing changes
            prev = g.prev
            if prev is None or tot.sampled < prev.sampled:     # first tick, or the GPU was re-adopted
                prev = _ZERO
            g.busy.append(tot.busy - prev.busy)
            g.active.append(tot.active - prev.active)
            g.spin_wait.append(tot.spin_wait - prev.spin_wait)
            g.idle.append(tot.idle - prev.idle)
            g.sampled.append(tot.sampled - prev.sampled)
            g.prev = tot
            x = v.deviation_busy
            g.dev_busy.append(NAN if x is None else x)
            x = v.deviation_active
            g.dev_active.append(NAN if x is None else x)
            costs = v.costs
            if costs is None:
                g.cost_active.append(NAN)
                g.cost_busy.append(NAN)
            else:
                g.cost_active.append(costs[0])
                g.cost_busy.append(costs[1])
            g.lost_to = v.lost_to
            sums = v.cause_sums
            n, w = sums[POWER_N], sums[POWER_SUM]
            pn, pw = g.prev_power if n >= g.prev_power[0] else (0.0, 0.0)   # counted anew: re-adopted
            g.power.append((w - pw) / (n - pn) if n > pn else NAN)
            g.prev_power = (n, w)
            if i % self._every == 0:
                vec = v.signals
                g.signals.extend(vec if vec is not None else cause.vector(v.cause_sums, tot, v.counters))
                g.signal_ticks.append(i)
        added = False
        for gv in snap.groups:
            gr = rec.groups.get(gv.workload)
            if gr is None:
                gr = rec.groups[gv.workload] = GroupTrack(gv.workload)
                gr.pad(i)
                added = True
            if gv.gpus != gr.last_members:   # sorted only when the membership moves
                gr.gpus = sorted(set(gr.gpus) | set(gv.gpus), key=gpu_sort_key)
                gr.last_members = gv.gpus
            gr.holding.append(1 if gv.holding else 0)
            if gv.stall_seconds < gr.prev_stall:       # the group ended and came back
                gr.prev_stall = 0.0
            gr.stall.append(gv.stall_seconds - gr.prev_stall)
            gr.prev_stall = gv.stall_seconds
            gr.imbalance.append(NAN if gv.imbalance is None or gv.imbalance_explained else gv.imbalance)
            if gv.lost:
                gr.lost = dict(gv.lost)
            # the counted episodes that came since the last tick (the snapshot keeps
            # only the latest few hundred)
            new = gv.stalls_total - gr.seen
            if new > 0:
                gr.episodes.extend(gv.episodes[:len(gv.episodes) - gv.pending][-new:])
                gr.seen = gv.stalls_total
        # tracks the snapshot did not reach (a GPU or group gone) are padded to this tick;
        # when it reached them all, none is short
        n = i + 1
        if len(snap.gpus) != len(rec.gpus):
            for g in rec.gpus.values():
                g.pad(n)
        if len(snap.groups) != len(rec.groups) or added:
            here = {gv.workload for gv in snap.groups}
            for gr in rec.groups.values():
                gr.pad(n)
                if gr.workload not in here:   # the job ended: its tracker, if it comes back, counts anew
                    gr.seen = 0

    def end(self, last: Snapshot) -> None:
        """The record ends at the last snapshot: the episodes it makes final (those
        pending in case a later stall merged with them, and a stall the end cut, an
        open episode: analysis.coidle), and each GPU's cause signals at the end."""
        rec = self.rec
        for gv in last.groups:
            rec.groups[gv.workload].episodes.extend(gv.ending)
        rec.power_averaged = last.power_averaged
        for v in last.gpus:
            rec.gpus[v.info.gpu].signals_end = cause.vector(v.cause_sums, v.totals, v.counters)


def collect(snapshots: Iterable[Snapshot], rec: Recording,
            node_and_gpu: Callable[[str], tuple[str, str]],
            progress: Callable[[float], None] | None = None) -> Recording:
    """The Recording of a run's snapshots (drive.run_offline's, every tick in order)."""
    c = Collector(rec, node_and_gpu)
    snap = None
    for n, snap in enumerate(snapshots):
        c.add(snap)
        if progress is not None and n % 50 == 0 and snap.t is not None:   # cheap: Progress throttles
            progress(snap.t)
    if snap is not None:
        c.end(snap)
    if rec.ticks and not any(g.sampled[i] > 0 for g in rec.gpus.values() for i in range(rec.ticks)):
        rec.notes.append("no GPU delivered two samples in a row: nothing to integrate")
    return rec
