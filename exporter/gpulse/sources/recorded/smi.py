"""What the nvidia-smi formats share: their parsed values of one GPU at one instant
-> a Record."""
from __future__ import annotations

from typing import Any

from ...model import Reading, Sample
from .records import Record

_SMI_GAUGES = (("power", "power_watts"), ("mem_used", "memory_used_bytes"), ("mem_total", "memory_total_bytes"),
               ("temp", "temperature_celsius"), ("mtemp", "memory_temperature_celsius"),
               ("sm_clock", "sm_clock_hertz"), ("mem_clock", "memory_clock_hertz"),
               ("fan", "fan_speed_ratio"))


def smi_record(t: float, gpu: str, v: dict[str, Any], line: int, lost: str | None) -> Record:
    power = next((v[k] for k in ("power", "power_avg", "power_inst") if v.get(k) is not None), None)
    v["power"] = power
    sample = Sample(t=t, util=v.get("util"), power_w=power, memory_used_bytes=v.get("mem_used"))
    gauges: dict[str, Any] = {g: v[k] for k, g in _SMI_GAUGES if v.get(k) is not None}
    limit = v.get("limit_enforced") if v.get("limit_enforced") is not None else v.get("limit")
    if limit is not None:
        gauges["power_limit_watts"] = limit
    rows = {(k,): v[f"remap_{k}"] for k in ("correctable", "uncorrectable") if v.get(f"remap_{k}") is not None}
    if rows:
        gauges["remapped_rows"] = rows
    if v.get("remap_pending") is not None:
        gauges["remapping_pending"] = 1.0 if v["remap_pending"].lower() in ("yes", "1", "true") else 0.0
    counters: dict[str, Any] = {}
    ecc = {(k,): v[f"ecc_{k}"] for k in ("corrected", "uncorrected") if v.get(f"ecc_{k}") is not None}
    if ecc:
        counters["ecc_errors_total"] = ecc
    thr = {(k[4:],): val for k, val in v.items() if k.startswith("thr:") and val is not None}
    if thr:
        counters["throttle_seconds_total"] = thr
    return Record(Reading(gpu, [sample], gauges, counters, up=lost is None, error=lost), line)
