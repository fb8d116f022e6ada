"""`nvidia-smi -q [-l N]` text."""
from __future__ import annotations

import calendar
import re
import time

from typing import Any, Iterable, Iterator

from ...model import DeviceInfo
from ..cells import NOT_AVAILABLE, CellError, parse_quantity
from .records import Problems, Record, RunFacts
from .smi import ACTIVE, NOT_ACTIVE, ReasonTime, smi_record


def sniff(head: list[str]) -> bool:
    first = head[0]
    return "NVSMI LOG" in first or first.startswith("Timestamp") and any(
        "NVSMI LOG" in m or m.startswith("GPU ") for m in head[:10])


_Q_LINE = re.compile(r"^( *)(\S.*?)\s+:\s?(.*)$")
_Q_THROTTLE = {"SW Power Capping": "sw_power_cap", "Sync Boost": "sync_boost",
               "SW Thermal Slowdown": "sw_thermal", "HW Thermal Slowdown": "hw_thermal",
               "HW Power Braking": "hw_power_brake"}
# the reasons as states, under 'Clocks Event Reasons' (drivers >= 535) or 'Clocks
# Throttle Reasons' (older); the hardware ones nest under 'HW Slowdown'
_Q_REASON_SECTIONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")
_Q_STATES = {"Idle": "gpu_idle", "Applications Clocks Setting": "applications_clocks",
             "SW Power Cap": "sw_power_cap", "HW Slowdown": "hw_slowdown", "Sync Boost": "sync_boost",
             "SW Thermal Slowdown": "sw_thermal", "HW Thermal Slowdown": "hw_thermal",
             "HW Power Brake Slowdown": "hw_power_brake", "Display Clock Setting": "display_clocks"}
# PCI / GPU Link Info: (section, entry) -> field; 'Device Max' is the GPU's, 'Max' what
# the GPU and its slot can reach
_Q_LINK = {("PCIe Generation", "Current"): "link_gen", ("PCIe Generation", "Device Current"): "link_gen",
           ("PCIe Generation", "Max"): "link_gen_max", ("Link Width", "Current"): "link_width",
           ("Link Width", "Max"): "link_width_max"}


class _QBlock:
    """(path, value, line) entries of one GPU in one -q snapshot."""

    def __init__(self, bus_id: str, line: int):
        self.bus_id = bus_id
        self.line = line
        self.entries: list[tuple[tuple[str, ...], str, int]] = []

    def get(self, *path: str) -> tuple[str, int] | None:
        for p, v, ln in self.entries:
            if p == path:
                return v, ln
        return None


def _q_blocks(lines: Iterable[str], err: Problems,
              versions: dict[str, str]) -> Iterator[tuple[float | None, int, list[_QBlock]]]:
    """One (time, line, GPU blocks) per snapshot, each as soon as the next one starts."""
    snap: list[Any] | None = None      # [t, line, blocks]
    block: _QBlock | None = None
    stack: list[str] = []
    for i, raw in enumerate(lines, 1):
        line = raw.rstrip()
        if not line.strip():
            continue
        if "NVSMI LOG" in line or snap is None:     # a file may start without the banner
            if snap is not None:
                yield snap[0], snap[1], snap[2]
            snap = [None, i, []]
            block = None
            if "NVSMI LOG" in line:
                continue
        current = snap[2]
        indent = len(line) - len(line.lstrip(" "))
        m = _Q_LINE.match(line)
        if indent == 0:
            block = None
            if m and m.group(2) == "Timestamp":
                try:
                    snap[0] = float(calendar.timegm(time.strptime(m.group(3).strip(), "%a %b %d %H:%M:%S %Y")))
                except ValueError:
                    err.add(i, f"not an nvidia-smi -q timestamp: {m.group(3).strip()!r}")
            elif m and m.group(2) in ("Driver Version", "CUDA Version"):
                versions[m.group(2)] = m.group(3).strip()
            elif not m and line.startswith("GPU "):
                block = _QBlock(line[4:].strip(), i)
                current.append(block)
                stack = []
            continue
        if block is None:
            continue
        level = indent // 4 - 1
        del stack[level:]
        if m:
            block.entries.append((tuple(stack) + (m.group(2).strip(),), m.group(3).strip(), i))
            stack.append(m.group(2).strip())      # 'Process ID : 1' heads its own sub-block
        else:
            stack.append(line.strip())
    if snap is not None:
        yield snap[0], snap[1], snap[2]


def _q_value(block: _QBlock, unit: str | None, lo: float | None, hi: float | None,
             err: Problems, *path: str) -> float | None:
    got = block.get(*path)
    if got is None:
        return None
    try:
        return parse_quantity(got[0], unit, lo, hi)
    except CellError as e:
        err.add(got[1], f"{' / '.join(path)}: {e}; value dropped")
        return None


def _q_states(b: _QBlock, err: Problems) -> dict[str, bool]:
    states: dict[str, bool] = {}
    for p, val, ln in b.entries:
        if len(p) < 2 or p[0] not in _Q_REASON_SECTIONS or p[-1] not in _Q_STATES:
            continue
        word = val.lower()
        if word in (ACTIVE, NOT_ACTIVE):
            states[_Q_STATES[p[-1]]] = word == ACTIVE
        elif not NOT_AVAILABLE.match(val):
            err.add(ln, f"{' / '.join(p)}: not Active or Not Active: {val[:40]!r}; value dropped")
    return states


def _q_link(b: _QBlock, v: dict[str, Any], err: Problems) -> None:
    for p, val, ln in b.entries:
        fld = _Q_LINK.get(p[-2:]) if len(p) == 4 and p[:2] == ("PCI", "GPU Link Info") else None
        if fld is None or (fld in v and p[-1] == "Device Current"):
            continue
        try:
            x = parse_quantity(val.rstrip("x"), None, 1, 64)
        except CellError as e:
            err.add(ln, f"{' / '.join(p)}: {e}; value dropped")
            continue
        if x is not None:
            v[fld] = x


def read(lines: Iterable[str], err: Problems, interval: float, run: RunFacts) -> Iterator[Record]:
    found = run.found
    versions: dict[str, str] = {}
    reasons = ReasonTime()
    for n, (t, line, blocks) in enumerate(_q_blocks(lines, err, versions)):
        if t is None:
            run.timed = False
            t = n * interval
        records: list[Record] = []
        for idx, b in enumerate(blocks):
            gpu = str(idx)
            v: dict[str, Any] = {
                "util": _q_value(b, "%", 0, 100, err, "Utilization", "GPU"),
                "mem_used": _q_value(b, "MiB", 0, 2 ** 24, err, "FB Memory Usage", "Used"),
                "mem_total": _q_value(b, "MiB", 0, 2 ** 24, err, "FB Memory Usage", "Total"),
                "temp": _q_value(b, "C", -50, 250, err, "Temperature", "GPU Current Temp"),
                "mtemp": _q_value(b, "C", -50, 250, err, "Temperature", "Memory Current Temp"),
                "sm_clock": _q_value(b, "MHz", 0, 100000, err, "Clocks", "SM"),
                "mem_clock": _q_value(b, "MHz", 0, 100000, err, "Clocks", "Memory"),
                "fan": _q_value(b, "%", 0, 100, err, "Fan Speed"),
                "remap_correctable": _q_value(b, None, 0, None, err, "Remapped Rows", "Correctable Error"),
                "remap_uncorrectable": _q_value(b, None, 0, None, err, "Remapped Rows", "Uncorrectable Error"),
            }
            # drivers >= 530 nest power under 'GPU Power Readings'; older ones under 'Power Readings'
            v["power"] = (_q_value(b, "W", 0, 10000, err, "GPU Power Readings", "Average Power Draw")
                          if b.get("GPU Power Readings", "Average Power Draw") else
                          _q_value(b, "W", 0, 10000, err, "Power Readings", "Power Draw"))
            v["limit"] = (_q_value(b, "W", 0, 10000, err, "GPU Power Readings", "Current Power Limit")
                          if b.get("GPU Power Readings", "Current Power Limit") else
                          _q_value(b, "W", 0, 10000, err, "Power Readings", "Enforced Power Limit"))
            pending = b.get("Remapped Rows", "Pending")
            v["remap_pending"] = pending[0] if pending and not NOT_AVAILABLE.match(pending[0]) else None
            for label, reason in _Q_THROTTLE.items():
                v["thr:" + reason] = _q_value(b, "us", 0, None, err, "Clocks Event Reasons Counters", label)
            v["thr_states"] = _q_states(b, err)
            _q_link(b, v, err)
            corrected = [_q_value(b, None, 0, None, err, "ECC Errors", "Volatile", k)
                         for k in ("SRAM Correctable", "DRAM Correctable")]
            uncorrected = [_q_value(b, None, 0, None, err, "ECC Errors", "Volatile", k)
                           for k in ("SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED", "DRAM Uncorrectable")]
            if any(x is not None for x in corrected):
                v["ecc_corrected"] = sum(x for x in corrected if x is not None)
            if any(x is not None for x in uncorrected):
                v["ecc_uncorrected"] = sum(x for x in uncorrected if x is not None)
            if b.get("GPU Power Readings", "Average Power Draw"):
                run.power_averaged = True
            rec = smi_record(t, gpu, v, b.line, None, reasons)
            replays = _q_value(b, None, 0, None, err, "PCI", "Replays Since Reset")
            if replays is not None:
                rec.reading.counters["pcie_replays_total"] = replays
            procs = [(p, val) for p, val, _ in b.entries if p and p[0] == "Processes"]
            mig_gis = _q_mig(b, t, gpu, found, records, err)
            if procs or b.get("Processes") is not None:
                pids = [val for p, val in procs if p[-1] == "Process ID"]
                rec.reading.holds_workload = bool(pids)
                gis = [val for p, val in procs if p[-1] == "GPU instance ID"]
                for gi, mig_rec in mig_gis.items():
                    mig_rec.reading.holds_workload = gi in gis
            uuid = b.get("GPU UUID")
            model = b.get("Product Name")
            found.setdefault(gpu, DeviceInfo(gpu=gpu, uuid=uuid[0] if uuid else "",
                                             model=model[0] if model else "", pci_bus_id=b.bus_id,
                                             driver=versions.get("Driver Version", ""),
                                             cuda_version=versions.get("CUDA Version", "")))
            records.append(rec)
        yield from records
    if not found:
        raise err.fatal(1, "no 'GPU <bus id>' section: not nvidia-smi -q output")


def _q_mig(b: _QBlock, t: float, gpu: str, found: dict[str, DeviceInfo], records: list[Record],
           err: Problems) -> dict[str, Record]:
    """MIG instances of one GPU block -> records keyed by GPU instance id."""
    out: dict[str, Record] = {}
    cur: dict[str, Any] | None = None
    instances: list[dict[str, Any]] = []
    for p, val, ln in b.entries:
        if not p or p[0] != "MIG Device":
            continue
        if p == ("MIG Device", "Index"):
            cur = {"line": ln}
            instances.append(cur)
        if cur is None:
            continue
        if p == ("MIG Device", "GPU Instance ID"):
            cur["gi"] = val
        elif p in (("MIG Device", "FB Memory Usage", "Used"), ("MIG Device", "Shared FB Memory Usage", "Used")):
            cur["used"] = (val, ln)
        elif p in (("MIG Device", "FB Memory Usage", "Total"), ("MIG Device", "Shared FB Memory Usage", "Total")):
            cur["total"] = (val, ln)
    parent = b.get("GPU UUID")
    for inst in instances:
        gi = inst.get("gi")
        if gi is None:
            continue
        key = f"{gpu}/{gi}"
        v: dict[str, Any] = {}
        for name, fld in (("used", "mem_used"), ("total", "mem_total")):
            if name in inst:
                try:
                    v[fld] = parse_quantity(inst[name][0], "MiB", 0, 2 ** 24)
                except CellError as e:
                    err.add(inst[name][1], f"MIG Device {gi} memory: {e}; value dropped")
        rec = smi_record(t, key, v, inst["line"], None)
        found.setdefault(key, DeviceInfo(gpu=key, gpu_instance=gi, parent_uuid=parent[0] if parent else ""))
        records.append(rec)
        out[gi] = rec
    return out
