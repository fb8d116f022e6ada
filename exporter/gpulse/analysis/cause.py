"""Why a straggler is slow: its own signals over its span against its peers'.

Pure and clock-free. The engine (live) and the report (afterwards) keep, per GPU, a
cumulative signal vector (`accumulate`, one call per reading of its gauges, at the
source's own rate: every row of a log; `accumulate_each`, a replayed chunk's readings
at once, to the same bits); the difference
of two vectors is the GPU's `Aggregate` over that stretch (`aggregate`), and
`classify` compares the straggler's aggregate with its peers' (median) to name the
cause. Every number comes from analysis/thresholds.py; docs/activity.md ("Why a
straggler is slow") states the rules.

Rules, first match wins (a throttled or degraded GPU is never told to rebalance):
  throttling         a thermal or power throttle reason held its clocks down for
                     >= cause_throttle_share_ratio of the span more than its peers';
                     without throttle reasons from the source: SM clock below the
                     peers by cause_clock_gap_ratio with temperature or power at the limit
  degraded_hardware  hw_slowdown that share more than peers, a row remapping pending,
                     uncorrectable ECC errors or XID errors in the span, PCIe replays
                     or NVLink errors rising by cause_pcie_replays_count /
                     cause_nvlink_errors_count more than peers', a PCIe link width
                     (generation: not for a cold GPU, which lowers it while idle) at
                     or below cause_link_ratio of its maximum and of its peers', or
                     (hot, with throttle reasons known) SM clock below peers with no
                     reason set
  (by direction: busy below the peers' median by straggler_cost_ratio is cold,
   busy or active above it is hot, active below it with busy level is light)
  off_gpu            cold while the peers wait for it: they spin-wait (busy at partial
                     power, blocked in the collective) at least cause_peers_wait_ratio
                     of the busy time it lacks against them; its rank is busy off the GPU
  more_work          hot with clocks in line (throttle reasons known, or SM clock
                     within cause_clock_gap_ratio of peers): busy longer per step; or
                     cold/light while peers really compute: it gets less work; never
                     with a throttle reason held or a link below its maximum of its
                     own, even as on its peers (then unknown, naming it)
  unknown            otherwise; `missing` names what would decide it (throttle_reasons,
                     sm_clock, instant_power when 1 s-averaged power hides spin-waiting)
"""
from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass
from operator import add, sub
from statistics import median
from typing import Any, Callable, Mapping, Sequence

from ..catalog import THROTTLE_REASONS
from .thresholds import value

CAUSES = ("throttling", "degraded_hardware", "more_work", "off_gpu", "unknown")

# lower-case, no final stop: the report writes "Remedy: <remedy>."
REMEDIES: dict[str, str] = {
    "throttling": "drain or cool the node: check this GPU's power cap, cooling and airflow (do not rebalance "
                  "the work: the GPU is slowed, not overloaded)",
    "degraded_hardware": "drain the node, run diagnostics (dcgmi diag -r 3), then reset or replace the GPU "
                         "(do not rebalance the work onto a failing part)",
    "more_work": "rebalance the work: data or sequence-length bucketing, pipeline-stage or tensor-parallel "
                 "sizing, dynamic load balancing; more GPUs or overclocking will not help",
    "off_gpu": "move the host-side work off the critical path: asynchronous checkpointing, more data-loader "
               "workers and prefetching, or spread the host-side preprocessing over all ranks",
    "unknown": "record the missing signals (throttle reasons: nvidia-smi clocks_event_reasons_counters.*; SM "
               "clock: clocks.current.sm; power.draw.instant) and look again; meanwhile check clocks, throttling, "
               "temperature and PCIe/NVLink errors before rebalancing",
}

# thermal or power reasons: the GPU is slowed to protect itself or to stay in its budget
THERMAL_POWER = ("sw_power_cap", "sw_thermal", "hw_thermal", "hw_power_brake")
# the reasons a verdict reads (the others, e.g. gpu_idle, never decide a cause)
JUDGED_REASONS = THERMAL_POWER + ("hw_slowdown",)

# The cumulative vector, one slot per name. busy..sampled: the engine's integrals
# (seconds); *_n: readings of a gauge, with their sum beside it; counters as the
# source counts them (NaN while the source has not reported the family).
SLOTS = (("busy", "active", "spin_wait", "sampled",
          "clock_n", "clock", "temp_n", "temp", "power_n", "power", "limit_n", "limit",
          "pending_n", "pending", "width_n", "width", "width_max_n", "width_max", "gen_n", "gen",
          "gen_max_n", "gen_max", "pcie_replays", "ecc_uncorrected", "xid", "nvlink_errors")
         + tuple("thr:" + r for r in THROTTLE_REASONS))
_I = {n: i for i, n in enumerate(SLOTS)}
_GAUGES = (("clock", "sm_clock_hertz"), ("temp", "temperature_celsius"), ("power", "power_watts"),
           ("limit", "power_limit_watts"), ("pending", "remapping_pending"), ("width", "pcie_link_width"),
           ("width_max", "pcie_link_max_width"), ("gen", "pcie_link_generation"),
           ("gen_max", "pcie_link_max_generation"))
_THR0 = _I["thr:" + THROTTLE_REASONS[0]]
NAN = math.nan


@dataclass(frozen=True, slots=True)
class Verdict:
    cause: str
    evidence: tuple[str, ...]
    missing: tuple[str, ...]

    @property
    def remedy(self) -> str:
        if self.cause == "unknown" and self.missing:
            return f"{REMEDIES['unknown']} (missing here: {', '.join(self.missing)})"
        return REMEDIES[self.cause]


@dataclass(frozen=True, slots=True)
class Aggregate:
    """One GPU over one stretch; None where the source did not report the signal."""
    busy: float | None = None          # share of the sampled time
    active: float | None = None
    spin_wait: float | None = None
    seconds: float = 0.0               # sampled seconds
    sm_clock_hz: float | None = None   # means over the stretch's readings
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    remapping_pending: bool | None = None
    link_width: float | None = None    # PCIe lanes in use, mean over the stretch; its maximum
    link_width_max: float | None = None
    link_gen: float | None = None      # PCIe generation in use (lowered while idle); its maximum
    link_gen_max: float | None = None
    pcie_replays: float | None = None  # counted within the stretch
    nvlink_errors: float | None = None
    ecc_uncorrected: float | None = None
    xid: float | None = None
    throttle: Mapping[str, float] | None = None   # seconds by reason the source reports; None: none


# The running sums are the vector's gauge slots alone (a count and a sum per gauge, in
# SLOTS order from clock_n): the engine copies them into every GPU's view at every tick
_SUMS0 = _I["clock_n"]
_SUMS_LEN = 2 * len(_GAUGES)
assert SLOTS[_SUMS0:_SUMS0 + _SUMS_LEN:2] == tuple(slot + "_n" for slot, _ in _GAUGES)


def new_sums() -> list[float]:
    """A GPU's running gauge sums, for accumulate(); vector() makes the full vector."""
    return [0.0] * _SUMS_LEN


def sums_index(slot: str) -> int:
    """Where gauge slot `slot` (its sum; its count is one before) is in the running sums."""
    return _I[slot] - _SUMS0


# (index of the count, of the sum, catalog key) in the running sums, resolved once:
# accumulate runs for every reading of every GPU
_GAUGE_SLOTS = tuple((sums_index(slot) - 1, sums_index(slot), key) for slot, key in _GAUGES)


def accumulate(v: list[float], gauges: Mapping[str, Any]) -> None:
    """One reading of a GPU's gauges (catalog keys) into its running sums. The
    only per-reading cost: integrals and counters are cumulative already, vector() reads
    them when a span is marked or judged."""
    get = gauges.get
    for n, i, key in _GAUGE_SLOTS:
        x = get(key)
        if x is not None:
            v[n] += 1.0
            v[i] += x


def accumulate_each(v: list[float], readings: Sequence[dict[str, Any]]) -> None:
    """Several readings of a GPU's gauges, in order, into its running sums: what
    accumulate() makes of them one by one, to the last bit (each slot's sum still adds
    its values in the readings' order; a count adds whole numbers, exact), a slot at a
    time: a replayed log hands over ten readings a GPU and tick, and most gauges are in
    none of them."""
    if not readings:
        return
    keys = readings[0].keys()
    if all(map(keys.__eq__, map(dict.keys, readings))):
        # one set of fields in every reading (a log's rows): only the slots it has are read
        for n, i, key in _GAUGE_SLOTS:
            if key in keys:
                _add(v, n, i, [x for x in [r[key] for r in readings] if x is not None])
        return
    for n, i, key in _GAUGE_SLOTS:
        _add(v, n, i, [x for x in [r.get(key) for r in readings] if x is not None])


def _add(v: list[float], n: int, i: int, xs: list[Any]) -> None:
    """Values of one gauge, in order, into its count and sum (accumulate_each)."""
    if xs:
        v[n] += float(len(xs))
        acc = v[i]
        for x in xs:
            acc += x
        v[i] = acc


def vector(sums: Sequence[float], totals: Any, counters: Mapping[str, Any]) -> list[float]:
    """The cumulative vector of a GPU now: its running gauge sums, `totals` its
    cumulative Integrals, `counters` its latest Reading counters (NaN where absent)."""
    v = [0.0] * len(SLOTS)
    v[_SUMS0:_SUMS0 + _SUMS_LEN] = sums
    v[0], v[1], v[2], v[3] = totals.busy, totals.active, totals.spin_wait, totals.sampled
    for n in ("pcie_replays", "ecc_uncorrected", "xid", "nvlink_errors"):
        v[_I[n]] = NAN
    x = counters.get("pcie_replays_total")
    if x is not None and not isinstance(x, dict):
        v[_I["pcie_replays"]] = x
    ecc = counters.get("ecc_errors_total")
    if isinstance(ecc, dict):
        v[_I["ecc_uncorrected"]] = ecc.get(("uncorrected",), 0.0)
    xid = counters.get("xid_errors_total")
    if isinstance(xid, dict):
        v[_I["xid"]] = sum(xid.values())
    nvl = counters.get("nvlink_errors_total")
    if isinstance(nvl, dict):
        v[_I["nvlink_errors"]] = sum(nvl.values())
    thr = counters.get("throttle_seconds_total")
    for j, r in enumerate(THROTTLE_REASONS):
        v[_THR0 + j] = thr.get((r,), NAN) if isinstance(thr, dict) else NAN
    return v


def _per(x: float, t: float) -> float | None:
    """x per t (a share of the sampled time, a gauge's mean per reading); None without t."""
    return x / t if t > 0 else None


def _held(d: float) -> float | None:
    """Seconds a throttle reason held within the stretch; None where the source does
    not report that reason (a log may carry some reasons only)."""
    return None if math.isnan(d) else max(0.0, d)


def _count(e: float, s: float, d: float) -> float | None:
    """Events counted within the stretch; None where the source does not count them."""
    return None if math.isnan(e) or math.isnan(s) else max(0.0, d)


def _count_new(e: float, s: float, d: float) -> float | None:
    """_count for a family that appears only with its first event (XID): from zero."""
    return None if math.isnan(e) else e if math.isnan(s) else max(0.0, d)


# Every figure of an Aggregate: (its computation, the vector slots it reads: "d:" the
# stretch's difference, "e:" and "s:" the vectors at its end and start; a start of None
# reads as zeros). Each is written here only: aggregate() applies them to one GPU's
# pair, a Stretch to every GPU's at once.
_FIGURES: dict[str, tuple[Callable[..., float | None] | None, tuple[str, ...]]] = {
    "seconds": (None, ("d:sampled",)),
    **{f: (_per, ("d:" + f, "d:sampled")) for f in ("busy", "active", "spin_wait")},
    **{f: (_per, ("d:" + slot, "d:" + slot + "_n"))
       for f, slot in (("sm_clock_hz", "clock"), ("temperature_c", "temp"), ("power_w", "power"),
                       ("power_limit_w", "limit"), ("pending", "pending"), ("link_width", "width"),
                       ("link_width_max", "width_max"), ("link_gen", "gen"), ("link_gen_max", "gen_max"))},
    **{f: (_count, ("e:" + f, "s:" + f, "d:" + f)) for f in ("pcie_replays", "nvlink_errors", "ecc_uncorrected")},
    "xid": (_count_new, ("e:xid", "s:xid", "d:xid")),
    **{"held:" + r: (_held, ("d:thr:" + r,)) for r in THROTTLE_REASONS},
}
_ARGS = {f: tuple((a[0], _I[a[2:]]) for a in args) for f, (_, args) in _FIGURES.items()}
_ZERO = (0.0,) * len(SLOTS)


def aggregate(start: Sequence[float] | None, end: Sequence[float]) -> Aggregate:
    """The stretch between two vectors of one GPU (start None: since the beginning)."""
    s = start if start is not None else _ZERO
    row = {"e": end, "s": s, "d": list(map(sub, end, s))}
    x: dict[str, Any] = {}
    for f, (fn, _) in _FIGURES.items():
        args = [row[k][i] for k, i in _ARGS[f]]
        x[f] = fn(*args) if fn is not None else args[0]
    held = {r: h for r in THROTTLE_REASONS if (h := x.pop("held:" + r)) is not None}
    pending = x.pop("pending")
    return Aggregate(**x, remapping_pending=None if pending is None else pending > 0, throttle=held or None)


def transposed(vectors: Sequence[Sequence[float] | None]) -> list[Sequence[float]]:
    """Vectors (None: zeros, since the beginning) slot by slot: a Stretch's columns."""
    return list(zip(*[v if v is not None else _ZERO for v in vectors]))


class Stretch:
    """GPUs over a stretch each (a pair of cumulative vectors per GPU), as columns: the
    figures of aggregate() for all of them at once, each column made on first use, and
    the medians classify() reads of the peers sorted once. Several GPUs judged against
    the same peers (a fleet's job has a deviating rank per node, each judged against
    every GPU of the job) then cost a pass over the peers per figure, not one per GPU
    judged."""

    def __init__(self, pairs: Sequence[tuple[Sequence[float] | None, Sequence[float]]] = (),
                 aggregates: Sequence[Aggregate] | None = None,
                 ends: list[Sequence[float]] | None = None, starts: list[Sequence[float]] | None = None):
        """`ends` and `starts`: the pairs' vectors slot by slot (transposed()), where
        the caller has them already (the engine: every GPU's vector now, once a tick;
        a mark's, once for the ticks it is judged on)."""
        self._aggs = list(aggregates) if aggregates is not None else None
        self._pairs = pairs
        self._slots: dict[str, Any] = {"e": ends, "s": starts}
        self._cols: dict[str, list] = {}
        self._sorted: dict[str, tuple[list, bool]] = {}

    @classmethod
    def of(cls, aggregates: Sequence[Aggregate]) -> "Stretch":
        """Aggregates made already (the figures are their fields)."""
        return cls(aggregates=aggregates)

    def _slot(self, kind: str, i: int) -> Sequence[float]:
        """Every GPU's value of slot i: at the stretch's end ("e"), start ("s") or their
        difference ("d")."""
        if self._slots["e"] is None:
            self._slots["e"] = transposed([e for _, e in self._pairs])
        if self._slots["s"] is None:
            self._slots["s"] = transposed([s for s, _ in self._pairs])
        key = f"{kind}{i}"
        col = self._slots.get(key)
        if col is None:
            col = self._slots[key] = (self._slots[kind][i] if kind != "d"
                                      else list(map(sub, self._slots["e"][i], self._slots["s"][i])))
        return col

    def column(self, name: str) -> list:
        """One figure for every GPU: an Aggregate field (`pending`: the mean of
        remapping_pending), "held:<reason>" (throttle seconds, None where not
        reported), "share:<reason>" (of the span; None where not reported) or
        "spin_per_busy"."""
        col = self._cols.get(name)
        if col is not None:
            return col
        if name.startswith("share:"):
            col = [None if h is None else _share(h, t)
                   for h, t in zip(self.column("held:" + name[6:]), self.column("seconds"))]
        elif name == "spin_per_busy":
            col = [w / b if w is not None and b else None
                   for w, b in zip(self.column("spin_wait"), self.column("busy"))]
        elif self._aggs is not None:
            if name.startswith("held:"):
                r = name[5:]
                col = [a.throttle[r] if a.throttle is not None and r in a.throttle else None for a in self._aggs]
            else:
                col = [getattr(a, name) for a in self._aggs]
        else:
            fn, _ = _FIGURES[name]
            args = [self._slot(k, i) for k, i in _ARGS[name]]
            col = list(map(fn, *args)) if fn is not None else list(args[0])
        self._cols[name] = col
        return col

    def own(self, j: int) -> Aggregate:
        """GPU j's Aggregate (the GPU judged: all its figures, none of the others')."""
        if self._aggs is not None:
            return self._aggs[j]
        return aggregate(*self._pairs[j])

    def median(self, name: str, without: int | tuple[int, ...] | None = None) -> float | None:
        """The median of a figure over every GPU but `without` (one GPU's place, or
        several: a slow node's GPUs judged against the rest of a job) (None where absent
        left out; None when none has it): statistics.median of the same values."""
        col = self.column(name)
        got = self._sorted.get(name)
        if got is None:
            ys = [x for x in col if x is not None]
            got = self._sorted[name] = (sorted(ys), any(map(math.isnan, ys)))
        ys, nan = got
        out = (without,) if type(without) is int else without or ()
        if nan:   # NaN does not sort: statistics.median of the peers as listed
            return _med([x for j, x in enumerate(col) if j not in out])
        # where in ys the values left out are (equal values at one place: at() then
        # steps past as many of them)
        drop = sorted(bisect_left(ys, v) for j in out if (v := col[j]) is not None)
        n = len(ys) - len(drop)
        if n <= 0:
            return None

        def at(i: int) -> float:
            for d in drop:           # the i-th value kept: past each place left out before it
                if d <= i:
                    i += 1
                else:
                    break
            return ys[i]
        if n % 2:
            return at(n // 2)
        return (at(n // 2 - 1) + at(n // 2)) / 2


# ---------------------------------------------------------------- the verdict

def _med(xs: list[float | None]) -> float | None:
    ys = [x for x in xs if x is not None]
    return median(ys) if ys else None


def _share(held: float, seconds: float) -> float:
    """Share of a span a throttle reason held, at most all of it."""
    return min(1.0, held / seconds) if seconds > 0 else 0.0


def _throttle_share(a: Aggregate, reason: str) -> float:
    return _share(a.throttle.get(reason, 0.0), a.seconds) if a.throttle else 0.0


def _pct(x: float) -> str:
    return f"{x * 100:.0f}%"


def classify(s: Aggregate, peers: Sequence[Aggregate] | Peers, power_averaged: bool = False) -> Verdict:
    """The cause of straggler `s` against its peers (see module doc): their aggregates,
    or Peers (its stretch among theirs)."""
    med = (peers if isinstance(peers, Peers) else Peers(Stretch.of(peers))).median
    evidence: list[str] = []
    missing: list[str] = []
    gap = value("straggler_cost_ratio")
    clock_gap = value("cause_clock_gap_ratio")
    share_min = value("cause_throttle_share_ratio")

    clock, peer_clock = s.sm_clock_hz, med("sm_clock_hz")
    clock_low = None
    if clock is not None and peer_clock:
        clock_low = clock <= (1 - clock_gap) * peer_clock
    clock_text = (f"sm clock {clock / 1e6:.0f} MHz vs peers {peer_clock / 1e6:.0f} MHz"
                  if clock is not None and peer_clock else None)
    at_limit = []
    if s.temperature_c is not None:
        pt = med("temperature_c")
        if pt is not None and s.temperature_c >= (1 + value("cause_temperature_gap_ratio")) * pt:
            at_limit.append(f"temperature {s.temperature_c:.0f} °C vs peers {pt:.0f} °C")
    if s.power_w is not None and s.power_limit_w:
        if s.power_w >= value("cause_power_limit_ratio") * s.power_limit_w:
            at_limit.append(f"power {s.power_w:.0f} W at its {s.power_limit_w:.0f} W limit")

    # -- throttling
    # a reason the source reports and held is evidence; the reasons are known (none set
    # means none held) only when it reports every thermal and power one: a log with the
    # power cap's column alone cannot say a GPU was not held by heat
    known = s.throttle is not None and all(r in s.throttle for r in THERMAL_POWER)
    excess = {}
    if s.throttle is not None:
        for r in [r for r in JUDGED_REASONS if r in s.throttle]:
            x = _throttle_share(s, r) - (med("share:" + r) or 0.0)
            if x >= share_min:
                excess[r] = _throttle_share(s, r)
    thermal = {r: x for r, x in excess.items() if r in THERMAL_POWER}
    if thermal:
        evidence += [f"{r} throttle {_pct(x)} of span" for r, x in sorted(thermal.items(), key=lambda kv: -kv[1])]
        evidence += ([clock_text] if clock_text else []) + at_limit
        return Verdict("throttling", tuple(evidence), ())
    if not known and clock_low and at_limit:
        evidence += [clock_text] + at_limit
        return Verdict("throttling", tuple(evidence), ("throttle_reasons",))

    # -- direction of the deviation
    busy_gap = active_gap = None
    if s.busy is not None:
        mb = med("busy")
        busy_gap = None if mb is None else s.busy - mb
    if s.active is not None:
        ma = med("active")
        active_gap = None if ma is None else s.active - ma
    cold = busy_gap is not None and busy_gap <= -gap
    hot = not cold and ((active_gap is not None and active_gap >= gap) or (busy_gap is not None and busy_gap >= gap))
    light = not cold and not hot and active_gap is not None and active_gap <= -gap

    # -- degraded hardware
    link, link_own = _link(s, med, cold)
    evidence += link
    if "hw_slowdown" in excess:
        evidence.append(f"hw_slowdown throttle {_pct(excess['hw_slowdown'])} of span, no thermal or power reason")
    if s.remapping_pending:
        evidence.append("row remapping pending")
    if s.ecc_uncorrected:
        evidence.append(f"{s.ecc_uncorrected:.0f} uncorrectable ECC errors in span")
    if s.xid:
        evidence.append(f"{s.xid:.0f} XID errors in span")
    if s.pcie_replays is not None:
        pr = med("pcie_replays") or 0.0
        if s.pcie_replays - pr >= value("cause_pcie_replays_count"):
            evidence.append(f"{s.pcie_replays:.0f} PCIe replays in span vs peers {pr:.0f}")
    if s.nvlink_errors is not None:
        ne = med("nvlink_errors") or 0.0
        if s.nvlink_errors - ne >= value("cause_nvlink_errors_count"):
            evidence.append(f"{s.nvlink_errors:.0f} NVLink errors in span vs peers {ne:.0f}")
    # its own throttle or link state that its peers share: not what sets it apart, but
    # a GPU held down by it is never told to rebalance (more_work). Error counts every
    # GPU of the node sees alike (a few replays) are no such state
    own = link_own + [f"{r} throttle {_pct(_throttle_share(s, r))} of span, as on its peers"
                      for r in THERMAL_POWER + ("hw_slowdown",) if _throttle_share(s, r) >= share_min]

    if evidence:
        if hot and clock_low and clock_text:
            evidence.append(clock_text)
        return Verdict("degraded_hardware", tuple(evidence), ())
    if hot and known and clock_low:
        return Verdict("degraded_hardware", (clock_text + ", no throttle reason set",), ())

    peer_spin = med("spin_per_busy")
    # peers waiting for a cold straggler spin-wait (busy at partial power, blocked in
    # the collective) for much of the time it is missing from the GPU; peers that
    # compute meanwhile do not wait for it: it gets less work
    peer_wait = med("spin_wait")
    peers_wait = (cold and peer_wait is not None
                  and peer_wait >= value("cause_peers_wait_ratio") * -busy_gap)
    spin_text = f"peers spin-wait {_pct(peer_spin)} of their busy time" if peer_spin is not None else None
    if hot:
        evidence.append(f"active {_pct(s.active or 0.0)} vs peers {_pct((s.active or 0.0) - (active_gap or 0.0))}"
                        if active_gap is not None else f"busy {_pct(s.busy or 0.0)} above peers")
        if known:
            evidence.append("no thermal, power or slowdown throttle reason")
        if clock_text:
            evidence.append(clock_text)
        if known or clock_low is False:
            if spin_text and peer_spin >= value("spin_wait_mention_ratio"):
                evidence.append(spin_text)
            return _more_work(evidence, own)
        missing += ["throttle_reasons"] + ([] if clock_text else ["sm_clock"])
        return Verdict("unknown", tuple(evidence), tuple(missing))
    if cold or light:
        what = "busy" if cold else "active"
        mine = s.busy if cold else s.active
        g = busy_gap if cold else active_gap
        evidence.append(f"{what} {_pct(mine or 0.0)} vs peers {_pct((mine or 0.0) - (g or 0.0))}")
        if s.power_w is not None:
            evidence.append(f"power {s.power_w:.0f} W" + (f" vs peers {med('power_w'):.0f} W"
                                                          if med("power_w") is not None else ""))
        if cold and peers_wait:
            evidence += [spin_text, f"they wait {_pct(peer_wait)} of the time for its {_pct(-busy_gap)} less busy time"]
            return Verdict("off_gpu", tuple(evidence), ())
        if power_averaged:
            # 1 s-averaged power reads short spin-waits as work: the peers may be waiting
            return Verdict("unknown", tuple(evidence), ("instant_power",))
        if spin_text:
            evidence.append(spin_text)
        evidence.append("peers compute while it waits: it gets less work")
        return _more_work(evidence, own)
    return Verdict("unknown", ("no deviation from the peers over the span",), ())


def _more_work(evidence: list[str], own: list[str]) -> Verdict:
    """more_work, unless the GPU shows a hardware or throttle signal of its own (shared
    with its peers, so not its cause): then unknown, naming it, and never "rebalance"."""
    if own:
        return Verdict("unknown", tuple(evidence + own), ())
    return Verdict("more_work", tuple(evidence), ())


def _link(s: Aggregate, med: Callable[[str], float | None], cold: bool) -> tuple[list[str], list[str]]:
    """(a PCIe link below its maximum and its peers': evidence of a degraded link; one
    below its maximum as on its peers). The generation only for a GPU not colder than
    its peers: an idle GPU lowers it to save power; the width holds while idle."""
    ratio = value("cause_link_ratio")
    degraded, own = [], []
    for cur, top, what, fmt in ((s.link_width, s.link_width_max, "width", "x{:.0f}"),
                                (None if cold else s.link_gen, s.link_gen_max, "gen", "gen {:.0f}")):
        if cur is None or not top or cur > ratio * top:
            continue
        peer = med("link_" + what)
        text = f"PCIe link {fmt.format(cur)} of {fmt.format(top)}"
        if peer is None or cur <= ratio * peer:
            degraded.append(text + (f" (peers {fmt.format(peer)})" if peer is not None else ""))
        else:
            own.append(text + ", as on its peers")
    return degraded, own


class Peers:
    """What classify() reads of a GPU's peers: the median of a figure over every GPU
    of a Stretch but the one judged (and those it is not judged against: `without`)."""

    def __init__(self, stretch: Stretch, without: int | tuple[int, ...] | None = None):
        self.stretch, self.without = stretch, without

    def median(self, name: str) -> float | None:
        return self.stretch.median(name, self.without)


def verdict_of(stretch: Stretch, j: int, power_averaged: bool = False) -> Verdict:
    """classify() of GPU j of `stretch` against every other GPU of it: several GPUs
    judged over one stretch share its columns."""
    return classify(stretch.own(j), Peers(stretch, j), power_averaged)


def describe(cause: str, evidence: Sequence[str], missing: Sequence[str] = ()) -> str:
    """One sentence for people: 'Cause: throttling (hw_thermal throttle 62% of span; ...).'"""
    words = cause.replace("_", " ")
    ev = f" ({'; '.join(evidence)})" if evidence else ""
    miss = f"; missing: {', '.join(missing)}" if missing else ""
    return f"Cause: {words}{ev}{miss}."


def span_verdict(own: Sequence[tuple[Sequence[float] | None, Sequence[float]]], peers: Stretch,
                 power_averaged: bool = False, without: int | tuple[int, ...] | None = None) -> Verdict:
    """classify() of a GPU over several stretches (a straggler's spans: one (start,
    end) vector pair each; the stretches add up) against its peers over the same
    (span_peers), but `without`: the places among them of the GPU and of those it is
    not judged against (Stretch.median)."""
    return classify(aggregate(None, span_total(own)), Peers(peers, without), power_averaged)


def span_peers(peers: Sequence[Sequence[tuple[Sequence[float] | None, Sequence[float]]]]) -> Stretch:
    """The peers of span_verdict: per peer, its (start, end) vector pair per stretch.
    Made once for the GPUs judged against the same peers over the same spans (a slow
    node's GPUs, each against the other nodes')."""
    return Stretch([(None, span_total(pairs)) for pairs in peers])


def span_total(pairs: Sequence[tuple[Sequence[float] | None, Sequence[float]]]) -> list[float]:
    """A GPU's cumulative vector over several stretches: their differences added up."""
    total = [0.0] * len(SLOTS)
    for start, end in pairs:
        total = list(map(add, total, map(sub, end, start) if start is not None else end))
    return total
