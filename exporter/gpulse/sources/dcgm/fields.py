"""The DCGM field map: dcgm-exporter series (name, labels, value) -> gpulse Readings
and devices. The live source (source.py) and recorded dcgm-exporter output
(sources/recorded/dcgm.py) both read through it."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from ...catalog import THROTTLE_REASONS
from ...model import DeviceInfo, Reading, Sample
from ..base import CountOn
from ..cells import MIB, is_gpu_index

@dataclass(frozen=True)
class Field:
    target: str          # "<kind>:<name>": sample, gauge, lgauge, counter, lcounter, rate, fb, limit; or xid, throttle
    scale: float         # DCGM unit -> base unit: value * scale / div
    lo: float            # plausible range, in DCGM's unit; outside = garbage
    hi: float
    label: str = ""      # extra label value (ecc type, direction...)
    div: float = 1.0     # dividing keeps whole percents exact (70 / 100 == 0.7)
    kind: str = field(init=False)     # target's two halves, split once: every value of a log reads them
    name: str = field(init=False)

    def __post_init__(self) -> None:
        kind, _, name = self.target.partition(":")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "name", name)


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
    "DCGM_FI_DEV_PCIE_LINK_GEN": Field("gauge:pcie_link_generation", 1.0, 0.0, 64.0),
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": Field("gauge:pcie_link_max_generation", 1.0, 0.0, 64.0),
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": Field("gauge:pcie_link_width", 1.0, 0.0, 64.0),
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": Field("gauge:pcie_link_max_width", 1.0, 0.0, 64.0),
    # counters as DCGM keeps them
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": Field("counter:energy_joules_total", 1.0, 0.0, 1e18, div=1000.0),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": Field("lcounter:ecc_errors_total", 1.0, 0.0, 1e15, "corrected"),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": Field("lcounter:ecc_errors_total", 1.0, 0.0, 1e15, "uncorrected"),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": Field("counter:pcie_replays_total", 1.0, 0.0, 1e15),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": Field("lcounter:nvlink_errors_total", 1.0, 0.0, 1e15, "crc_flit"),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": Field("lcounter:nvlink_errors_total", 1.0, 0.0, 1e15, "crc_data"),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": Field("lcounter:nvlink_errors_total", 1.0, 0.0, 1e15, "replay"),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": Field("lcounter:nvlink_errors_total", 1.0, 0.0, 1e15,
                                                           "recovery"),
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
    """One scrape, mapped: a Reading (its one sample at the scrape's time) and a DeviceInfo
    per GPU entity."""

    readings: dict[str, Reading]
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
        seen_labels: dict[str, str] | None = None
        ent: tuple[str, str] | None = None
        for name, labels, value, line in series:
            spec = FIELDS.get(name)
            if spec is None:
                continue
            # the fields of one row of a wide CSV share its labels: one lookup for all
            if labels is not seen_labels:
                seen_labels, ent = labels, self.entity(labels)
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
            try:
                number = float(value) if isinstance(value, (int, float)) else math.nan
            except OverflowError:        # an integer no float holds (the parser keeps integers)
                number = math.nan
            if math.isnan(number):
                invalid.append((line, f"{name}{{gpu={key}}} = {value!r:.40}: not a number"))
                continue
            value = number
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
        readings = {key: self._reading(key, t, values.get(key, {}), attribution.get(key)) for key in devices}
        resets = self._count_on.take_resets() if self._count_on else {}
        return Mapped(readings, devices, invalid, blank, sm_seen, nodes, duplicates, resets)

    def _reading(self, key: str, t: float, vals: dict[str, float], attribution: dict[str, str] | None) -> Reading:
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
            kind, target = spec.kind, spec.name
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
        return Reading(key, [Sample(t=t, **sample_kw)], gauges, counters, attribution=attribution,
                       holds_workload=holds)


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
