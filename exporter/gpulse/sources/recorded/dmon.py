"""`nvidia-smi dmon [-o DT]` output."""
from __future__ import annotations

import calendar
import re
import time
from typing import Any, Iterable, Iterator

from ...model import DeviceInfo
from ..cells import CellError, is_gpu_index, parse_quantity
from .records import Problems, Record, RunFacts
from .smi import smi_record

_DMON_HEAD = re.compile(r"^#\s*(?:date[\s,]+)?(?:time[\s,]+)?gpu\b", re.I)


def sniff(head: list[str]) -> bool:
    return bool(_DMON_HEAD.match(head[0]))


# dmon column -> (field, unit as dmon prints it, lo, hi)
_DMON_FIELDS: dict[str, tuple[str, str | None, float | None, float | None]] = {
    "pwr": ("power", "W", 0, 10000), "gtemp": ("temp", "C", -50, 250), "mtemp": ("mtemp", "C", -50, 250),
    "sm": ("util", "%", 0, 100), "mem": (None, "%", None, None), "enc": (None, "%", None, None),
    "dec": (None, "%", None, None), "jpg": (None, "%", None, None), "ofa": (None, "%", None, None),
    "mclk": ("mem_clock", "MHz", 0, 100000), "pclk": ("sm_clock", "MHz", 0, 100000),
    "pviol": (None, "%", None, None), "tviol": (None, None, None, None),
    "fb": ("mem_used", "MiB", 0, 2 ** 24), "bar1": (None, None, None, None), "ccpm": (None, None, None, None),
    "sbecc": (None, None, None, None), "dbecc": (None, None, None, None), "pci": (None, None, None, None),
    "rxpci": ("rx", "MB/s", 0, None), "txpci": ("tx", "MB/s", 0, None),
    "gpu": ("index", None, None, None), "date": ("date", None, None, None), "time": ("time", None, None, None),
}


def read(lines: Iterable[str], err: Problems, interval: float, run: RunFacts) -> Iterator[Record]:
    names: list[str] | None = None
    found = run.found
    instant = -1
    last_idx: int | None = None
    last_t: float | None = None
    day = 0.0
    pcie: dict[str, dict[tuple[str, ...], float]] = {}
    prev_t: dict[str, float] = {}
    run.timed = False
    for i, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text:
            continue
        if text.startswith("#"):
            toks = [t.lower() for t in re.split(r"[\s,]+", text.lstrip("#").strip()) if t]
            if "gpu" in toks:
                names = toks
                for n in toks:
                    if n not in _DMON_FIELDS:
                        err.add(i, f"unknown dmon column {n!r} ignored")
                last_idx = None
            continue       # the units line, or a comment
        if names is None:
            raise err.fatal(i, "no dmon header ('# gpu pwr gtemp ...') before the first data line")
        toks = [t for t in re.split(r"[\s,]+", text) if t]
        if len(toks) != len(names):
            err.add(i, f"truncated line: {len(toks)} fields, the dmon header has {len(names)}; row skipped"
                    if len(toks) < len(names) else
                    f"{len(toks)} fields, the dmon header has {len(names)}; row skipped")
            continue
        row = dict(zip(names, toks))
        idx_txt = row.get("gpu", "")
        if not is_gpu_index(idx_txt):
            err.add(i, f"column 'gpu': not a GPU index: {idx_txt!r}; row skipped")
            continue
        idx = int(idx_txt)
        t: float | None = None
        if "time" in row:
            try:
                if "date" in row:
                    t = float(calendar.timegm(time.strptime(row["date"] + " " + row["time"], "%Y%m%d %H:%M:%S")))
                else:
                    h, m, s = (int(x) for x in row["time"].split(":"))
                    t = day + h * 3600 + m * 60 + s
                    if last_t is not None and t < last_t - 3600:   # past midnight
                        day += 86400.0
                        t += 86400.0
            except ValueError:
                err.add(i, f"not a dmon date/time: {row.get('date', '')} {row['time']!r}; row skipped")
                continue
            run.timed = True
        else:
            if last_idx is None or idx <= last_idx:
                instant += 1
            t = instant * interval
        last_idx = idx
        last_t = t
        values: dict[str, Any] = {}
        for name, cell in row.items():
            fld, unit, lo, hi = _DMON_FIELDS.get(name, (None, None, None, None))
            if fld is None or fld in ("index", "date", "time"):
                continue
            try:
                values[fld] = parse_quantity(cell, unit, lo, hi)
            except CellError as e:
                err.add(i, f"column {name!r}: {e}; value dropped")
        gpu = str(idx)
        found.setdefault(gpu, DeviceInfo(gpu=gpu))
        rec = smi_record(t, gpu, values, i, None)
        # dmon prints PCIe throughput as a rate; integrate it into byte counters
        acc = pcie.setdefault(gpu, {})
        if gpu in prev_t and t > prev_t[gpu]:
            for d in ("rx", "tx"):
                if values.get(d) is not None:
                    acc[(d,)] = acc.get((d,), 0.0) + values[d] * (t - prev_t[gpu])
        elif any(values.get(d) is not None for d in ("rx", "tx")):
            for d in ("rx", "tx"):
                acc.setdefault((d,), 0.0)
        prev_t[gpu] = t
        if acc:
            rec.reading.counters["pcie_bytes_total"] = dict(acc)
        yield rec
    if names is None:
        raise err.fatal(1, "no dmon header ('# gpu pwr gtemp ...') found")
