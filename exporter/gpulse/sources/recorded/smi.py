"""What the nvidia-smi formats share: their parsed values of one GPU at one instant
-> a Record, and clock-event (throttle) reasons logged as states -> the seconds
each held the clocks."""
from __future__ import annotations

import operator
from typing import Any, Mapping, NamedTuple

from ...catalog import THROTTLE_REASONS
from ...model import Reading, Sample
from .records import Record

_SMI_GAUGES = (("power", "power_watts"), ("mem_used", "memory_used_bytes"), ("mem_total", "memory_total_bytes"),
               ("temp", "temperature_celsius"), ("mtemp", "memory_temperature_celsius"),
               ("sm_clock", "sm_clock_hertz"), ("mem_clock", "memory_clock_hertz"),
               ("fan", "fan_speed_ratio"), ("link_gen", "pcie_link_generation"),
               ("link_gen_max", "pcie_link_max_generation"), ("link_width", "pcie_link_width"),
               ("link_width_max", "pcie_link_max_width"))

# nvidia-smi's names of the clock-event reasons (--query-gpu clocks_event_reasons.<name>,
# formerly clocks_throttle_reasons.<name>) -> the catalog's; the `.active` bit mask has
# NVML's bits, which are the catalog's order (bit i is THROTTLE_REASONS[i])
SMI_REASONS = {
    "gpu_idle": "gpu_idle", "applications_clocks_setting": "applications_clocks",
    "sw_power_cap": "sw_power_cap", "hw_slowdown": "hw_slowdown", "sync_boost": "sync_boost",
    "sw_thermal_slowdown": "sw_thermal", "hw_thermal_slowdown": "hw_thermal",
    "hw_power_brake_slowdown": "hw_power_brake", "display_clock_setting": "display_clocks",
}
ACTIVE, NOT_ACTIVE = "active", "not active"


def mask_states(mask: int) -> dict[str, bool]:
    """The `.active` bit mask (0x0000000000000004: sw_power_cap) -> every reason's state."""
    return {r: bool(mask >> i & 1) for i, r in enumerate(THROTTLE_REASONS)}


def mask_cell_states(cell: str) -> dict[str, bool]:
    """mask_states of a mask cell as logged ('0x0000000000000004'); raises ValueError
    when it is no hex number. The dict is shared: read it, do not change it. A log
    writes a few distinct masks, one per row of every GPU, so each is decoded once."""
    states = _mask_cells.get(cell)
    if states is None:
        states = mask_states(int(cell, 16))
        if len(_mask_cells) > 4096:
            _mask_cells.clear()
        _mask_cells[cell] = states
    return states


_mask_cells: dict[str, dict[str, bool]] = {}


class ReasonTime:
    """Reasons logged as states (Active / Not Active, or the bit mask) -> the seconds
    each held the clocks, as the counters NVML keeps (clocks_event_reasons_counters.*):
    a row's state counts for the time since its GPU's previous row, as its utilisation
    does. A step longer than a few of the GPU's usual ones is a gap in the log and
    counts for no reason."""

    GAP_STEPS = 3.0
    GAP_MIN = 10.0      # seconds: a log at nvidia-smi -l 5 has 5 s steps

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}     # gpu -> (t, its latest step)
        # gpu -> {(reason,): seconds}: keyed as the throttle counter's label values
        self._total: dict[str, dict[tuple[str], float]] = {}
        self._known: dict[str, frozenset[str]] = {}       # gpu -> the reasons in its total

    def add(self, gpu: str, t: float, states: Mapping[str, bool]) -> dict[tuple[str], float]:
        """The GPU's seconds by reason, as counter label values ((reason,): seconds),
        every reason it has logged in the order first seen. The dict is this object's
        own, changed by the next add(): read it, do not keep it (one call per row)."""
        total = self._total.get(gpu)
        if total is None:
            total = self._total[gpu] = {}
        prev = self._last.get(gpu)
        dt = t - prev[0] if prev is not None else 0.0
        if dt > 0:
            if dt <= max(self.GAP_MIN, self.GAP_STEPS * prev[1]):
                get = total.get
                for r, on in states.items():
                    if on:
                        key = (r,)
                        total[key] = get(key, 0.0) + dt
            self._last[gpu] = (t, dt if dt <= self.GAP_MIN else prev[1])
        elif prev is None:
            self._last[gpu] = (t, 0.0)
        known = self._known.get(gpu)
        if known is None or not states.keys() <= known:
            # a reason not logged before joins, after those held in this row
            for r in states:
                total.setdefault((r,), 0.0)
            self._known[gpu] = frozenset(r for (r,) in total)
        return total


def smi_record(t: float, gpu: str, v: dict[str, Any], line: int, lost: str | None,
               reasons: ReasonTime | None = None) -> Record:
    """`reasons` integrates the states in v["thr_states"] ({reason: active}); a
    reason the log also counts (v["thr:<reason>"], seconds) is taken as counted."""
    # one call per row of a log: what to look at is planned once per set of fields
    keys = tuple(v)
    plan = _plans.get(keys)
    if plan is None:
        if len(_plans) > 1024:
            _plans.clear()
        plan = _plans[keys] = _plan(keys)
    power_keys, gauge_keys, rare = plan
    power = None
    for k in power_keys:
        power = v[k]
        if power is not None:
            break
    v["power"] = power
    gauges: dict[str, Any] = {g: x for k, g in gauge_keys if (x := v[k]) is not None}
    counters: dict[str, Any] = {}
    if rare is not None:
        _rare_fields(gpu, t, v, gauges, counters, reasons, rare)
    # positional: one call per row, and keywords cost a dataclass's __init__ more
    return Record(Reading(gpu, [Sample(t, v.get("util"), power, v.get("mem_used"))], gauges, counters,
                          lost is None, lost), line)


_POWER_KEYS = ("power", "power_avg", "power_inst")
_RARE_KEYS = frozenset(("limit_enforced", "limit", "remap_correctable", "remap_uncorrectable", "remap_pending",
                        "ecc_corrected", "ecc_uncorrected", "thr_states"))
# the rarer fields of rows with a given set of fields: the power limit's fields in order
# of preference, the remapped rows' and ECC's (label values, field) pairs, whether the
# remapping is pending is logged, the throttle counters' (label values, field) pairs in
# the rows' order, whether states are logged
_RarePlan = tuple[tuple[str, ...], tuple[tuple[tuple[str], str], ...], bool, tuple[tuple[tuple[str], str], ...],
                  tuple[tuple[tuple[str], str], ...], bool]
_Plan = tuple[tuple[str, ...], tuple[tuple[str, str], ...], "_RarePlan | None"]
_plans: dict[tuple[str, ...], _Plan] = {}


def _plan(keys: tuple[str, ...]) -> _Plan:
    """For rows with these fields: the power fields in order of preference, the gauges
    (in _SMI_GAUGES order; power is always set), the plan of their rarer fields (None
    when there is none)."""
    have = set(keys) | {"power"}
    power_keys = tuple(k for k in _POWER_KEYS if k in keys)
    gauge_keys = tuple((k, g) for k, g in _SMI_GAUGES if k in have)
    # throttle counters (thr:) and clock-event states (thr_state:, thr_mask) alike
    if not any(k in _RARE_KEYS or k.startswith(("thr:", "thr_state:")) or k == "thr_mask" for k in keys):
        return power_keys, gauge_keys, None
    rare: _RarePlan = (tuple(k for k in ("limit_enforced", "limit") if k in have),
                       tuple(((k,), f"remap_{k}") for k in ("correctable", "uncorrectable") if f"remap_{k}" in have),
                       "remap_pending" in have,
                       tuple(((k,), f"ecc_{k}") for k in ("corrected", "uncorrected") if f"ecc_{k}" in have),
                       tuple(((k[4:],), k) for k in keys if k.startswith("thr:")),
                       "thr_states" in have)
    return power_keys, gauge_keys, rare


def _rare_fields(gpu: str, t: float, v: dict[str, Any], gauges: dict[str, Any], counters: dict[str, Any],
                 reasons: ReasonTime | None, plan: _RarePlan) -> None:
    """Power limit, remapped rows, ECC and throttle reasons: into gauges and counters."""
    limit_keys, remap, pending, ecc_keys, thr_keys, has_states = plan
    for k in limit_keys:
        limit = v[k]
        if limit is not None:
            gauges["power_limit_watts"] = limit
            break
    if remap:
        rows = {lab: x for lab, k in remap if (x := v[k]) is not None}
        if rows:
            gauges["remapped_rows"] = rows
    if pending and v["remap_pending"] is not None:
        gauges["remapping_pending"] = 1.0 if v["remap_pending"].lower() in ("yes", "1", "true") else 0.0
    if ecc_keys:
        ecc = {lab: x for lab, k in ecc_keys if (x := v[k]) is not None}
        if ecc:
            counters["ecc_errors_total"] = ecc
    thr = {lab: x for lab, k in thr_keys if (x := v[k]) is not None}
    if has_states and reasons is not None:
        states = v["thr_states"]
        if states:
            held = reasons.add(gpu, t, states)
            if thr:
                setdefault = thr.setdefault
                for lab, secs in held.items():
                    setdefault(lab, secs)
            else:
                thr = dict(held)
    if thr:
        counters["throttle_seconds_total"] = thr


def _getter(keys: tuple[Any, ...]) -> Any:
    """A function of a mapping: its values of `keys`, as a tuple."""
    if len(keys) == 1:
        (key,) = keys
        return lambda d: (d[key],)
    return operator.itemgetter(*keys) if keys else (lambda d: ())


class RowPlan(NamedTuple):
    """What smi_record makes of rows with a set of fields, each numeric one a number
    (a batch reader's plain rows; a text field may be None): planned once, applied a
    column at a time by plain_parts()."""
    power: str | None                                   # the field power is read from
    gauges: tuple[tuple[str, str], ...]                 # (field, gauge), smi_record's order; power's as "power"
    limit: str | None                                   # the power limit's field
    thr: tuple[tuple[tuple[str], str], ...]             # throttle counters: (label values, field)
    remap: tuple[tuple[tuple[str], str], ...]           # remapped rows: (label values, field)
    pending: bool                                       # remapped_rows.pending logged (text: may be None)
    ecc: tuple[tuple[tuple[str], str], ...]             # ECC counters: (label values, field)
    states: bool                                        # clock-event states logged (thr_states)


def row_plan(keys: tuple[str, ...]) -> RowPlan:
    """The plan of rows whose values have these fields, in the order a row's values
    dict has them (clock-event states as one field, "thr_states")."""
    power_keys, gauge_keys, rare = _plan(keys)
    limit: str | None = None
    thr = remap = ecc = ()
    pending = states = False
    if rare is not None:
        limit_keys, remap, pending, ecc, thr, states = rare
        # every numeric field of a plain row has a value: the first of the preferred limits is it
        limit = limit_keys[0] if limit_keys else None
    power = power_keys[0] if power_keys else None
    return RowPlan(power, tuple((k, g) for k, g in gauge_keys if k != "power" or power is not None), limit, thr,
                   remap, pending, ecc, states)


def plain_parts(plan: RowPlan, col: Mapping[str, list[Any]], taken: list[int], gpus: list[str], ts: list[float],
                states: list[Mapping[str, bool]] | None, reasons: ReasonTime
                ) -> tuple[list[Sample], list[dict[str, Any]], list[dict[str, Any]] | None]:
    """smi_record's samples, gauges and counters of plain rows, a column at a time:
    rows `taken` of the columns `col` (by field), their GPUs and times, and each row's
    clock-event states where the plan has them (integrated by `reasons` in row order,
    as smi_record does). Counters None: no row has any."""
    n = len(taken)
    none = [None] * n
    # the rows taken are ascending places in the columns, most often a run without a
    # gap (every row of a batch but a GPU's first): a slice of each column then
    first = taken[0] if taken else 0
    run = bool(n) and taken[-1] - first == n - 1

    def pick(column: list[Any]) -> list[Any]:
        return column[first:first + n] if run else [column[k] for k in taken]

    us = pick(col["util"]) if "util" in col else none
    ps = pick(col[plan.power]) if plan.power is not None else none
    ms = pick(col["mem_used"]) if "mem_used" in col else none
    samples = list(map(Sample, ts, us, ps, ms))
    names = tuple(g for _, g in plan.gauges) + (("power_limit_watts",) if plan.limit is not None else ())
    gcols = [col[plan.power if k == "power" else k] for k, _ in plan.gauges]
    if plan.limit is not None:
        gcols.append(col[plan.limit])
    gauges = ([dict(zip(names, vals)) for vals in zip(*map(pick, gcols))] if gcols
              else [{} for _ in taken])
    if plan.remap or plan.pending:
        rcols = [(lab, col[f]) for lab, f in plan.remap]
        pcol = col["remap_pending"] if plan.pending else None
        for g, k in zip(gauges, taken):
            if rcols:
                g["remapped_rows"] = {lab: c[k] for lab, c in rcols}
            if pcol is not None and (word := pcol[k]) is not None:
                g["remapping_pending"] = 1.0 if word.lower() in ("yes", "1", "true") else 0.0
    if not (plan.thr or plan.ecc or (plan.states and states is not None)):
        return samples, gauges, None
    def dicts(pairs: tuple[tuple[tuple[str], str], ...]) -> list[dict[Any, Any]]:
        """Per row, {label values: value} of these (label values, field) pairs."""
        labels = [lab for lab, _ in pairs]
        return [dict(zip(labels, vals)) for vals in zip(*[pick(col[f]) for _, f in pairs])]

    eccs = dicts(plan.ecc) if plan.ecc else None
    thrs = dicts(plan.thr) if plan.thr else None
    own = frozenset(lab for lab, _ in plan.thr)
    # per (GPU, how many reasons it has): the reasons the states add to the counted ones,
    # and a getter of their seconds (a GPU's reasons only grow, in the order first seen)
    added: dict[tuple[str, int], tuple[tuple[tuple[str], ...], Any]] = {}
    counters: list[dict[str, Any]] = []
    for j in range(n):
        c: dict[str, Any] = {}
        if eccs is not None:
            c["ecc_errors_total"] = eccs[j]
        thr = thrs[j] if thrs is not None else {}
        held_now = states[j] if states is not None else None
        if held_now:
            gpu = gpus[j]
            held = reasons.add(gpu, ts[j], held_now)
            if thr:
                # smi_record's setdefault of each held reason: the counted ones stay
                how = added.get((gpu, len(held)))
                if how is None:
                    extra = tuple(lab for lab in held if lab not in own)
                    how = added[(gpu, len(held))] = (extra, _getter(extra))
                extra, get = how
                if extra:
                    thr.update(zip(extra, get(held)))
            else:
                thr = dict(held)
        if thr:
            c["throttle_seconds_total"] = thr
        counters.append(c)
    return samples, gauges, counters
