"""DCGM, read from a running dcgm-exporter's /metrics endpoint.

Most Kubernetes GPU nodes already run NVIDIA's dcgm-exporter (GPU Operator). Reading
it, rather than DCGM directly, needs no DCGM library in gpulse and no second
profiling session (DCGM allows one). Its profiling fields are what matter here:
DCGM_FI_PROF_SM_ACTIVE tells a computing GPU from one spinning in an NCCL wait, which
utilisation cannot.

dcgm-exporter refreshes its values every `-c` milliseconds (30 s by default in older
releases); run it with `-c 1000` or less, and set --dcgm.interval to match, or gpulse
integrates the same value many times.

The field vocabulary (DcgmMapper) is shared with replay of recorded dcgm-exporter
output (read_dcgm_log), so a live node and a log of one look the same downstream.
"""
from __future__ import annotations

import calendar
import itertools
import json
import logging
import math
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator
from urllib.parse import urlparse

from ...catalog import THROTTLE_REASONS
from ...model import DeviceInfo, PollResult, Reading, Sample
from ..base import CountOn, Source, SourceError
from ..recorded.stream import CellError, Record, is_gpu_index, gpu_sort_key, parse_any_time

log = logging.getLogger("gpulse.dcgm")

MIB = 2.0 ** 20

# ---------------------------------------------------------------- the vocabulary


@dataclass(frozen=True)
class Field:
    target: str          # "<kind>:<name>": sample, gauge, lgauge, counter, lcounter, rate, fb, limit; or xid, throttle
    scale: float         # DCGM unit -> base unit: value * scale / div
    lo: float            # plausible range, in DCGM's unit; outside = garbage
    hi: float
    label: str = ""      # extra label value (ecc type, direction...)
    div: float = 1.0     # dividing keeps whole percents exact (70 / 100 == 0.7)


_PCT = dict(scale=1.0, lo=0.0, hi=100.0, div=100.0)
_RATIO = dict(scale=1.0, lo=0.0, hi=1.0 + 1e-6)

FIELDS: dict[str, Field] = {
    # what the analysis integrates
    "DCGM_FI_DEV_GPU_UTIL": Field("sample:util", **_PCT),
    "DCGM_FI_PROF_SM_ACTIVE": Field("sample:sm_active", **_RATIO),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": Field("sample:gr_active", **_RATIO),
    "DCGM_FI_DEV_POWER_USAGE": Field("sample:power_w", 1.0, 0.0, 10000.0),
    "DCGM_FI_DEV_FB_USED": Field("sample:memory_used_bytes", MIB, 0.0, 2.0 ** 24),
    # gauges
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": Field("gauge:tensor_active_ratio", **_RATIO),
    "DCGM_FI_PROF_DRAM_ACTIVE": Field("gauge:dram_active_ratio", **_RATIO),
    "DCGM_FI_DEV_MEM_COPY_UTIL": Field("gauge:memory_copy_utilization_ratio", **_PCT),
    "DCGM_FI_DEV_FB_TOTAL": Field("gauge:memory_total_bytes", MIB, 0.0, 2.0 ** 24),
    "DCGM_FI_DEV_FB_FREE": Field("fb:free", MIB, 0.0, 2.0 ** 24),
    "DCGM_FI_DEV_FB_RESERVED": Field("fb:reserved", MIB, 0.0, 2.0 ** 24),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": Field("limit:mgmt", 1.0, 0.0, 10000.0),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": Field("limit:enforced", 1.0, 0.0, 10000.0),
    "DCGM_FI_DEV_GPU_TEMP": Field("gauge:temperature_celsius", 1.0, -50.0, 250.0),
    "DCGM_FI_DEV_MEMORY_TEMP": Field("gauge:memory_temperature_celsius", 1.0, -50.0, 250.0),
    "DCGM_FI_DEV_SM_CLOCK": Field("gauge:sm_clock_hertz", 1e6, 0.0, 100000.0),
    "DCGM_FI_DEV_MEM_CLOCK": Field("gauge:memory_clock_hertz", 1e6, 0.0, 100000.0),
    "DCGM_FI_DEV_FAN_SPEED": Field("gauge:fan_speed_ratio", **_PCT),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": Field("lgauge:remapped_rows", 1.0, 0.0, 1e9, "correctable"),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": Field("lgauge:remapped_rows", 1.0, 0.0, 1e9, "uncorrectable"),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": Field("gauge:remapping_pending", 1.0, 0.0, 1.0),
    # counters as DCGM keeps them
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": Field("counter:energy_joules_total", 1.0, 0.0, 1e18, div=1000.0),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": Field("lcounter:ecc_errors_total", 1.0, 0.0, 1e15, "corrected"),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": Field("lcounter:ecc_errors_total", 1.0, 0.0, 1e15, "uncorrected"),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": Field("counter:pcie_replays_total", 1.0, 0.0, 1e15),
    # rates (bytes/s averaged by DCGM) that gpulse integrates into byte counters
    "DCGM_FI_PROF_PCIE_TX_BYTES": Field("rate:pcie_bytes_total", 1.0, 0.0, 1e12, "tx"),
    "DCGM_FI_PROF_PCIE_RX_BYTES": Field("rate:pcie_bytes_total", 1.0, 0.0, 1e12, "rx"),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": Field("rate:nvlink_bytes_total", 1.0, 0.0, 1e13, "tx"),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": Field("rate:nvlink_bytes_total", 1.0, 0.0, 1e13, "rx"),
    # events
    "DCGM_FI_DEV_XID_ERRORS": Field("xid", 1.0, 0.0, 1e6),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": Field("throttle", 1.0, 0.0, 2.0 ** 63),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": Field("throttle", 1.0, 0.0, 2.0 ** 63),
}

# NVML clock-event reason bits, in catalog.THROTTLE_REASONS order (nvmlClocksEventReason*)
_THROTTLE_BITS = dict(zip(THROTTLE_REASONS, (0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x80, 0x100)))


def is_blank(value: float, target: str) -> bool:
    """DCGM's 'no value' sentinels (DCGM_*_BLANK and the NOT_FOUND / NOT_SUPPORTED /
    NOT_PERMISSIONED values just above them), as dcgm-exporter prints them."""
    if value >= 9.2e18:                                  # int64 blank 0x7ffffffffffffff0..
        return True
    if 140737488355328.0 <= value <= 140737488355332.0:  # fp64 blank 2**47 ..
        return True
    # int32 blank 0x7ffffff0..; only for 32-bit fields: an int64 counter may pass it honestly
    return 2147483632.0 <= value <= 2147483636.0 and not target.startswith(("counter", "lcounter"))


# Label spellings: dcgm-exporter renamed Hostname over time; Prometheus renames the
# workload labels to exported_* when it scrapes the exporter without honor_labels.
_HOST_LABELS = ("Hostname", "hostname")
_ATTR = ("namespace", "pod", "container")


@dataclass
class _State:
    """Per-entity memory across scrapes: event counts and integrated rates."""

    t: float | None = None
    rates: dict[tuple[str, str], float] = field(default_factory=dict)
    totals: dict[str, dict[tuple[str, ...], float]] = field(default_factory=dict)
    xid_last: float = 0.0
    xid_counts: dict[tuple[str, ...], float] = field(default_factory=dict)
    throttle_mask: int | None = None
    throttle: dict[tuple[str, ...], float] = field(default_factory=dict)


@dataclass
class Mapped:
    """One scrape, mapped: a Record and a DeviceInfo per GPU entity."""

    records: dict[str, Record]
    devices: dict[str, DeviceInfo]
    invalid: list[tuple[int, str]]   # (line, description) per garbage value dropped
    blank: int                  # sentinel values skipped
    has_sm_active: bool
    nodes: list[str]
    duplicates: int = 0         # series seen twice in this answer (the largest value kept)
    resets: dict[str, int] = field(default_factory=dict)   # counters that went backwards, by family


class DcgmMapper:
    """Maps dcgm-exporter series (name, labels, value) to gpulse records, one scrape at
    a time. Stateful: XID events, throttle time and byte counters accumulate across
    scrapes of the same entity, and DCGM's own counters are counted on across its
    resets, so a gpulse counter never decreases.

    one_node: the series come from one node (a live endpoint), so when none of them
    names the host seen first, the host was renamed (a new pod name in `Hostname`):
    its GPUs keep their keys instead of becoming new entities."""

    def __init__(self, one_node: bool = False, count_on: bool = True) -> None:
        self._state: dict[str, _State] = {}
        self._first_host: str | None = None
        self._one_node = one_node
        # a recorded log keeps its counters as written; ReplaySource counts on for every format
        self._count_on = CountOn() if count_on else None

    def forget(self, key: str) -> None:
        self._state.pop(key, None)
        if self._count_on:
            self._count_on.forget(key)

    def entity(self, labels: dict[str, str]) -> tuple[str, str] | None:
        """(gpu key, host) of a series; None for series that are not about a GPU."""
        gpu = labels.get("gpu", "")
        if not is_gpu_index(gpu):
            return None
        host = next((labels[k] for k in _HOST_LABELS if labels.get(k)), "")
        if self._first_host is None:
            self._first_host = host
        key = gpu
        gi = labels.get("GPU_I_ID", "")
        if gi:
            key = f"{gpu}/{gi}"
        if host and host != self._first_host:
            # one log may hold several nodes: the first keeps plain indices
            key = f"{host}:{key}"
        return key, host

    def map(self, series: Iterable[tuple[str, dict[str, str], float, int]], t: float) -> Mapped:
        """series: (name, labels, value, line in the log or 0)."""
        values: dict[str, dict[str, Any]] = {}
        devices: dict[str, DeviceInfo] = {}
        attribution: dict[str, dict[str, str]] = {}
        invalid: list[tuple[int, str]] = []
        blank = 0
        nodes: list[str] = []
        sm_seen = False
        duplicates = 0
        if self._one_node:
            series = list(series)
            hosts = {next((lab[k] for k in _HOST_LABELS if lab.get(k)), "") for _, lab, _, _ in series}
            if self._first_host not in hosts and len(hosts - {""}) == 1:
                self._first_host = None          # renamed: the new name keeps plain indices
        for name, labels, value, line in series:
            spec = FIELDS.get(name)
            if spec is None:
                continue
            ent = self.entity(labels)
            if ent is None:
                continue
            key, host = ent
            if host and host not in nodes:
                nodes.append(host)
            if key not in devices:
                devices[key] = _device(key, labels)
                a = _attribution(labels)
                if a:
                    attribution[key] = a
            if not isinstance(value, (int, float)) or math.isnan(value):
                invalid.append((line, f"{name}{{gpu={key}}} = {value!r}: not a number"))
                continue
            value = float(value)
            if is_blank(value, spec.target):
                blank += 1
                continue
            if not spec.lo <= value <= spec.hi:
                invalid.append((line, f"{name}{{gpu={key}}} = {value:g}: outside {spec.lo:g}..{spec.hi:g}"))
                continue
            got = values.setdefault(key, {})
            if name in got:
                # the same field of one GPU twice in one answer: keep the largest, whatever
                # the order, so the choice is the same at every scrape (and a counter's is
                # never its smaller value)
                duplicates += 1
                value = max(value, got[name])
            got[name] = value
            if name == "DCGM_FI_PROF_SM_ACTIVE":
                sm_seen = True
        records = {key: self._record(key, t, values.get(key, {}), attribution.get(key)) for key in devices}
        resets = self._count_on.take_resets() if self._count_on else {}
        return Mapped(records, devices, invalid, blank, sm_seen, nodes, duplicates, resets)

    def _record(self, key: str, t: float, vals: dict[str, float], attribution: dict[str, str] | None) -> Record:
        st = self._state.setdefault(key, _State())
        dt = t - st.t if st.t is not None and t > st.t else 0.0
        sample_kw: dict[str, float] = {}
        gauges: dict[str, Any] = {}
        counters: dict[str, Any] = {}
        fb: dict[str, float] = {}
        limits: dict[str, float] = {}
        for name, raw in vals.items():
            spec = FIELDS[name]
            v = raw * spec.scale / spec.div
            kind, _, target = spec.target.partition(":")
            if kind == "sample":
                sample_kw[target] = v
            elif kind == "gauge":
                gauges[target] = v
            elif kind == "lgauge":
                gauges.setdefault(target, {})[(spec.label,)] = v
            elif kind in ("counter", "lcounter"):
                if self._count_on:
                    v = self._count_on((key, target, spec.label), target, v)
                if kind == "counter":
                    counters[target] = v
                else:
                    counters.setdefault(target, {})[(spec.label,)] = v
            elif kind == "fb":
                fb[target] = v
            elif kind == "limit":
                limits[target] = v
            elif kind == "rate":
                acc = st.totals.setdefault(target, {})
                prev = st.rates.get((target, spec.label))
                # trapezoid between the two readings of the rate
                acc[(spec.label,)] = acc.get((spec.label,), 0.0) + (0.5 * (prev + v) * dt if prev is not None else 0.0)
                st.rates[(target, spec.label)] = v
            elif kind == "xid":
                if raw and raw != st.xid_last:
                    code = (str(int(raw)),)
                    st.xid_counts[code] = st.xid_counts.get(code, 0.0) + 1.0
                st.xid_last = raw
            elif kind == "throttle":
                if st.throttle_mask is not None and dt > 0:
                    for reason, bit in _THROTTLE_BITS.items():
                        if st.throttle_mask & bit:
                            st.throttle[(reason,)] = st.throttle.get((reason,), 0.0) + dt
                for reason in _THROTTLE_BITS:
                    st.throttle.setdefault((reason,), 0.0)
                st.throttle_mask = int(raw)
        if "power_w" in sample_kw:
            gauges["power_watts"] = sample_kw["power_w"]
        if "memory_used_bytes" in sample_kw:
            gauges["memory_used_bytes"] = sample_kw["memory_used_bytes"]
            if "memory_total_bytes" not in gauges and "free" in fb:
                gauges["memory_total_bytes"] = sample_kw["memory_used_bytes"] + fb["free"] + fb.get("reserved", 0.0)
        if "gr_active" in sample_kw:
            gauges["gr_engine_active_ratio"] = sample_kw["gr_active"]
        if "sm_active" in sample_kw:
            gauges["sm_active_ratio"] = sample_kw["sm_active"]
        limit = limits.get("enforced", limits.get("mgmt"))
        if limit is not None:
            gauges["power_limit_watts"] = limit
        for target, acc in st.totals.items():
            counters[target] = dict(acc)
        if st.xid_counts:
            counters["xid_errors_total"] = dict(st.xid_counts)
        if st.throttle:
            counters["throttle_seconds_total"] = dict(st.throttle)
        st.t = t
        holds = True if attribution and attribution.get("pod") else None
        return Record(t=t, gpu=key, sample=Sample(t=t, **sample_kw), gauges=gauges, counters=counters,
                      attribution=attribution, holds_workload=holds)


def _device(key: str, labels: dict[str, str]) -> DeviceInfo:
    gi = labels.get("GPU_I_ID", "")
    uuid = labels.get("UUID", "")
    return DeviceInfo(gpu=key, uuid="" if gi else uuid, model=labels.get("modelName", ""),
                      pci_bus_id=labels.get("pci_bus_id", ""), driver=labels.get("DCGM_FI_DRIVER_VERSION", ""),
                      mig_profile=labels.get("GPU_I_PROFILE", ""), gpu_instance=gi,
                      parent_uuid=uuid if gi else "")


def _attribution(labels: dict[str, str]) -> dict[str, str] | None:
    """The workload's namespace/pod/container. Through Prometheus (job and instance
    labels present) plain pod/namespace/container name the exporter's own pod, and the
    workload's arrive as exported_*."""
    via_prometheus = "job" in labels and "instance" in labels
    if any(labels.get("exported_" + k) for k in _ATTR) or via_prometheus:
        out = {k: labels.get("exported_" + k, "") for k in _ATTR}
    else:
        out = {k: labels.get(k, "") for k in _ATTR}
    out = {k: v for k, v in out.items() if v}
    return out or None


# ---------------------------------------------------------------- exposition text

def _exposition_series(text: str) -> Iterator[tuple[str, dict[str, str], float, float | None]]:
    from prometheus_client.parser import text_string_to_metric_families
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name = s.name
            # the parser appends _total to samples of `# TYPE x counter` families;
            # DCGM's field names are what dcgm-exporter wrote
            if name.endswith("_total") and name not in FIELDS and name[:-6] in FIELDS:
                name = name[:-6]
            yield name, s.labels, s.value, s.timestamp


def parse_exposition(text: str, first_line: int = 1) -> tuple[list[tuple[str, dict[str, str], float, float | None]],
                                                             list[tuple[int, str]]]:
    """Prometheus text -> (series, bad lines). The whole text is parsed at once; when
    prometheus_client rejects it, line by line, so one broken line costs only itself."""
    try:
        return list(_exposition_series(text)), []
    except ValueError:
        pass
    series = []
    bad: list[tuple[int, str]] = []
    for n, line in enumerate(text.splitlines(), first_line):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            series.extend(_exposition_series(s + "\n"))
        except ValueError:
            bad.append((n, f"not a Prometheus exposition line: {s[:100]!r}"))
    return series, bad


# ---------------------------------------------------------------- recorded output

_NAME = re.compile(r"^([A-Za-z_:][\w:]*)")
_SAMPLE_SHAPE = re.compile(r"^[A-Za-z_:][\w:]*(\{.*\})?\s+(\S+)(\s+-?\d+)?$")


def _other_sample(s: str) -> bool:
    """A well-formed exposition sample (of a metric gpulse does not read)."""
    m = _SAMPLE_SHAPE.match(s)
    if not m:
        return False
    try:
        float(m.group(2))
    except ValueError:
        return False
    return True


def read_dcgm_log(lines: Iterable[str], err: Any, interval: float, run: Any) -> Iterator[Record]:
    """Recorded dcgm-exporter output -> records (see gpulse.sources.logs.LogStream).

    - exposition text: one scrape, or many appended (`curl ... >> log`). A new scrape
      starts where a series repeats; a line holding only a time (epoch seconds or ISO
      8601, as `date` prints it between curls) stamps the scrape after it. Sample
      timestamps, when present, win. Without any clock, scrapes are `interval` apart.
    - Prometheus HTTP API JSON (/api/v1/query or query_range responses), parsed whole
      and so capped at logs.MAX_JSON.
    - CSV: wide (a time column, label columns, one column per DCGM field) or long
      (time, metric, label columns, value).
    Text and CSV stream: one scrape (or one instant's rows) is held at a time.
    """
    from ..recorded.stream import MAX_JSON
    mapper = DcgmMapper(count_on=False)
    lines = iter(lines)
    skipped = []
    first = ""
    for ln in lines:
        skipped.append(ln)
        if ln.strip():
            first = ln.strip()
            break
    lines = itertools.chain(skipped, lines)
    if first.startswith(("{", "[")):
        size = 0
        parts = []
        for ln in lines:
            size += len(ln) + 1
            if size > MAX_JSON:
                raise err.fatal(0, f"Prometheus API JSON larger than {MAX_JSON >> 20} MiB: JSON is read whole; "
                                   "export a shorter range, or CSV or exposition text, which are streamed")
            parts.append(ln)
        scrapes = _json_scrapes("\n".join(parts), err)
        del parts
    elif not first.startswith("#") and "," in first.split("{")[0]:
        scrapes = _csv_scrapes(lines, err)     # a header row; exposition commas sit inside {}
    else:
        scrapes = _text_scrapes(lines, err, interval, run)
    for t, line, series in scrapes:
        m = mapper.map(series, t)
        for bad_line, desc in m.invalid:
            err.add(bad_line or line, f"{desc}; value dropped")
        for key, dev in m.devices.items():
            run.found.setdefault(key, dev)
        run.has_sm_active = run.has_sm_active or m.has_sm_active
        run.nodes_found.extend(h for h in m.nodes if h not in run.nodes_found)
        for rec in m.records.values():
            rec.line = line
            yield rec


# (time, first line, [(name, labels, value, line)])
_Scrape = tuple[float, int, list[tuple[str, dict[str, str], float, int]]]


def _time_line(s: str) -> float | None:
    """A line holding only a time, as a logging loop writes between scrapes."""
    try:
        return parse_any_time(s)
    except CellError:
        pass
    for fmt in ("%a %b %d %H:%M:%S UTC %Y", "%a %b %d %H:%M:%S GMT %Y", "%a %b %d %H:%M:%S %Y"):
        try:
            return float(calendar.timegm(time.strptime(s, fmt)))   # `date` output
        except ValueError:
            continue
    return None


def _parse_numbered(numbered: list[tuple[int, str]]) -> tuple[list, list[tuple[int, str]]]:
    """Sample lines with their file line numbers -> ([(name, labels, value, ts, line)], bad)."""
    series, bad = parse_exposition("\n".join(s for _, s in numbered) + "\n")
    if not bad and len(series) == len(numbered):   # one sample per line: lines pair up
        return [x + (n,) for x, (n, _) in zip(series, numbered)], []
    series, bad = [], []
    for n, s in numbered:   # find the file lines: parse them one by one
        got, b = parse_exposition(s + "\n")
        series.extend(x + (n,) for x in got)
        bad.extend((n, msg) for _, msg in b)
    return series, bad


def _text_scrapes(lines: Iterable[str], err: Any, interval: float, run: Any) -> Iterator[_Scrape]:
    body: list[tuple[int, str]] = []
    body_t: float | None = None
    body_line = 0
    i = 0
    seen: set[str] = set()
    pending_t: float | None = None
    boundary = True
    for n, raw in enumerate(lines, 1):
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        m = _NAME.match(s)
        name = m.group(1) if m and s[m.end():m.end() + 1] in ("{", " ", "\t") else None
        if name not in FIELDS:
            t = _time_line(s)
            if t is not None:
                pending_t, boundary = t, True
            elif not _other_sample(s):
                err.add(n, f"neither an exposition sample nor a time: {s[:80]!r}; skipped")
            continue      # well-formed but another exporter's metric: not ours to read
        # the series identity; a line cut inside its labels has no '}' and is reported by the parser
        close = s.rfind("}")
        key = s[:close + 1] if close >= 0 else s
        if boundary or key in seen:
            if body:
                yield from _text_scrape(body, body_t, body_line, i, err, interval, run)
                i += 1
            body, body_t, body_line = [], pending_t, n
            pending_t, boundary, seen = None, False, set()
        seen.add(key)
        body.append((n, s))
    if body:
        yield from _text_scrape(body, body_t, body_line, i, err, interval, run)


def _text_scrape(body: list[tuple[int, str]], t0: float | None, line: int, i: int, err: Any, interval: float,
                 run: Any) -> Iterator[_Scrape]:
    series, bad = _parse_numbered(body)
    for n, msg in bad:
        err.add(n, msg + "; skipped")
    if any(x[3] is not None for x in series):
        # explicit sample timestamps win: one scrape per distinct time
        by_t: dict[float, list] = {}
        for name, labels, value, ts, n in series:
            by_t.setdefault(ts if ts is not None else (t0 if t0 is not None else i * interval),
                            []).append((name, labels, value, n))
        for ts in sorted(by_t):
            yield ts, line, by_t[ts]
        return
    if t0 is None:
        run.timed = False
        t0 = i * interval
    yield t0, line, [(name, labels, value, n) for name, labels, value, _, n in series]


def _json_scrapes(text: str, err: Any) -> Iterator[_Scrape]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise err.fatal(e.lineno, f"not valid JSON: {e.msg}") from None
    except RecursionError:
        raise err.fatal(0, "JSON nested too deeply to be a Prometheus API query response") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        raise err.fatal(1, "JSON is not a Prometheus API query response (no data.result list)")
    by_t: dict[float, list[tuple[str, dict[str, str], float, int]]] = {}
    for n, item in enumerate(result):
        metric = item.get("metric") if isinstance(item, dict) else None
        if not isinstance(metric, dict) or "__name__" not in metric:
            err.add(0, f"data.result[{n}]: no metric name; series skipped")
            continue
        points = item.get("values") or ([item["value"]] if "value" in item else [])
        labels = {k: str(v) for k, v in metric.items() if k != "__name__"}
        for p in points:
            try:
                ts, v = float(p[0]), float(p[1])
            except (TypeError, ValueError, IndexError):
                err.add(0, f"data.result[{n}]: bad point {p!r}; skipped")
                continue
            by_t.setdefault(ts, []).append((metric["__name__"], labels, v, 0))
    for ts in sorted(by_t):
        yield ts, 0, by_t[ts]


def _csv_scrapes(lines: Iterable[str], err: Any) -> Iterator[_Scrape]:
    import csv
    rows = csv.reader(lines)
    header = [h.strip() for h in next(rows)]
    lower = [h.lower() for h in header]
    tcol = next((i for i, h in enumerate(lower) if h in ("timestamp", "time", "ts")), None)
    if tcol is None:
        raise err.fatal(1, f"dcgm CSV header has no timestamp/time column: {', '.join(header)[:80]!r}")
    name_col = next((i for i, h in enumerate(lower) if h in ("metric", "__name__", "name", "field")), None)
    value_col = lower.index("value") if "value" in lower else None
    long_form = name_col is not None and value_col is not None
    label_cols = [i for i, h in enumerate(header) if i not in (tcol, name_col, value_col)
                  and not _field_column(h)]
    field_cols = [(i, _field_column(h)) for i, h in enumerate(header) if _field_column(h)]
    if not long_form and not field_cols:
        raise err.fatal(1, f"dcgm CSV header names no DCGM_FI_* column and no metric/value columns: "
                           f"{', '.join(header)[:80]!r}")
    cur_t: float | None = None
    cur: list[tuple[str, dict[str, str], float, int]] = []
    cur_line = 2
    for n, row in enumerate(rows, 2):
        if not row or not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            err.add(n, f"{'truncated line' if len(row) < len(header) else 'too many fields'}: "
                       f"{len(row)} fields, header has {len(header)}; row skipped")
            continue
        try:
            t = parse_any_time(row[tcol])
        except CellError as e:
            err.add(n, f"column {header[tcol]!r}: {e}; row skipped")
            continue
        labels = {header[i]: row[i].strip() for i in label_cols if row[i].strip()}
        found: list[tuple[str, dict[str, str], float, int]] = []
        cells = [(row[name_col].strip(), {}, row[value_col])] if long_form else \
                [(fname, flabels, row[i]) for i, (fname, flabels) in field_cols]
        for fname, flabels, cell in cells:
            if not cell.strip():
                continue
            try:
                v = float(cell)
            except ValueError:
                err.add(n, f"{fname}: not a number: {cell.strip()[:40]!r}; value dropped")
                continue
            found.append((fname, {**labels, **flabels}, v, n))
        if cur and t != cur_t:
            yield cur_t, cur_line, cur
            cur = []
        if not cur:
            cur_t, cur_line = t, n
        cur.extend(found)
    if cur:
        yield cur_t, cur_line, cur


def _field_column(header: str) -> tuple[str, dict[str, str]] | None:
    """'DCGM_FI_DEV_GPU_UTIL' or 'DCGM_FI_DEV_GPU_UTIL{gpu="0",...}' (Grafana's CSV) ->
    (name, labels); None for any other column."""
    h = header.strip()
    if not h.startswith("DCGM_FI_"):
        return None
    if "{" not in h:
        return h, {}
    series, _ = parse_exposition(h + " 0\n")
    if not series:
        return None
    return series[0][0], series[0][1]


# ---------------------------------------------------------------- the live source

class _FetchError(Exception):
    pass


class DcgmSource(Source):
    """Polls dcgm-exporter at --dcgm.interval; between fetches, polls repeat the last
    state without new samples. A down or slow endpoint marks every GPU down with one
    error line and never raises."""

    name = "dcgm"
    MAX_BODY = 64 * 2 ** 20
    # One node has at most a few dozen GPU entities (16 GPUs x 7 MIG instances); an
    # answer naming more is broken or hostile, and each would be a dozen series.
    MAX_ENTITIES = 256
    # An entity missing from the answers this long is gone (a MIG reconfiguration, a
    # renamed host, a GPU removed): forgotten, its series leave /metrics.
    EXPIRE_S = 300.0

    def __init__(self, cfg: Any):
        self.url = cfg.dcgm.url
        self.timeout = float(cfg.dcgm.timeout)
        self.interval = float(cfg.dcgm.interval)
        self.has_sm_active = False
        self._session: Any = None
        self._mapper = DcgmMapper(one_node=True)
        self._devices: dict[str, DeviceInfo] = {}
        self._seen: dict[str, float] = {}        # entity -> `now` of the last answer naming it
        self._capped = False
        self._last: dict[str, Reading] = {}
        self._last_fetch: float | None = None
        self._failing: str | None = None
        self._reported_invalid: set[str] = set()
        self._devices_changed = False
        self._pending: str | None = None     # the body fetched by open(), mapped by the first poll
        self._deadline = _Deadline()
        self._events: dict[tuple[str, str], int] = {}

    # -- connection

    def open(self) -> list[DeviceInfo]:
        u = urlparse(self.url)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise SourceError(f"dcgm.url: {self.url!r} is not an http(s) URL of dcgm-exporter's /metrics")
        import requests
        self._session = requests.Session()
        # one keep-alive connection, no retries: a retry would double the worst-case poll time
        adapter = _deadline_adapter(self._deadline)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        self._session.headers["Accept"] = "text/plain;version=0.0.4"
        try:
            body = self._fetch()
        except _FetchError as e:
            # not fatal: dcgm-exporter often starts after us; GPUs appear when it answers
            log.warning("%s; will keep trying every %gs", e, self.interval)
            self._failing = str(e)
            return []
        # discovery only (a throw-away mapper): the first poll maps this body at its own `now`
        self._pending = body
        series, _ = parse_exposition(body)
        m = DcgmMapper(one_node=True).map(((n, lab, v, 0) for n, lab, v, _ in series), 0.0)
        self._devices = {k: m.devices[k] for k in self._within_cap(m.devices)}
        self.has_sm_active = m.has_sm_active
        return self.devices()

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def devices(self) -> list[DeviceInfo]:
        return [self._devices[k] for k in sorted(self._devices, key=gpu_sort_key)]

    def _fetch(self) -> str:
        """One GET with a deadline on the whole answer, not only on each socket read.

        Socket timeouts bound each read, and a server that trickles a byte at a time
        passes every one of them; so a timer shuts the connection's socket when the
        whole exchange (connect, head, body) is late, which ends any read in progress."""
        import requests
        watch = self._deadline
        watch.arm(self.timeout)
        try:
            r = self._session.get(self.url, timeout=(self.timeout, self.timeout), stream=True)
            try:
                if r.status_code != 200:
                    raise _FetchError(f"dcgm-exporter {self.url}: HTTP {r.status_code}")
                parts = []
                size = 0
                while True:
                    # read1: what has arrived, so the size cap applies as bytes come in
                    chunk = r.raw.read1(65536, decode_content=True)
                    if not chunk:
                        break
                    parts.append(chunk)
                    size += len(chunk)
                    if size > self.MAX_BODY:
                        raise _FetchError(f"dcgm-exporter {self.url}: answer larger than {self.MAX_BODY / 2 ** 20:g} MiB")
                if watch.expired:
                    raise _FetchError(self._late(watch))
                return b"".join(parts).decode("utf-8", errors="replace")
            finally:
                r.close()
        except (requests.RequestException, OSError, *_http_errors()) as e:
            if watch.expired:
                raise _FetchError(self._late(watch)) from None
            if isinstance(e, requests.Timeout):
                raise _FetchError(f"dcgm-exporter {self.url}: no answer within {self.timeout:g}s") from None
            if isinstance(e, requests.ConnectionError) and not watch.answered:
                raise _FetchError(f"dcgm-exporter {self.url}: cannot connect ({_reason(e)})") from None
            if watch.answered:
                raise _FetchError(f"dcgm-exporter {self.url}: answer cut off ({_reason(e)})") from None
            raise _FetchError(f"dcgm-exporter {self.url}: {_reason(e)}") from None
        finally:
            watch.disarm()

    def _late(self, watch: _Deadline) -> str:
        got = "answer not complete" if watch.answered else "no answer"
        return f"dcgm-exporter {self.url}: {got} within {self.timeout:g}s"

    # -- polling

    def poll(self, now: float) -> PollResult:
        errors: dict[str, int] = {}
        if self._pending is not None:
            body, self._pending = self._pending, None
            self._last_fetch = now
            self._ingest_body(now, body, errors)
            return self._result(errors)
        if self._last_fetch is not None and now - self._last_fetch < self.interval * 0.999:
            # between fetches: same state, no new samples
            return PollResult([Reading(r.gpu, [], r.gauges, r.counters, r.up, r.error, r.attribution,
                                       r.holds_workload) for r in self._last.values()])
        self._last_fetch = now
        try:
            body = self._fetch()
        except _FetchError as e:
            errors["dcgm_scrape"] = 1
            if self._failing != str(e):
                log.warning("%s; its GPUs are marked down", e)
            self._failing = str(e)
            for key, r in self._last.items():
                self._last[key] = Reading(key, [], {}, r.counters, False, str(e), r.attribution)
            return self._result(errors)
        if self._failing is not None:
            log.info("dcgm-exporter %s answers again", self.url)
            self._failing = None
        self._ingest_body(now, body, errors)
        return self._result(errors)

    def _within_cap(self, found: dict[str, DeviceInfo]) -> list[str]:
        """The entities kept: those already known, then new ones in GPU order, up to MAX_ENTITIES."""
        known = [k for k in found if k in self._devices]
        new = sorted((k for k in found if k not in self._devices), key=gpu_sort_key)
        return known + new[:max(0, self.MAX_ENTITIES - len(known))]

    def _ingest_body(self, now: float, body: str, errors: dict[str, int]) -> None:
        series, bad = parse_exposition(body)
        if bad:
            errors["dcgm_parse"] = len(bad)
            log.debug("dcgm-exporter %s: %d unparseable lines, first: %s", self.url, len(bad), bad[0][1])
        m = self._mapper.map(((n, lab, v, 0) for n, lab, v, _ in series), now)
        if m.invalid:
            errors["dcgm_invalid_value"] = len(m.invalid)
            for _, desc in m.invalid:
                field_key = desc.split(" = ")[0]
                if field_key not in self._reported_invalid:   # once per field and GPU
                    if len(self._reported_invalid) >= self.MAX_ENTITIES * len(FIELDS):
                        self._reported_invalid.clear()        # GPUs come and go: stay bounded
                    self._reported_invalid.add(field_key)
                    log.warning("dcgm-exporter %s: %s; dropped", self.url, desc)
        if m.duplicates:
            self._event(("dropped_series_total", "duplicate"), m.duplicates)
        for family, n in m.resets.items():
            self._event(("resets_total", family), n)
            log.info("dcgm-exporter %s: %s went backwards (DCGM restarted?); counting on from the last value",
                     self.url, family)
        if m.has_sm_active:
            self.has_sm_active = True
        kept = self._within_cap(m.devices)
        if len(kept) < len(m.devices):
            over = len(m.devices) - len(kept)
            self._event(("dropped_series_total", "entity_limit"), over)
            for key in set(m.devices) - set(kept):
                self._mapper.forget(key)
            if not self._capped:
                log.warning("dcgm-exporter %s: %d GPU entities in one answer, more than %d; the rest are dropped",
                            self.url, len(m.devices), self.MAX_ENTITIES)
                self._capped = True
        for key in kept:
            self._seen[key] = now
            dev = m.devices[key]
            if self._devices.get(key) != dev:
                self._devices[key] = dev
                self._devices_changed = True
        for key in list(self._devices):
            rec = m.records.get(key) if key in self._seen and self._seen[key] == now else None
            if rec is None:
                if now - self._seen.get(key, now) >= self.EXPIRE_S:
                    self._expire(key)
                    continue
                self._seen.setdefault(key, now)
                prev = self._last.get(key)
                self._last[key] = Reading(key, [], {}, prev.counters if prev else {}, False,
                                          "not in dcgm-exporter output", prev.attribution if prev else None)
                continue
            s = rec.sample
            has_value = any(v is not None for v in (s.util, s.power_w, s.memory_used_bytes, s.sm_active, s.gr_active))
            self._last[key] = Reading(key, [s] if has_value else [], rec.gauges, rec.counters, True, None,
                                      rec.attribution, rec.holds_workload)

    def _expire(self, key: str) -> None:
        log.info("dcgm-exporter %s: GPU %s not in its answers for %gs; forgotten", self.url, key, self.EXPIRE_S)
        for d in (self._devices, self._last, self._seen):
            d.pop(key, None)
        self._mapper.forget(key)
        self._devices_changed = True
        self._event(("expired_entities_total", ""), 1)

    def _event(self, key: tuple[str, str], n: int) -> None:
        self._events[key] = self._events.get(key, 0) + n

    def _result(self, errors: dict[str, int]) -> PollResult:
        devices = None
        if self._devices_changed:
            devices = self.devices()
            self._devices_changed = False
        readings = list(self._last.values())
        # the samples go out once; repeats between fetches carry none
        self._last = {k: Reading(r.gpu, [], r.gauges, r.counters, r.up, r.error, r.attribution, r.holds_workload)
                      for k, r in self._last.items()}
        events, self._events = self._events, {}
        return PollResult(readings, devices, errors, events)



class _Deadline:
    """A clock on one whole HTTP exchange: when it runs out, the socket of the
    connection in use is shut down, so whatever read is blocked on it returns."""

    def __init__(self) -> None:
        self.conn: Any = None          # the pool's connection (one: pool_maxsize=1)
        self.expired = False
        self.answered = False          # the status line and head arrived
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def arm(self, seconds: float) -> None:
        self.expired = self.answered = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _expire(self) -> None:
        with self._lock:
            if self._timer is None:
                return
            self.expired = True
            sock = getattr(self.conn, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _deadline_adapter(watch: _Deadline) -> Any:
    """requests' HTTPAdapter whose connections report themselves to `watch`."""
    from requests.adapters import HTTPAdapter
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class Watched:
        def connect(self) -> None:
            watch.conn = self
            super().connect()  # type: ignore[misc]

        def getresponse(self, *a: Any, **kw: Any) -> Any:
            watch.conn = self
            resp = super().getresponse(*a, **kw)  # type: ignore[misc]
            # a head cut short by the deadline parses as a (broken) answer: not one
            watch.answered = not watch.expired
            return resp

    class Conn(Watched, HTTPConnection):
        pass

    class SConn(Watched, HTTPSConnection):
        pass

    class Pool(HTTPConnectionPool):
        ConnectionCls = Conn

    class SPool(HTTPSConnectionPool):
        ConnectionCls = SConn

    class Adapter(HTTPAdapter):
        def init_poolmanager(self, *a: Any, **kw: Any) -> None:
            super().init_poolmanager(*a, **kw)
            self.poolmanager.pool_classes_by_scheme = {"http": Pool, "https": SPool}

    return Adapter(pool_connections=1, pool_maxsize=1, max_retries=0)


def _http_errors() -> tuple[type[BaseException], ...]:
    import http.client
    from urllib3.exceptions import HTTPError
    return (HTTPError, http.client.HTTPException)


def _reason(e: BaseException) -> str:
    """The innermost cause of a requests error, in a few words."""
    text = str(e)
    for pat, short in (("Connection refused", "connection refused"), ("Name or service not known", "unknown host"),
                       ("timed out", "timed out"), ("Connection reset", "connection reset"),
                       ("Max retries exceeded", "connection failed")):
        if pat in text:
            return short
    return (text.splitlines() or [type(e).__name__])[0][:120]


__all__ = ["DcgmSource", "DcgmMapper", "FIELDS", "parse_exposition", "read_dcgm_log", "is_blank"]
