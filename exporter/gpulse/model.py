"""The vocabulary every source speaks and every consumer reads.

A source turns whatever it talks to (NVML, a dcgm-exporter endpoint, a recorded
log, the simulator) into `Reading`s. Nothing downstream knows which source it was.

Times are seconds on the source's own timeline (`Sample.t`): monotonic seconds for
live sources, the recorded timestamps for replay. Only differences matter to the
analysis, so the two never need to agree with the wall clock.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple

# Attribution label names, in the order they appear on per-GPU series.
ATTRIBUTION_LABELS = ("namespace", "pod", "container", "workload")

# NVML's utilisation sample period on recent GPUs (seconds; 1/6 s to 1 s by product,
# nvmlDeviceGetUtilizationRates): a utilisation value is the busy share of this much
# time before it. A property of the driver, so it lives with the vocabulary every
# layer shares: the NVML source expects it until it measures the spacing, the
# analysis gives it back to co-idle stretches (util_window_seconds), and the
# evaluation corpus writes logs through it.
UTIL_PERIOD = 1 / 6


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """Identity of one GPU entity (a whole GPU or one MIG instance). Never changes
    while the entity exists; exported only on gpulse_gpu_info."""

    gpu: str                 # the `gpu` label: "0", or "0/1" for MIG instance 1 of GPU 0
    uuid: str = ""
    model: str = ""
    pci_bus_id: str = ""
    driver: str = ""
    cuda_version: str = ""
    mig_profile: str = ""    # e.g. "3g.40gb"; empty for a whole GPU
    gpu_instance: str = ""   # MIG GPU instance id; empty for a whole GPU
    parent_uuid: str = ""    # the physical GPU of a MIG instance


class Sample(NamedTuple):
    """One instant of one GPU, fine-grained enough to integrate.

    `util` is NVML-style utilisation (a kernel was running), 0..1.
    `sm_active` / `gr_active` are real-work measures where the source has them
    (DCGM_FI_PROF_SM_ACTIVE / DCGM_FI_PROF_GR_ENGINE_ACTIVE, or NVML GPM), 0..1.
    `power_w` and `memory_used_bytes` let the analysis tell spin-waiting from work
    and a held job from no job. Unknown values are None.

    A named tuple, immutable: one is made per row of a log and per reading of a
    GPU, and a tuple is made in under half the time of a frozen dataclass, whose
    __init__ sets each field through object.__setattr__ (0.28 against 0.74 us).
    """

    t: float
    util: float | None = None
    power_w: float | None = None
    memory_used_bytes: float | None = None
    sm_active: float | None = None
    gr_active: float | None = None

    def moved(self, dt: float) -> "Sample":
        """The same sample dt seconds later (a node's clock offset, a clock step),
        as _replace(t=...) makes it at a fraction of its cost (a job's logs move every
        row of a node)."""
        return Sample(self.t + dt, *self[1:])


# A labelled counter value: label values (in the catalog's label order) -> value.
LabelledValues = Mapping[tuple[str, ...], float]


@dataclass(slots=True)
class Reading:
    """What one poll learned about one GPU.

    samples:  new fine-grained samples since the previous poll, ordered by t
              (several per poll when the driver buffers them, e.g. nvmlDeviceGetSamples).
    gauges:   latest values, keyed by catalog name (see gpulse.catalog.GAUGES).
    counters: cumulative values as the device reports them, keyed by catalog name
              (see gpulse.catalog.COUNTERS); a float, or {label values: float} for
              families with extra labels (throttle reason, XID code, ...).
    up:       False when the GPU could not be read this poll (lost, hung, error);
              `error` then says why in one line.
    attribution: namespace/pod/container/workload when the source knows them
              (dcgm-exporter's pod labels); the kube/ and Slurm mappers may override.
    holds_workload: True/False when the source knows whether a process is attached;
              None to decide from memory use.
    instants: for a poll that hands over many recorded instants at once (a replay's
              chunk of a log), each instant's (t, gauges, counters), oldest first, so
              that gauges count at their recorded rate and a chunk split at an
              analysis tick charges each side its own values; `gauges` and
              `counters` are then the last instant's. None for a live poll, whose
              gauges are one reading at the poll.
    """

    gpu: str
    samples: list[Sample] = field(default_factory=list)
    gauges: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float | dict[tuple[str, ...], float]] = field(default_factory=dict)
    up: bool = True
    error: str | None = None
    attribution: dict[str, str] | None = None
    holds_workload: bool | None = None
    instants: list[tuple[float, dict[str, Any], dict[str, Any]]] | None = None


@dataclass(slots=True)
class PollResult:
    """Everything one poll of a source returned.

    devices:     the full current device list when it changed (discovery, a MIG
                 reconfiguration), else None.
    readings:    one Reading per GPU the source tried to read.
    call_errors: errors by source call name since the previous poll, e.g.
                 {"nvmlDeviceGetPowerUsage": 1}; exported as gpulse_source_errors_total.
    events:      what the source corrected or dropped since the previous poll, keyed by
                 (family, label value) of gpulse.sources.base.EVENTS, e.g.
                 {("dropped_series", "duplicate"): 1}; exported as gpulse_source_<family>.
    """

    readings: list[Reading]
    devices: list[DeviceInfo] | None = None
    call_errors: dict[str, int] = field(default_factory=dict)
    events: dict[tuple[str, str], int] = field(default_factory=dict)


_DIGITS = re.compile(r"(\d+)")
# Python refuses int() of more digits than sys.get_int_max_str_digits() (4,300): a
# name's longer digit run sorts after every shorter number (ties kept in their order)
_LONGEST_NUMBER = 4000


def _part(p: str) -> tuple:
    if p.isdecimal():
        return (0, int(p) if len(p) <= _LONGEST_NUMBER else math.inf, "")
    return (1, 0, p)


def natural_key(name: str) -> tuple:
    """The one natural order of names: 'node-2' before 'node-10'."""
    return tuple(_part(p) for p in _DIGITS.split(name) if p)


def gpu_sort_key(gpu: str) -> tuple:
    """The one order of GPU names: '2' < '10'; MIG '0/1' right after GPU 0; host-prefixed
    names ('node-1:0') after plain ones, hosts in natural order ('n2:0' before 'n10:0')."""
    host, _, rest = gpu.rpartition(":")
    return (natural_key(host),) + tuple(_part(p) for p in rest.split("/"))
