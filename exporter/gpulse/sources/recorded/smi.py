"""What the nvidia-smi formats share: their parsed values of one GPU at one instant
-> a Record, and clock-event (throttle) reasons logged as states -> the seconds
each held the clocks."""
from __future__ import annotations

from typing import Any, Mapping

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
        self._total: dict[str, dict[str, float]] = {}

    def add(self, gpu: str, t: float, states: Mapping[str, bool]) -> dict[str, float]:
        total = self._total.setdefault(gpu, {})
        prev = self._last.get(gpu)
        dt = t - prev[0] if prev is not None else 0.0
        if dt > 0:
            if dt <= max(self.GAP_MIN, self.GAP_STEPS * prev[1]):
                for r, on in states.items():
                    if on:
                        total[r] = total.get(r, 0.0) + dt
            self._last[gpu] = (t, dt if dt <= self.GAP_MIN else prev[1])
        elif prev is None:
            self._last[gpu] = (t, 0.0)
        for r in states:
            total.setdefault(r, 0.0)
        return dict(total)


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
            setdefault = thr.setdefault
            for r, secs in reasons.add(gpu, t, states).items():
                setdefault((r,), secs)
    if thr:
        counters["throttle_seconds_total"] = thr


def gauge_plan(keys: tuple[str, ...]) -> tuple[str | None, tuple[tuple[str, str], ...], str | None,
                                               tuple[tuple[tuple[str], str], ...]] | None:
    """For rows with these fields, none of them None (a batch reader's plain rows): the
    field their power is read from, the (field, gauge) pairs of their gauges in
    smi_record's order (the power's under the field "power"), the field of their power
    limit (None: not logged) and the (label values, field) pairs of their throttle
    counters, as smi_record makes them; None when a rarer field (ECC, remapped rows,
    clock-event states, which integrate per GPU in row order) needs smi_record row by
    row."""
    if any(k == "thr_mask" or k.startswith("thr_state:") for k in keys):
        return None
    power_keys, gauge_keys, rare = _plan(keys)
    limit, thr = None, ()
    if rare is not None:
        limit_keys, remap, pending, ecc_keys, thr, has_states = rare
        if remap or pending or ecc_keys or has_states:
            return None
        # every field of a plain row has a value: the first of the preferred limits is it
        limit = limit_keys[0] if limit_keys else None
    power = power_keys[0] if power_keys else None
    return power, tuple((k, g) for k, g in gauge_keys if k != "power" or power is not None), limit, thr
