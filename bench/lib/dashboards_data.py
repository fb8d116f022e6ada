"""Synthetic gpulse scrapes of a whole cluster, as OpenMetrics for `promtool tsdb
create-blocks-from openmetrics`.

A simple deterministic model of what gpulse exports for a cluster of 8-GPU
nodes, scraped every 15 s: every per-GPU family of an H100 node (counters
integrated over each scrape interval, gauges), the peer-group series and the
exporter's own health series, with the `job`/`instance` labels a scrape adds.
Nodes are split between training jobs with the failures the dashboards are
for, so the recording rules and panels compute on realistic shapes:

    ckpt   every 10 minutes all GPUs stall for 45 s (sync stalls, stripes)
    strag  one GPU per job is slower; its peers spin-wait (busy but not active);
           and on the job's first node another GPU's rank leaves the GPU for 30 s
           every 2 minutes (checkpoint writes) while its peers keep spinning: a
           recurring cold straggler
    imbal  half of each node's GPUs do a third of the work
    idle   nodes with no workload (no attribution labels)

Only the size and shape matter to the benchmark; no value here is a
measurement.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

STEP_S = 15
GPUS_PER_NODE = 8
THROTTLE_REASONS = ("gpu_idle", "applications_clocks", "sw_power_cap", "hw_slowdown", "sync_boost",
                    "sw_thermal", "hw_thermal", "hw_power_brake", "display_clocks")
SAMPLE_BUCKETS = ("0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "+Inf")
GIB = 2 ** 30

# (family without _total, type, per-GPU?) in exposition order. Per-GPU
# families are written once per GPU; `node` families once per node.
GPU_COUNTERS = ("busy_seconds", "active_seconds", "spin_wait_seconds", "idle_seconds", "sampled_seconds",
                "energy_joules")
GPU_GAUGES = ("utilization_ratio", "active_ratio", "memory_used_bytes", "memory_total_bytes", "power_watts",
              "power_limit_watts", "temperature_celsius", "memory_temperature_celsius", "sm_clock_hertz",
              "memory_clock_hertz", "last_sample_timestamp_seconds", "up")


@dataclass(frozen=True)
class Job:
    name: str
    kind: str          # ckpt | strag | imbal | idle
    level: float


# The recurring cold straggler of each straggler job: off the GPU for the first
# OFF_GPU_S of every OFF_GPU_PERIOD_S (its peers' spin-wait bounds what that costs them).
OFF_GPU_S, OFF_GPU_PERIOD_S = 30, 120

# Share of the nodes each job takes, in node order.
JOB_MIX = ((Job("llm-pretrain", "ckpt", 0.93), 0.375), (Job("moe-finetune", "strag", 0.80), 0.375),
           (Job("vision-sweep", "imbal", 0.95), 0.1875), (Job("", "idle", 0.0), 0.0625))


def node_jobs(nodes: int) -> list[Job]:
    out: list[Job] = []
    for job, share in JOB_MIX:
        out += [job] * max(1, round(share * nodes))
    return (out + [JOB_MIX[-1][0]] * nodes)[:nodes]


class GpuState:
    """Counters carried from one time window to the next."""

    def __init__(self):
        self.c = {name: 0.0 for name in GPU_COUNTERS}
        self.throttle = {r: 0.0 for r in THROTTLE_REASONS}
        self.ecc = 0.0
        self.pcie = [0.0, 0.0]
        self.nvlink = [0.0, 0.0]


class GroupState:
    """A node's peer-group counters and its exporter's sample-loop histogram."""

    def __init__(self):
        self.stall_s = self.stalls = self.sampled = 0.0
        self.in_stall = False
        self.samples = 0.0   # sample-loop histogram count
        self.hist = [0.0] * len(SAMPLE_BUCKETS)
        self.hist_sum = 0.0


class Cluster:
    """`nodes` 8-GPU nodes split between the jobs of JOB_MIX."""

    def __init__(self, nodes: int, seed: int = 1, patterns: int | None = None):
        self.nodes = nodes
        self.jobs = node_jobs(nodes)
        self.pattern = tile(self.jobs, patterns)
        self.names = [f"gpu-node-{i:03d}" for i in range(nodes)]
        self.gpu_state = [[GpuState() for _ in range(GPUS_PER_NODE)] for _ in range(nodes)]
        self.group_state = [GroupState() for _ in range(nodes)]
        self.seed = seed
        # the slow GPU of each straggler job: its first node, GPU 3; its rank that
        # recurrently leaves the GPU: the same node, GPU 5
        self.straggler, self.off_gpu = {}, {}
        for n, job in enumerate(self.jobs):
            if job.kind == "strag" and job.name not in self.straggler:
                self.straggler[job.name], self.off_gpu[job.name] = (n, 3), (n, 5)

    @property
    def gpus(self) -> int:
        return self.nodes * GPUS_PER_NODE

    def _labels(self, n: int, gpu: int | None) -> str:
        node = self.names[n]
        job = self.jobs[n]
        parts = [] if gpu is None else [f'gpu="{gpu}"']
        parts += [f'instance="{node}:9479"', 'job="gpulse"', f'node="{node}"']
        if job.name:
            if gpu is not None:
                parts += ['namespace="ml"', f'pod="{job.name}-{n:03d}"', 'container="trainer"']
            parts.append(f'workload="{job.name}"')
        return ",".join(parts)

    def gpu_util(self, n: int, g: int, t: int, rng: random.Random) -> tuple[float, float]:
        """(busy, active) fractions of one GPU over the scrape interval ending at t."""
        job = self.jobs[n]
        noise = (rng.random() - 0.5) * 0.04
        if job.kind == "idle":
            return 0.0, 0.0
        if job.kind == "ckpt":
            # seconds of (t - 15, t] inside the stall [0, 45) of each 10-minute period
            phase = t % 600
            stalled = max(0, min(phase, 45) - max(phase - STEP_S, 0))
            work = (1 - stalled / STEP_S) * (job.level + noise)
            return work, work
        if job.kind == "strag":
            if (n, g) == self.straggler[job.name]:
                return 0.99, 0.99
            # waiting for the slow rank: busy (spinning) but doing less real work
            busy, active = min(1.0, 0.97 + noise / 4), job.level * 0.85 + noise
            if (n, g) == self.off_gpu[job.name]:
                # seconds of (t - 15, t] inside [0, OFF_GPU_S) of each period: off the GPU
                phase = t % OFF_GPU_PERIOD_S
                on = 1 - max(0, min(phase, OFF_GPU_S) - max(phase - STEP_S, 0)) / STEP_S
                return on * busy, on * active
            return busy, active
        level = job.level if g < GPUS_PER_NODE // 2 else job.level / 3   # imbal
        return level + noise, level + noise

    def series(self, t0: int, t1: int) -> Iterator[tuple[str, str, list[float], tuple[int, int]]]:
        """(name, labels, values, key) of every series over the scrapes t0, t0+15, ... < t1
        (unix seconds), node by node. Nodes sharing a pattern (see tile) share the values
        list and its key, so a writer formats each pattern's values once."""
        times = list(range(t0, t1, STEP_S))
        shared = set(self.pattern)
        cache: dict[int, list[tuple[str, str, list[float]]]] = {}
        for n in range(self.nodes):
            p = self.pattern[n]
            if p == n:
                out: list[tuple[str, str, list[float]]] = []
                self._node(n, times, lambda name, labels, values: out.append((name, labels, values)))
                if n in shared:
                    cache[n] = out
                for i, (name, labels, values) in enumerate(out):
                    yield name, labels, values, (n, i)
            else:
                rename = self._renamer(p, n)
                for i, (name, labels, values) in enumerate(cache[p]):
                    yield name, rename(labels), values, (p, i)

    def pattern_values(self, t0: int, t1: int) -> dict[tuple[int, int], list[float]]:
        """The values series(t0, t1) would yield, by key, computed for the pattern nodes
        alone: a live fleet names its series once (series() on the first window) and
        then needs only the patterns' next values, whatever its size."""
        times = list(range(t0, t1, STEP_S))
        out: dict[tuple[int, int], list[float]] = {}
        for n in sorted(set(self.pattern)):
            values: list[list[float]] = []
            self._node(n, times, lambda _name, _labels, v: values.append(v))
            out.update(((n, i), v) for i, v in enumerate(values))
        return out

    def _renamer(self, p: int, n: int):
        """Node p's label strings rewritten as node n's (the name, pod and UUID carry the
        node's identity; _labels and _node build them)."""
        pairs = ((f'"{self.names[p]}', f'"{self.names[n]}'), (f'-{p:03d}"', f'-{n:03d}"'),
                 (f'GPU-{p:08x}-', f'GPU-{n:08x}-'))

        def rename(labels: str) -> str:
            for a, b in pairs:
                labels = labels.replace(a, b)
            return labels
        return rename

    def write_window(self, out: Path, t0: int, t1: int) -> tuple[int, int]:
        """Scrapes at t0, t0+15, ... < t1 (unix seconds) as one OpenMetrics file.
        Returns (series, samples) written."""
        fam: dict[str, list[str]] = {}
        count = [0, 0]   # series, samples
        stamps = [f" {t}\n" for t in range(t0, t1, STEP_S)]
        formatted: dict[tuple[int, int], list[str]] = {}
        for name, labels, values, key in self.series(t0, t1):
            tails = formatted.get(key)
            if tails is None:
                tails = formatted[key] = [format(v, ".6g") + ts for v, ts in zip(values, stamps)]
            prefix = f"{name}{{{labels}}} "
            fam.setdefault(name, []).append("".join([prefix + tail for tail in tails]))
            count[0] += 1
            count[1] += len(values)
        write_families(out, fam)
        return count[0], count[1]

    def write_json_window(self, t0: int, t1: int) -> Iterator[bytes]:
        """The same series as write_window, as VictoriaMetrics' JSON-line import
        (/api/v1/import: one line per series with its values and millisecond
        timestamps), in chunks of about 1 MB."""
        stamps = '],"timestamps":[' + ",".join(str(t * 1000) for t in range(t0, t1, STEP_S)) + "]}\n"
        tails: dict[tuple[int, int], str] = {}
        buf: list[str] = []
        size = 0
        for name, labels, values, key in self.series(t0, t1):
            tail = tails.get(key)
            if tail is None:
                tail = tails[key] = '},"values":[' + ",".join([format(v, ".6g") for v in values]) + stamps
            line = '{"metric":{"__name__":"' + name + '",' + _json_labels(labels) + tail
            buf.append(line)
            size += len(line)
            if size > 1 << 20:
                yield "".join(buf).encode()
                buf, size = [], 0
        yield "".join(buf).encode()

    def _node(self, n: int, times: list[int], emit) -> None:
        rng = random.Random(self.seed * 1_000_003 + n * 7919 + times[0])
        busy_by_gpu: list[list[float]] = []
        active_by_gpu: list[list[float]] = []
        for g in range(GPUS_PER_NODE):
            st = self.gpu_state[n][g]
            labels = self._labels(n, g)
            series: dict[str, list[float]] = {}
            busy_l, active_l = [], []
            for t in times:
                b, a = (max(0.0, min(1.0, x)) for x in self.gpu_util(n, g, t, rng))
                busy_l.append(b)
                active_l.append(a)
                power = 70 + a * 560 + max(0.0, b - a) * 80
                st.c["busy_seconds"] += b * STEP_S
                st.c["active_seconds"] += a * STEP_S
                st.c["spin_wait_seconds"] += max(0.0, b - a) * STEP_S
                st.c["idle_seconds"] += STEP_S if b < 0.05 else 0.0
                st.c["sampled_seconds"] += STEP_S
                st.c["energy_joules"] += power * STEP_S
                st.throttle["gpu_idle"] += STEP_S if b < 0.05 else 0.0
                st.throttle["sw_power_cap"] += STEP_S * 0.2 if power > 600 else 0.0
                st.ecc += 1.0 if rng.random() < 0.001 else 0.0
                st.pcie[0] += 2e9 * b * STEP_S
                st.pcie[1] += 5e8 * b * STEP_S
                st.nvlink[0] += 150e9 * a * STEP_S
                st.nvlink[1] += 150e9 * a * STEP_S
                temp = 30 + power / 700 * 50
                for k, v in st.c.items():
                    series.setdefault(f"gpulse_gpu_{k}_total", []).append(v)
                for k, v in (("utilization_ratio", b), ("active_ratio", a),
                             ("memory_used_bytes", 62 * GIB if b else 0.5 * GIB), ("memory_total_bytes", 80 * GIB),
                             ("power_watts", power), ("power_limit_watts", 700), ("temperature_celsius", temp),
                             ("memory_temperature_celsius", temp + 4),
                             ("sm_clock_hertz", 1.98e9 if b >= 0.05 else 3.45e8), ("memory_clock_hertz", 2.619e9),
                             ("last_sample_timestamp_seconds", t - 0.05), ("up", 1)):
                    series.setdefault(f"gpulse_gpu_{k}", []).append(v)
                for r in THROTTLE_REASONS:
                    series.setdefault("throttle|" + r, []).append(st.throttle[r])
                series.setdefault("ecc|corrected", []).append(st.ecc)
                series.setdefault("ecc|uncorrected", []).append(0.0)
                for i, d in enumerate(("tx", "rx")):
                    series.setdefault("pcie|" + d, []).append(st.pcie[i])
                    series.setdefault("nvlink|" + d, []).append(st.nvlink[i])
            busy_by_gpu.append(busy_l)
            active_by_gpu.append(active_l)
            for key, values in series.items():
                if "|" not in key:
                    emit(key, labels, values)
                    continue
                fam_key, sub = key.split("|")
                name, label = {"throttle": ("gpulse_gpu_throttle_seconds_total", "reason"),
                               "ecc": ("gpulse_gpu_ecc_errors_total", "type"),
                               "pcie": ("gpulse_gpu_pcie_bytes_total", "direction"),
                               "nvlink": ("gpulse_gpu_nvlink_bytes_total", "direction")}[fam_key]
                emit(name, f'{label}="{sub}",{labels}', values)
            emit("gpulse_gpu_info", f'{labels},model="NVIDIA H100 80GB HBM3",'
                 f'uuid="GPU-{n:08x}-0000-0000-0000-{g:012x}"', [1] * len(times))
            emit("gpulse_gpu_peer_deviation", f'signal="active",{labels}', [(a - 0.8) / 0.05 for a in active_l])
            emit("gpulse_gpu_peer_deviation", f'signal="busy",{labels}', [(b - 0.9) / 0.05 for b in busy_l])
        self._group(n, times, busy_by_gpu, active_by_gpu, emit, rng)

    def _group(self, n, times, busy_by_gpu, active_by_gpu, emit, rng) -> None:
        gs = self.group_state[n]
        labels = self._labels(n, None)
        holds = bool(self.jobs[n].name)
        out: dict[str, list[float]] = {}
        for i, t in enumerate(times):
            acts = [a[i] for a in active_by_gpu]
            hi = max(acts)
            stalled = holds and hi < 0.05
            if holds:
                gs.sampled += STEP_S
                gs.stall_s += STEP_S if stalled else 0.0
                gs.stalls += 1 if stalled and not gs.in_stall else 0
            gs.in_stall = stalled
            dur = 0.0008 + rng.random() * 0.0004
            gs.samples += 150
            gs.hist_sum += dur * 150
            for j, le in enumerate(SAMPLE_BUCKETS):
                gs.hist[j] += 150 if le == "+Inf" or dur <= float(le) else 0
            for k, v in (("gpulse_group_sync_stall_seconds_total", gs.stall_s),
                         ("gpulse_group_sync_stalls_total", gs.stalls),
                         ("gpulse_group_sampled_seconds_total", gs.sampled),
                         ("gpulse_group_imbalance_ratio", (hi - min(acts)) / hi if hi > 0 else 0.0),
                         ("gpulse_group_load_balance_ratio", sum(acts) / len(acts) / hi if hi > 0 else 0.0),
                         ("gpulse_group_gpus", GPUS_PER_NODE), ("gpulse_group_active", 1 if holds else 0),
                         ("gpulse_exporter_last_sample_timestamp_seconds", t - 0.05),
                         ("gpulse_exporter_stale", 0), ("up", 1),
                         ("scrape_duration_seconds", 0.004 + rng.random() * 0.002),
                         ("scrape_samples_scraped", 50 * GPUS_PER_NODE + 40),
                         ("gpulse_exporter_sample_duration_seconds_count", gs.samples),
                         ("gpulse_exporter_sample_duration_seconds_sum", gs.hist_sum)):
                out.setdefault(k, []).append(v)
            if self.jobs[n].kind == "ckpt":
                out.setdefault("gpulse_group_stall_period_seconds", []).append(600)
            for j, le in enumerate(SAMPLE_BUCKETS):
                out.setdefault("bucket|" + le, []).append(gs.hist[j])
        node_only = labels.split(",workload=")[0]
        for k, values in out.items():
            if k.startswith("bucket|"):
                emit("gpulse_exporter_sample_duration_seconds_bucket", f'le="{k[7:]}",{node_only}', values)
            elif k.startswith(("gpulse_group_",)):
                emit(k, labels, values)
            else:
                emit(k, node_only, values)
        emit("gpulse_build_info", 'instance="%s:9479",job="gpulse",source="nvml",version="0.1.0"' % self.names[n],
             [1] * len(times))


def tile(jobs: list[Job], patterns: int | None) -> list[int]:
    """For each node, the node whose values it repeats (itself when patterns is None):
    within each job the first node is its own (the straggler job's slow GPUs are there)
    and the others cycle through `patterns` - 1 of the job's next nodes. A fleet of
    thousands of nodes is then computed as a bounded set of node patterns; every node
    keeps its own labels, so every series is still its own series to the database."""
    out = list(range(len(jobs)))
    if patterns is None:
        return out
    first: dict[str, int] = {}
    for n, job in enumerate(jobs):
        f = first.setdefault(job.name, n)
        i = n - f
        if i >= patterns:
            out[n] = f + 1 + (i - 1) % (patterns - 1)
    return out


def _json_labels(labels: str) -> str:
    """'a="x",b="y"' as the JSON object members '"a":"x","b":"y"' (the model's label
    values hold no quotes, commas or equals signs)."""
    return '"' + labels.replace('="', '":"').replace('",', '","')


_TYPES = {"gpulse_exporter_sample_duration_seconds": "histogram"}


def _family_of(sample_name: str) -> tuple[str, str]:
    """(family, type) of a sample name, the way OpenMetrics groups them."""
    for suffix in ("_bucket", "_count", "_sum"):
        base = sample_name.removesuffix(suffix)
        if base in _TYPES:
            return base, _TYPES[base]
    if sample_name.endswith("_total"):
        return sample_name.removesuffix("_total"), "counter"
    return sample_name, "gauge"


def write_families(out: Path, fam: dict[str, list[str]]) -> None:
    """Families in order, each one contiguous (histograms: all three kinds of
    sample together), then # EOF."""
    by_family: dict[str, list[str]] = {}
    for name in fam:
        by_family.setdefault(_family_of(name)[0], []).append(name)
    with open(out, "w", encoding="ascii") as fh:
        for family, names in by_family.items():
            fh.write(f"# TYPE {family} {_family_of(names[0])[1]}\n")
            for name in names:
                fh.writelines(fam[name])
        fh.write("# EOF\n")


