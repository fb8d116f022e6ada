"""The stateful heart: turns PollResults into immutable Snapshots.

    ingest(PollResult)  — integrate new samples into per-GPU counters and state runs
    analyze(wall)       — close the tick: windows, peer groups, stalls, balance → Snapshot

No threads and no clock of its own (the caller passes wall time): the one loop that
drives it (drive.py) runs it live under the sampler thread, and offline over a
replayed log as fast as the CPU allows (`drive.run_offline`), in the post-mortem
report and in the benchmarks.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from statistics import median

from .analysis import (Episode, Integrals, Run, StallTracker, activity_of, imbalance, integrate_sample,
                       load_balance, peer_deviation, spin_gate_watts)
from .analysis import cause
from .analysis.activity import PowerLevels, share_of
from .analysis.period import dominant_rhythm, stopped
from .analysis.thresholds import value
from .analysis.verdict import COST, LOSS_KEYS, Persistence, imbalance_explained, peer_wait, straggler_signal
from .model import ATTRIBUTION_LABELS, DeviceInfo, PollResult, Reading, Sample, gpu_sort_key

# Memory in use at or above this marks a GPU as holding a workload (a CUDA context
# alone costs ~0.5 GiB; an idle GPU shows a few MiB, a display a few hundred).
HOLD_MIN_BYTES = value("hold_min_bytes")
HOLD_MIN_FRACTION = value("hold_min_ratio")
POWER_EDGE = value("power_edge_ratio")   # read once: it is used at every sample
IMBALANCE = value("imbalance_alert_ratio")
IMBALANCE_MIN_ACTIVE = value("imbalance_min_active_ratio")


class GpuView(NamedTuple):
    """One GPU in a Snapshot. Immutable like the frozen dataclasses around it, but a
    named tuple: one is made per GPU per tick, and a frozen dataclass's __init__
    (object.__setattr__ per field) cost several times the tuple's, the largest single
    cost of a tick offline."""
    info: DeviceInfo
    attribution: tuple[tuple[str, str], ...]   # label name, value (only non-empty ones)
    workload: str
    up: bool
    error: str | None
    totals: Integrals
    util_ratio: float | None                   # mean over the analysis window
    active_ratio: float | None
    deviation_busy: float | None
    deviation_active: float | None
    # the share of its peers' time they spent waiting for it over the window
    # (analysis.verdict: the larger of its hot and cold cost, 0 at least); None
    # outside a peer group of straggler_min_gpus
    peer_wait: float | None
    gauges: dict[str, float]
    counters: dict[str, Any]
    last_sample_wall: float | None
    # (signal, z) while the GPU is a confirmed straggler (analysis.verdict), else None
    straggler: tuple[str, float] | None = None
    # why, while it is one (analysis.cause over its span against its peers)
    cause: cause.Verdict | None = None
    # (hot, cold) cost this window (analysis.verdict.peer_wait), None outside a group
    costs: tuple[float, float] | None = None
    # GPU-seconds its peers lost waiting for it while it was a straggler (booked)
    lost_to: float = 0.0
    # its running gauge sums of the cause signals (analysis.cause.accumulate); with
    # `totals` and `counters`, analysis.cause.vector makes its cumulative cause vector,
    # which the report keeps to judge a straggler's span afterwards
    cause_sums: tuple[float, ...] = ()
    # that vector itself where the engine made it this tick (a straggler was judged
    # among these peers: at fleet size, every GPU of a job every tick), else None; the
    # report keeps it rather than making it a second time
    signals: tuple[float, ...] | None = None


def _peer_wait(costs: tuple[float, float]) -> float:
    """GpuView.peer_wait of its (hot, cold) costs: the larger, 0 at least."""
    # max(0.0, hot, cold) spelt out (once per GPU per tick); NaN compares as max does
    hot, cold = costs
    w = hot if hot > 0.0 else 0.0
    return cold if cold > w else w


@dataclass(frozen=True, slots=True)
class GroupView:
    workload: str
    gpus: tuple[str, ...]
    holding: bool
    stall_seconds: float
    stalls_total: int
    holding_seconds: float
    in_stall: bool
    imbalance: float | None
    load_balance: float | None
    stall_period: float | None
    # 1 while stragglers explain the spread (analysis.verdict), so it is not imbalance
    imbalance_explained: bool = False
    # GPU-seconds lost, cumulative, by (reason, cause): every pair of LOSS_KEYS
    lost: tuple[tuple[tuple[str, str], float], ...] = ()
    # the group's recent stall episodes and the start of a stall in progress, as the
    # live page draws them (analysis.coidle.StallTracker); the last `pending` of the
    # episodes may still merge with a later stall, the others are counted and final
    episodes: tuple[Episode, ...] = ()
    open_since: float | None = None
    pending: int = 0
    # what a record ending at this tick adds to the counted episodes: the pending
    # ones and the stall in progress as an open episode (StallTracker.ending_episodes)
    ending: tuple[Episode, ...] = ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    wall: float                 # wall-clock time the snapshot was made
    t: float | None             # source-timeline time it covers up to
    node: str
    source: str
    gpus: tuple[GpuView, ...]
    groups: tuple[GroupView, ...]
    call_errors: dict[str, int]
    last_success_wall: float | None
    source_events: dict[tuple[str, str], int] = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)   # the sampler's, set by the sampler
    # per GPU, (t, busy, active) of each recent tick, oldest first
    history: dict[str, tuple[tuple[float, float | None, float | None], ...]] = field(default_factory=dict)
    # per peer group (workload), (t, its cumulative sync-stall seconds) at each recent
    # tick on the same ticks: the live page's stall strip (stalls shorter than a tick)
    stall_history: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    # the source's power lags utilisation steps (Engine.power_averaged)
    power_averaged: bool = False


class _Gpu:
    """Mutable per-GPU state (engine-private)."""

    __slots__ = ("info", "up", "error", "last_t", "last_wall", "totals", "tick", "window",
                 "win", "max_power", "idle_floor", "gauges", "counters", "src_attr", "holds_hint", "runs",
                 "history", "spacing", "persistence", "prev_sample", "prev2_sample", "edges", "sharp", "signals",
                 "levels", "share", "hold_min", "attr_labels")

    def __init__(self, info: DeviceInfo, window_ticks: int, history_ticks: int):
        self.info = info
        self.up = True
        self.error: str | None = None
        self.last_t: float | None = None
        self.last_wall: float | None = None
        self.totals = Integrals()
        self.tick = Integrals()
        self.window: deque[Integrals] = deque()
        self.win = Integrals()
        self.max_power: float | None = None
        self.idle_floor: float | None = None   # lowest power seen at idle utilisation
        self.gauges: dict[str, float] = {}
        self.counters: dict[str, Any] = {}
        self.src_attr: dict[str, str] | None = None
        # (the attribution they were made of, its labels in the exporter's order): made
        # again only when the attribution changes, not for every view of every tick
        self.attr_labels: tuple[dict[str, str], tuple[tuple[str, str], ...]] | None = None
        self.holds_hint: bool | None = None
        self.runs: list[Run] = []
        self.spacing: float | None = None      # the latest sample spacing
        self.persistence = Persistence()       # live straggler confirmation
        # does power follow utilisation steps within a sample, or is it an average?
        self.prev_sample: Sample | None = None
        self.prev2_sample: Sample | None = None
        self.edges = 0
        self.sharp = 0
        # its own spin-wait and working power, and the (S, W) the active integral reads
        # its share between while power is averaged (analysis.activity), else None
        self.levels = PowerLevels()
        self.share: tuple[float, float] | None = None
        self.hold_min: tuple[float | None, float] = (None, HOLD_MIN_BYTES)   # (memory total, bytes held)
        # running gauge sums of the cause signals (analysis.cause.accumulate), one update per reading
        self.signals = cause.new_sums()
        # (t, busy fraction, active fraction) per tick, for the live heatmap page
        self.history: deque[tuple[float, float | None, float | None]] = deque(maxlen=history_ticks)


class Engine:
    SHARE_TICKS = 10   # the averaged-power share's levels are judged again every this many ticks

    def __init__(self, cfg: Any, devices: list[DeviceInfo], source_name: str, attributor: Any = None,
                 sample_spacing: float | None = None, history: bool = True, util_window: float = 0.0,
                 power_kind: bool | None = None):
        self.cfg = cfg
        self.power_kind = power_kind      # the source's Source.power_averaged
        self.util_window = util_window    # the source's utilisation averaging window (analysis.coidle)
        self.node = cfg.node_name
        self.source_name = source_name
        self.attributor = attributor
        self.activity_mode = cfg.activity
        self.idle_thr = cfg.idle_threshold
        self.gate = cfg.power_gate
        self.window_ticks = max(1, round(cfg.analysis_window / cfg.analysis_interval))
        # the per-GPU tick history the live page draws; offline nobody reads it
        self.history_ticks = max(1, round(cfg.history / cfg.analysis_interval)) if history else 0
        # a longer silence than this is a gap (uncovered), not one long sample; the
        # source says how far apart its samples are by nature (Source.sample_spacing)
        self.max_gap = max(3.0, 10 * cfg.sample_interval, 3 * (sample_spacing or 0.0))
        self.gpus: dict[str, _Gpu] = {}
        self.trackers: dict[str, StallTracker] = {}
        self._rhythm: dict[str, tuple[int, tuple[float, float] | None]] = {}   # per group: (changes, rhythm)
        self._episode_copies: dict[str, tuple[int, tuple[Episode, ...], int]] = {}   # per group: (changes, episodes, pending)
        self._stall_history: dict[str, deque[tuple[float, float]]] = {}       # per group, with the GPUs' history
        # per straggler candidate: (start of its deviating run, every group member's
        # cause signals as the run's first tick began); the span's aggregates are now
        # minus then
        self._marks: dict[str, tuple[float, dict[str, list[float]]]] = {}
        # every GPU's view at the previous tick: where a deviating run's span begins
        self._before: dict[str, GpuView] = {}
        # per confirmed straggler: (ticks until it is judged again, verdict). Once per
        # analysis window: a span is at least straggler_min_span_seconds long, so a
        # window more changes its figures little, and judging every tick would cost
        # as much as the rest of the tick
        self._verdicts: dict[str, tuple[int, cause.Verdict]] = {}
        # within one tick, what several stragglers' judgements share (cleared at each
        # tick): every GPU's cause vector now and at the tick before, one mark for the
        # candidates that start together, and each mark's span as a cause.Stretch. A fleet's
        # job has a deviating rank per node, each judged against every GPU of the job:
        # computed per candidate, that cost candidates × GPUs
        self._tick_now: dict[str, list[float]] = {}
        self._tick_before: dict[str, list[float]] = {}
        self._tick_marks: dict[tuple[str, ...], dict[str, list[float]]] = {}
        self._tick_stretches: dict[tuple[int, int], tuple[dict, list[str], dict[str, int], cause.Stretch]] = {}
        # the vectors slot by slot (cause.transposed): now's per member list, once a
        # tick; each mark's, by the mark's id, while a candidate holds it
        self._tick_cols: dict[tuple[str, ...], list] = {}
        self._mark_cols: dict[int, tuple[dict, tuple[str, ...], list]] = {}
        # per group: GPU-seconds lost by (reason, cause), cumulative (analysis.verdict)
        self._lost: dict[str, dict[tuple[str, str], float]] = {}
        self._stall_seen: dict[str, float] = {}      # per group: stall seconds already booked
        # per group: stall seconds per tick over the analysis window, and their sum
        self._stall_win: dict[str, tuple[deque[float], list[float]]] = {}
        self._lost_to: dict[str, float] = {}         # per GPU: its peers' waiting booked
        self.call_errors: dict[str, int] = {}
        self.source_events: dict[tuple[str, str], int] = {}
        self.last_success_wall: float | None = None
        self.t: float | None = None
        # power_averaged() is published on every snapshot: judged again only after an edge
        self._edge_looks = 0
        self._power_judged: tuple[int, Any, bool] = (-1, None, False)   # (looks, self.gpus, verdict)
        # the averaged-power share (analysis.activity): levels are watched where power
        # is not declared instantaneous, and judged again every Engine.SHARE_TICKS ticks
        self._share_watch = power_kind is not False and self.activity_mode in ("auto", "power-gated")
        self._share_due = 0
        self.set_devices(devices)

    # ------------------------------------------------------------------ ingest

    def set_devices(self, devices: list[DeviceInfo]) -> None:
        """Adopt a new device list; state of GPUs that remain is kept."""
        new = {}
        for d in devices:
            g = self.gpus.get(d.gpu)
            if g is None:
                g = _Gpu(d, self.window_ticks, self.history_ticks)
            g.info = d
            new[d.gpu] = g
        self._adopt(new)

    def _adopt(self, gpus: dict[str, "_Gpu"]) -> None:
        # dicts keep insertion order: keep them in GPU order once, not at every tick
        self.gpus = {k: gpus[k] for k in sorted(gpus, key=gpu_sort_key)}

    def ingest(self, result: PollResult, wall: float) -> None:
        if result.devices is not None:
            self.set_devices(result.devices)
        for call, n in result.call_errors.items():
            self.call_errors[call] = self.call_errors.get(call, 0) + n
        for key, n in result.events.items():
            self.source_events[key] = self.source_events.get(key, 0) + n
        any_ok = False
        ingest_reading = self._ingest_reading
        for r in result.readings:
            g = self.gpus.get(r.gpu)
            if g is None:   # a reading for an undiscovered entity: adopt it
                g = _Gpu(DeviceInfo(gpu=r.gpu), self.window_ticks, self.history_ticks)
                self._adopt({**self.gpus, r.gpu: g})
            ingest_reading(g, r, wall)
            if r.up:
                any_ok = True
        if any_ok:
            self.last_success_wall = wall

    def _ingest_reading(self, g: _Gpu, r: Reading, wall: float) -> None:
        g.up = r.up
        g.error = r.error
        if r.counters:   # a lost GPU may still report why (XID 79 arrives as an event)
            g.counters = dict(r.counters)
        if not r.up:
            # values of an unreadable GPU would lie; counters keep their last value
            g.gauges = {}
            g.runs.clear()
            g.last_t = None
            return
        if r.gauges:
            g.gauges = dict(r.gauges)
        # the cause signals' gauge sums take every reading of the gauges, at the rate the
        # source read them: a replayed chunk's instants each count with their own values
        if r.instants is not None:
            cause.accumulate_each(g.signals, [gauges for _, gauges, _ in r.instants])
        elif r.gauges:
            cause.accumulate(g.signals, r.gauges)
        g.src_attr = r.attribution
        g.holds_hint = hint = r.holds_workload
        if not r.samples:
            return
        limit = g.gauges.get("power_limit_watts")
        mem_total = g.gauges.get("memory_total_bytes")
        if mem_total != g.hold_min[0]:   # the memory a workload holds, figured once per total
            g.hold_min = (mem_total, max(HOLD_MIN_BYTES, HOLD_MIN_FRACTION * mem_total) if mem_total
                          else HOLD_MIN_BYTES)
        hold_min = g.hold_min[1]
        # G changes only with the power reference: computed again only when that moves
        gate, idle_thr, max_gap, mode = self.gate, self.idle_thr, self.max_gap, self.activity_mode
        watch, levels, tick, runs, share = self._share_watch, g.levels, g.tick, g.runs, g.share
        # the GPU's and the engine's running state as locals, written back after the loop
        max_power, idle_floor, last_t, latest, spacing = g.max_power, g.idle_floor, g.last_t, self.t, g.spacing
        p1, p2 = g.prev_sample, g.prev2_sample
        last = runs[-1] if runs else None
        taken = False
        gate_w = spin_gate_watts(gate, limit, max_power, idle_floor)
        # one pass per sample of a replayed log: what each sample is read for, read once
        for s in r.samples:
            t, u, pw = s.t, s.util, s.power_w
            if pw is not None and pw > 1.0:
                if max_power is None or pw > max_power:
                    g.max_power = max_power = pw
                    gate_w = spin_gate_watts(gate, limit, pw, idle_floor)
                if u is not None and u < idle_thr and (idle_floor is None or pw < idle_floor):
                    g.idle_floor = idle_floor = pw
                    gate_w = spin_gate_watts(gate, limit, max_power, pw)
            prev = last_t
            if prev is not None and t <= prev:
                if t < prev - max_gap:   # the clock jumped back: start over from here
                    last_t = t
                continue                         # duplicate or reordered sample
            last_t = t
            taken = True
            if latest is None or t > latest:
                latest = t
            if prev is None or t - prev > max_gap:
                continue                          # first sample after start or a gap: anchor only
            dt = t - prev
            spacing = dt
            ps, pps = p1, p2
            p1, p2 = s, ps
            if (ps is not None and u is not None and ps.util is not None
                    and abs(u - ps.util) >= POWER_EDGE):
                self._power_edge(g, s, ps, pps, gate_w)
                self._edge_looks += 1
            act = activity_of(s, mode, gate_w)
            util = u if u is not None else act
            if util is None:
                continue
            if act is None:
                act = util
            worked = act   # the active integral's share; co-idle below keeps the gate's `act`
            if watch:
                levels.add(t, dt, u, pw, gate_w)
                if share is not None:
                    worked = share_of(s, mode, act, share)
            integrate_sample(tick, dt, util, worked, idle_thr)
            if hint is not None:
                holds = hint
            else:
                mem = s.memory_used_bytes if s.memory_used_bytes is not None else g.gauges.get("memory_used_bytes")
                holds = mem is not None and mem >= hold_min
            inactive = act < idle_thr
            idle = util < idle_thr
            if (last is not None and last.end == prev and last.inactive == inactive and last.holds == holds
                    and last.idle == idle):
                last.end = t
            else:
                last = Run(prev, t, inactive, holds, idle)
                runs.append(last)
        g.last_t, self.t, g.spacing, g.prev_sample, g.prev2_sample = last_t, latest, spacing, p1, p2
        if taken:
            g.last_wall = wall

    @staticmethod
    def _power_edge(g: "_Gpu", s: Sample, ps: Sample, pps: Sample | None, gate_w: float | None) -> None:
        """A utilisation step between ps and s: did power follow it within a sample?

        Only a step whose busy side draws working power (at or above the spin gate)
        must move power: a step into or out of a spin-wait (busy at idle-level power)
        moves none, whatever the source averages. Utilisation is itself averaged over
        a longer window than instantaneous power, so power may have moved one sample
        before the step: the move is taken from the sample before ps as well."""
        swing = (g.max_power or 0.0) - (g.idle_floor or 0.0)
        if swing <= 0 or gate_w is None or s.power_w is None or ps.power_w is None:
            return
        busy_side = s if (s.util or 0.0) > (ps.util or 0.0) else ps
        if busy_side.power_w is None or busy_side.power_w < gate_w:
            return
        move = abs(s.power_w - ps.power_w)
        if pps is not None and pps.power_w is not None:
            move = max(move, abs(s.power_w - pps.power_w))
        g.edges += 1
        g.sharp += move >= POWER_EDGE * swing

    def power_averaged(self) -> bool:
        """Whether the source's power lags utilisation steps by more than a sample —
        an average such as nvidia-smi's 1 s power.draw — so that spin-waits shorter
        than that average cannot be told from work by the power gate. Never for a
        source whose power is an instant (power.draw.instant): a lag there is the
        utilisation's own averaging window, not the power's."""
        if self.power_kind is False:
            return False
        looks, gpus, verdict = self._power_judged
        if looks != self._edge_looks or gpus is not self.gpus:   # _adopt makes a new dict
            verdict = self._power_judge()
            self._power_judged = (self._edge_looks, self.gpus, verdict)
        return verdict

    def _power_judge(self) -> bool:
        sharp = self._sharp_share()
        return sharp is not None and sharp < value("power_sharp_share_ratio")

    def _sharp_share(self) -> float | None:
        """The median GPU's share of utilisation steps that power followed within a
        sample, or None with too few steps to judge. Each GPU judges its own edges and
        the median GPU decides, so that one GPU's many steps (a straggler's) do not
        speak for the whole source."""
        judged = [g for g in self.gpus.values() if g.edges]
        if sum(g.edges for g in judged) < value("power_edges_min_count"):
            return None
        return median(g.sharp / g.edges for g in judged)

    def _judge_share(self) -> None:
        """Each GPU's (S, W) for the averaged-power share, or None for all of them:
        only while power is not known to be instantaneous and every GPU that has been busy has its
        levels, so that no GPU is judged by the gate beside peers judged by the
        share. A GPU that never waited long enough to show its own spin level
        (the rank that writes the checkpoints its peers wait for) takes the median
        of its peers' (analysis.activity)."""
        busy = [g for g in self.gpus.values() if g.up and (g.levels.work_s > 0 or g.levels.spin_s > 0)]
        spins = [v for v in (g.levels.spin_level() for g in busy) if v is not None]
        found: list[tuple[_Gpu, tuple[float, float]]] = []
        if busy and not self._power_instant():
            peers = median(spins) if spins else None
            for g in busy:
                gate_w = spin_gate_watts(self.gate, g.gauges.get("power_limit_watts"), g.max_power, g.idle_floor)
                own = g.levels.spin_level()
                # no GPU has waited long enough to show a spin level: its idle floor
                # bounds it from below (analysis.activity: a lower bound of the cost)
                lv = g.levels.levels(gate_w, own if own is not None else peers if peers is not None else g.idle_floor)
                if lv is None:
                    break
                found.append((g, lv))
        on = len(found) == len(busy) and bool(found)
        for g in self.gpus.values():
            g.share = None
        if on:
            for g, lv in found:
                g.share = lv

    def _power_instant(self) -> bool:
        """Power known to be instantaneous: declared so by the source, or following
        utilisation steps within a sample on the median GPU (_power_judge's edges).
        Not the negation of power_averaged(): too few edges to judge leave it open."""
        if self.power_kind is False:
            return True
        if self.power_kind:
            return False
        sharp = self._sharp_share()
        return sharp is not None and sharp >= value("power_sharp_share_ratio")

    # ------------------------------------------------------------------ analyze

    def _attribution(self, g: _Gpu) -> dict[str, str] | None:
        if self.attributor is not None:
            a = self.attributor.lookup(g.info)
            if a is not None:
                return a
        return g.src_attr

    def analyze(self, wall: float) -> Snapshot:
        """The Snapshot of this tick, built whole: nothing changes it afterwards."""
        if self._share_watch:
            self._share_due -= 1
            if self._share_due <= 0:
                self._share_due = self.SHARE_TICKS
                self._judge_share()
        # the vectors now of the tick before are this tick's before (the GPU's view of
        # then has the same sums, totals and counters)
        self._tick_before, self._tick_now, self._tick_marks, self._tick_stretches = self._tick_now, {}, {}, {}
        self._tick_cols = {}
        if self._mark_cols:   # drop the columns of marks no candidate holds any more
            live = {id(m[1]) for m in self._marks.values()}
            self._mark_cols = {i: c for i, c in self._mark_cols.items() if i in live}
        # 1. close the tick for every GPU
        window_ticks, history = self.window_ticks, self.history_ticks > 0
        for g in self.gpus.values():
            tick, g.tick = g.tick, Integrals()
            # a new object each tick, never changed after: the GPU's view shares it
            tot = g.totals
            g.totals = Integrals(tot.busy + tick.busy, tot.active + tick.active, tot.spin_wait + tick.spin_wait,
                                 tot.idle + tick.idle, tot.sampled + tick.sampled)
            g.window.append(tick)
            g.win.add(tick)
            while len(g.window) > window_ticks:
                g.win.sub(g.window.popleft())
            if history:   # offline (history=False) nobody draws it
                g.history.append((self.t or 0.0,
                                  tick.busy / tick.sampled if tick.sampled > 0 else None,
                                  tick.active / tick.sampled if tick.sampled > 0 else None))

        # 2. peer groups: one per workload; without attribution, the whole node
        attribution = ({k: self._attribution(g) for k, g in self.gpus.items()} if self.attributor is not None
                       else {k: g.src_attr for k, g in self.gpus.items()})
        members: dict[str, list[str]] = {}   # in GPU order, like self.gpus
        for k, a in attribution.items():
            members.setdefault((a or {}).get("workload", ""), []).append(k)
        unassigned_is_idle = self.attributor is not None

        groups: list[GroupView] = []
        deviations: dict[str, tuple[Any, ...]] = {}
        verdicts: dict[str, cause.Verdict] = {}
        for workload, keys in sorted(members.items()):
            up = [self.gpus[k] for k in keys if self.gpus[k].up]
            tracker = self.trackers.get(workload)
            if tracker is None:
                tracker = self.trackers[workload] = StallTracker(self.cfg.min_stall, window=self.util_window)
            observed = [g for g in up if g.last_t is not None]
            if observed and not (unassigned_is_idle and workload == ""):
                until = min(g.last_t for g in observed)
                if tracker.in_stall or tracker.pending:   # the grid only matters for counting them
                    spacing = [g.spacing for g in observed if g.spacing is not None]
                    if spacing:
                        tracker.grid = max(spacing)
                tracker.advance([g.runs for g in observed], until)
                for g in observed:
                    while g.runs and g.runs[0].end <= until:
                        g.runs.pop(0)
            elif observed:
                for g in observed:
                    g.runs.clear()
            busy = {g.info.gpu: g.win.busy / g.win.sampled for g in up if g.win.sampled > 0}
            active = {g.info.gpu: g.win.active / g.win.sampled for g in up if g.win.sampled > 0}
            idle_group = unassigned_is_idle and workload == ""
            imb = lb = None
            explained = False
            lost = self._lost.get(workload)
            if lost is None:
                lost = self._lost[workload] = dict.fromkeys(LOSS_KEYS, 0.0)
            # every GPU of the group loses each stalled second (analysis.verdict)
            stalled = tracker.stall_seconds - self._stall_seen.get(workload, 0.0)
            if stalled > 0:
                lost[("sync_stall", "")] += stalled * len(up)
            self._stall_seen[workload] = tracker.stall_seconds
            win = self._stall_win.get(workload)
            if win is None:
                win = self._stall_win[workload] = (deque(), [0.0])
            win[0].append(max(stalled, 0.0))
            win[1][0] += max(stalled, 0.0)
            while len(win[0]) > window_ticks:
                win[1][0] -= win[0].popleft()
            if active and not idle_group:
                xs = list(active.values())
                imb = imbalance(xs, self.idle_thr)
                lb = load_balance(xs, self.idle_thr)
            if not idle_group:
                db = peer_deviation(busy)
                da = peer_deviation(active)
            if not idle_group and len(active) < value("straggler_min_gpus"):
                for k in active:   # measured, but who waits for whom is undefined
                    deviations[k] = (db.get(k, 0.0), da.get(k, 0.0), None, None)
            elif not idle_group:
                ma, mb = median(active.values()), median(busy.values())
                ms = median(g.win.spin_wait / g.win.sampled for g in up if g.win.sampled > 0)
                iv = self.cfg.analysis_interval
                judged = []
                if not tracker.holding:   # the job ended: what recurs is a later job's
                    for k in active:
                        self.gpus[k].persistence.job_ended()
                for k in active:
                    zb, za = db.get(k, 0.0), da.get(k, 0.0)
                    hot, cold = peer_wait(active[k], busy.get(k, mb), ma, mb, ms)
                    pers = self.gpus[k].persistence
                    # the common case, cheaply: no cost worth a look and nothing to confirm
                    if hot < COST and cold < COST and pers.since is None:
                        deviations[k] = (zb, za, None, (hot, cold))
                        continue
                    flag = straggler_signal(za, zb, hot, cold)
                    judged.append((k, zb, za, hot, cold, flag))
                # the peers that wait are the GPUs that do not straggle: several
                # stragglers at once (a slow node's GPUs in a workload) share them
                slow = sum(1 for j in judged if j[5] is not None or self.gpus[j[0]].persistence.since is not None)
                share = (len(active) - slow) / slow if slow else 0.0
                stall_share = win[1][0] / (len(win[0]) * iv) if win[0] else 0.0
                peers = list(active)
                for k, zb, za, hot, cold, flag in judged:
                    pers = self.gpus[k].persistence
                    is_hot = flag[0] == "active" if flag is not None else pers.sign >= 0
                    # a cold straggler's peers spin-wait, which is a sync stall where the
                    # source sees spin-waiting as inactive: that time is booked as the
                    # stall already, so the straggler gets only what the stalls do not hold
                    cost = hot if is_hot else cold - stall_share
                    confirmed, booked = pers.update(self.t or 0.0, iv, flag, max(cost, 0.0) * iv * share,
                                                    hot if is_hot else cold)
                    deviations[k] = (zb, za, confirmed, (hot, cold))
                    v = self._cause(k, pers.since, peers, confirmed is not None)
                    if v is not None:
                        verdicts[k] = v
                        if booked > 0:
                            lost[("straggler", v.cause)] += booked
                            self._lost_to[k] = self._lost_to.get(k, 0.0) + booked
                # a spread the GPUs of a deviating run explain is theirs, not imbalance
                # (analysis.verdict, the report's rule)
                explained = imb is not None and imbalance_explained(
                    active, [k for k in active if self.gpus[k].persistence.since is not None])
            if (imb is not None and not explained and imb >= IMBALANCE
                    and max(active.values()) >= IMBALANCE_MIN_ACTIVE):
                top = max(active.values())
                lost[("imbalance", "")] += sum(top - x for x in active.values()) * self.cfg.analysis_interval
            episodes, pending = self._episodes(workload, tracker)
            if history:
                self._stall_history.setdefault(workload, deque(maxlen=self.history_ticks)).append(
                    (self.t or 0.0, tracker.stall_seconds))
            groups.append(GroupView(
                workload=workload,
                gpus=tuple(keys),
                holding=tracker.holding,
                stall_seconds=tracker.stall_seconds,
                stalls_total=tracker.stalls_total,
                holding_seconds=tracker.holding_seconds,
                in_stall=tracker.in_stall,
                imbalance=imb,
                load_balance=lb,
                stall_period=self._period(workload, tracker),
                imbalance_explained=explained,
                lost=() if idle_group else tuple(lost.items()),
                episodes=episodes,
                open_since=tracker.open_since,
                pending=pending,
                ending=tuple(tracker.ending_episodes()),
            ))
        for k in [k for k in self._marks if k not in deviations or self.gpus[k].persistence.since is None]:
            del self._marks[k]
            self._verdicts.pop(k, None)
        for gone in set(self.trackers) - set(members):   # the job ended: its series go too
            del self.trackers[gone]
            self._lost.pop(gone, None)
            self._stall_seen.pop(gone, None)
            self._stall_win.pop(gone, None)
            self._rhythm.pop(gone, None)
            self._episode_copies.pop(gone, None)
            self._stall_history.pop(gone, None)

        views = []
        lost_to, tick_now = self._lost_to, self._tick_now
        for k, g in self.gpus.items():
            a = attribution[k] or {}
            labels = g.attr_labels
            if labels is None or labels[0] != a:
                labels = g.attr_labels = (dict(a), tuple((n, a[n]) for n in _attr_label_names(a) if a.get(n)))
            dev = deviations.get(k)
            win, up = g.win, g.up
            # positional, in GpuView's field order: one is made per GPU per tick, and
            # keywords cost about as much again as the tuple
            views.append(GpuView(
                g.info,
                labels[1],                                                                     # attribution
                a.get("workload", ""),
                up,
                g.error,
                g.totals,
                win.busy / win.sampled if win.sampled > 0 and up else None,                    # util_ratio
                win.active / win.sampled if win.sampled > 0 and up else None,                  # active_ratio
                dev[0] if dev else None,                                                       # deviation_busy
                dev[1] if dev else None,                                                       # deviation_active
                _peer_wait(dev[3]) if dev and dev[3] else None,                                # peer_wait
                g.gauges,
                g.counters,
                g.last_wall,                                                                   # last_sample_wall
                dev[2] if dev else None,                                                       # straggler
                verdicts.get(k),                                                               # cause
                dev[3] if dev else None,                                                       # costs
                lost_to.get(k, 0.0),
                tuple(g.signals),                                                              # cause_sums
                None if (vec := tick_now.get(k)) is None else tuple(vec),                      # signals
            ))
        self._before = {k: v for k, v in zip(self.gpus, views)}
        return Snapshot(wall=wall, t=self.t, node=self.node, source=self.source_name,
                        gpus=tuple(views), groups=tuple(groups),
                        call_errors=dict(self.call_errors), source_events=dict(self.source_events),
                        last_success_wall=self.last_success_wall,
                        history={k: tuple(g.history) for k, g in self.gpus.items()} if self.history_ticks else {},
                        stall_history={w: tuple(h) for w, h in self._stall_history.items()},
                        power_averaged=self.power_averaged())

    def _episodes(self, workload: str, tracker: StallTracker) -> tuple[tuple[Episode, ...], int]:
        """The group's recent episodes and how many of them are pending, copied only
        when one came or changed."""
        cached = self._episode_copies.get(workload)
        if cached is None or cached[0] != tracker.changes:
            eps = tuple(tracker.recent_episodes())
            cached = self._episode_copies[workload] = (tracker.changes, eps, len(eps) - len(tracker.episodes))
        return cached[1], cached[2]

    def signals(self, k: str) -> list[float]:
        """GPU k's cumulative cause signals now (analysis.cause.vector)."""
        g = self.gpus[k]
        return cause.vector(g.signals, g.totals, g.counters)

    def _signals_now(self, k: str) -> list[float]:
        """signals(k), once a tick."""
        v = self._tick_now.get(k)
        if v is None:
            v = self._tick_now[k] = self.signals(k)
        return v

    def _signals_before(self, k: str) -> list[float]:
        """GPU k's cumulative cause signals at the previous tick (now, for a GPU that
        had none): a span from a deviating run's first tick holds that tick, as the
        report's spans do, however long a tick is. Once a tick."""
        got = self._tick_before.get(k)
        if got is None:
            v = self._before.get(k)
            got = self._tick_before[k] = (self._signals_now(k) if v is None
                                          else cause.vector(v.cause_sums, v.totals, v.counters))
        return got

    def _cause(self, k: str, since: float | None, peers: list[str], confirmed: bool) -> cause.Verdict | None:
        """Mark the group's cause signals when GPU k starts deviating; while it is a
        confirmed straggler, the verdict over the span since then."""
        if since is None:
            return None
        mark = self._marks.get(k)
        if mark is None or mark[0] != since:
            # candidates of a group that start in one tick share one mark (read only)
            key = tuple(peers)
            start = self._tick_marks.get(key)
            if start is None:
                start = self._tick_marks[key] = {p: self._signals_before(p) for p in peers}
            mark = self._marks[k] = (since, start)
        if not confirmed:
            self._verdicts.pop(k, None)
            return None
        cached = self._verdicts.get(k)
        if cached is not None and cached[0] > 0:
            self._verdicts[k] = (cached[0] - 1, cached[1])
            return cached[1]
        # the span of the group's GPUs in the mark (a cause.Stretch), shared by the
        # candidates judged on that mark among these peers this tick (both held in the
        # entry, so neither id is another object's within the tick)
        key = (id(mark[1]), id(peers))
        entry = self._tick_stretches.get(key)
        if entry is None:
            start = mark[1]
            keys = tuple(p for p in peers if p in start)
            now = [self._signals_now(p) for p in keys]
            # the vectors slot by slot: now's once a tick, a mark's once for every tick
            # it is judged on (the same keys: the group's members while they last)
            ends = self._tick_cols.get(keys)
            if ends is None:
                ends = self._tick_cols[keys] = cause.transposed(now)
            got = self._mark_cols.get(id(start))
            if got is None or got[0] is not start or got[1] != keys:
                got = self._mark_cols[id(start)] = (start, keys, cause.transposed([start[p] for p in keys]))
            entry = self._tick_stretches[key] = (start, peers, {p: j for j, p in enumerate(keys)},
                                                 cause.Stretch([(start[p], v) for p, v in zip(keys, now)],
                                                               ends=ends, starts=got[2]))
        v = cause.verdict_of(entry[3], entry[2][k], self.power_averaged())
        self._verdicts[k] = (self.window_ticks - 1, v)
        return v

    def _period(self, workload: str, tracker: StallTracker) -> float | None:
        """analysis.period over the group's recent episodes; the rhythm is only
        recomputed when an episode came or changed, the staleness check every tick."""
        cached = self._rhythm.get(workload)
        if cached is None or cached[0] != tracker.changes:
            eps = tracker.recent_episodes()
            cached = self._rhythm[workload] = (tracker.changes, dominant_rhythm([e.start for e in eps],
                                                                                [e.duration for e in eps])
                                               if eps else None)
        if cached[1] is None:
            return None
        p, last = cached[1]
        return None if stopped(last, p, tracker.processed_until) else p


def _attr_label_names(a: dict[str, str]) -> list[str]:
    return list(ATTRIBUTION_LABELS) + sorted(n for n in a if n.startswith("label_"))
