#!/usr/bin/env python3
"""A fleet in Prometheus and VictoriaMetrics side by side, against dcgm-exporter's cost.

    .venv/bin/python bench/fleet.py                     # 64 GPUs × 4 h; a minute or two here
    nice -n 10 .venv/bin/python bench/fleet.py --gpus 16384 --compare-gpus 1024 --keep /work/fleet-data
    .venv/bin/python bench/fleet.py --reuse /work/fleet-data     # the queries again, on a kept backfill
    nice -n 10 .venv/bin/python bench/fleet.py --reuse /work/fleet-data --stores vm-gpulse-16384 \
        --replay-rules --only '^GPU cluster heatmap / Nodes '      # today's rules, one panel, one store
    nice -n 10 .venv/bin/python bench/fleet.py --reuse /work/fleet-data --prom-gpus 16384 \
        --stores gpulse-16384 --repeat 1 --only '...'     # Prometheus at fleet size beside VictoriaMetrics
    nice -n 10 .venv/bin/python bench/fleet.py --gpus 8 --compare-gpus 0 --prom-gpus 1024 --hours 1 \
        --eval-rules prometheus/rules-prometheus --eval-rules OLD_RULES --only '...'   # rule cost at 1,024 GPUs

For N GPUs (8 a node) × --hours at a 15 s scrape:

- gpulse: every series a gpulse exporter serves for the node (the cluster model of
  bench/lib/dashboards_data.py: every per-GPU family, peer groups, exporter health,
  job/instance labels), tiled: each job's nodes repeat a bounded set of node patterns
  (dashboards_data.tile) under their own labels, so every series is still its own
  series to the database while Python computes only the patterns;
- dcgm-exporter's default field set: the 23 families and the label set of the real
  capture ../shared/data/captures/dcgm-exporter/l4-gpu-operator.prom, per GPU,
  utilisation, activity and power following the same cluster model, the rest moving
  as an idle GPU's do (the baseline cost a user pays without gpulse).

At --compare-gpus (default: --gpus) both are loaded into the Debian `prometheus`
(`promtool tsdb create-blocks-from openmetrics`) and into `victoria-metrics`; at
--gpus, when larger, gpulse alone into victoria-metrics. gpulse reaches
victoria-metrics through its JSON-line import (/api/v1/import: one line per series
and hour, values and timestamps as arrays; a pattern's values are formatted once),
dcgm-exporter through /api/v1/import/prometheus. For gpulse the shipped recording
rules are then evaluated over the whole range: by `promtool tsdb create-blocks-from
rules` for Prometheus and by `vmalert -replay` with prometheus/rules-vmalert for
VictoriaMetrics, and every panel target of every dashboard (read at run time) is sent
the way Grafana sends it for a 1,920 px panel over the range (bench/dashboards_scale.py's
requests), plus the drill-down from the nodes overview: one node's GPU heatmap.
Printed: disk per GPU-hour, resident memory of each server after the queries, CPU
seconds per rule-evaluation cycle (ruler and database together, over the range's
cycles), each panel's median time and response size, and the ratios gpulse /
dcgm-exporter and VictoriaMetrics / Prometheus. Every figure names the size and engine
it was measured at; a size not run is an extrapolation, and the script says so.

--prom-gpus N puts gpulse at N GPUs into Prometheus too (store prom-gpulse-N; with
--reuse, beside the kept stores, each phase not yet there): node shard × hour
OpenMetrics files (SHARD_NODES nodes, ~1.9 GB each; two promtool runs loading while
Python writes the next; each file deleted once loaded), then Prometheus started until
its vertical compaction has merged each hour's overlapping shard blocks into one. The
recording rules: the records the panels with a target read (those --only finds) over
the whole range, every other record over the last EVAL_WINDOW_S (input for the rules
read from them); then every rule group, recording and alerting, evaluated as instant
queries at EVAL_AT, Prometheus' CPU per evaluation being what a live ruler pays per
cycle (beside vmalert -replay's figure for VictoriaMetrics), and each rule's share of
it. The groups of each --eval-rules folder (default prometheus/rules-prometheus, the
variant for Prometheus; an older copy of the rules for a before/after) are timed the
same way on the same store, and again on a kept store with --reuse --eval-rules DIR.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))          # bench.lib, testing/

from bench.lib.proc import cpu_seconds, free_port, rss_bytes, wait_ready  # noqa: E402
from bench.lib.dashboards_data import GPUS_PER_NODE, STEP_S, Cluster  # noqa: E402
from bench.lib.dashboards_data import write_families  # noqa: E402
from bench.dashboards_scale import (BLOCK_S, VARIABLES, WINDOW_S, Prometheus, backfill_rules, du,  # noqa: E402
                              load_windows, need, requests_for, rule_levels, rules_start, run, sizes_and_hours,
                              timed, wait_loaded)

DCGM_CAPTURE = ROOT.parent / "shared" / "data" / "captures" / "dcgm-exporter" / "l4-gpu-operator.prom"
MB = 1e6
FLEET = 16384
# distinct node patterns per job (dashboards_data.tile): a fleet costs Python what 4 × 16
# nodes cost, whatever its size
PATTERNS = 16
DRILL_NODE = "gpu-node-000"
# the panels with a response-time target at fleet size (seconds)
TARGETS = (("nodes overview", "GPU cluster heatmap / Nodes [A]", 2.0),
           ("workloads overview", "GPU cluster heatmap / Workloads [A]", 2.0),
           ("drill-down: the node's GPU heatmap", f"{DRILL_NODE}: GPU cluster heatmap / GPU heatmap [A]", 0.5),
           ("drill-down: node detail", "GPU node detail /", 0.5))


class Victoria:
    """victoria-metrics on its own data directory, fed with OpenMetrics files."""

    def __init__(self, data: Path, log: Path):
        self.data, self.log, self.proc = data, log, None

    def start(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        # latencyOffset 0: the whole backfilled range is final; queries must not hide its
        # end. No response cache: the panels share subqueries and would be timed as cache
        # hits, where Prometheus computes every one
        self.proc = subprocess.Popen([need("victoria-metrics"), f"-storageDataPath={self.data}",
                                      f"-httpListenAddr=127.0.0.1:{port}", "-retentionPeriod=1",
                                      "-search.latencyOffset=0s", "-search.disableCache", "-loggerLevel=ERROR",
                                      # a fleet's count() and replayed rules touch every series
                                      "-search.maxUniqueTimeseries=10000000", "-search.maxSeries=10000000",
                                      # the 16,384-row heatmaps outlast the 30 s default on 2 busy cores
                                      "-search.maxQueryDuration=600s",
                                      # --replay-rules writes a kept store's records again at the same
                                      # timestamps: one sample each, as a live ruler leaves (the data
                                      # is on a 15 s grid, so nothing else is merged)
                                      "-dedup.minScrapeInterval=1ms"],
                                     stdout=subprocess.DEVNULL, stderr=open(self.log, "a"))
        wait_ready(self.proc, self.url + "/health", 60, "fleet: victoria-metrics did not become ready "
                   f"(log: {self.log})")

    def load(self, om: Path) -> None:
        """The OpenMetrics file as Prometheus text with millisecond timestamps."""
        def body():
            buf = []
            with open(om, encoding="utf-8") as fh:
                for line in fh:
                    if line.startswith("#"):
                        continue
                    head, _, ts = line.rpartition(" ")
                    buf.append(f"{head} {int(float(ts) * 1000)}\n")
                    if len(buf) >= 20000:
                        yield "".join(buf).encode()
                        buf = []
            yield "".join(buf).encode()
        r = requests.post(self.url + "/api/v1/import/prometheus", data=body(), timeout=600)
        if r.status_code >= 300:
            raise SystemExit(f"fleet: victoria-metrics refused the import: {r.text[:300]}")

    def load_json(self, chunks) -> int:
        """JSON-line import (/api/v1/import) of an iterable of byte chunks; the lines sent."""
        lines = [0]

        def counted():
            for c in chunks:
                lines[0] += c.count(b"\n")
                yield c
        r = requests.post(self.url + "/api/v1/import", data=counted(), timeout=3600)
        if r.status_code >= 300:
            raise SystemExit(f"fleet: victoria-metrics refused the import: {r.text[:300]}")
        return lines[0]

    def flush(self) -> None:
        requests.get(self.url + "/internal/force_flush", timeout=120)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)


class Dcgm:
    """dcgm-exporter's default field set for the same nodes, from the real capture."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.families: list[tuple[str, str, float]] = []     # (name, type, captured value)
        kinds = {}
        for line in DCGM_CAPTURE.read_text().splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split()
                kinds[name] = kind
            elif line.startswith("DCGM_"):
                name = line.split("{", 1)[0]
                self.families.append((name, kinds.get(name, "gauge"), float(line.rsplit(" ", 1)[1])))

    def _labels(self, n: int, g: int) -> str:
        host = self.cluster.names[n]
        uuid = f"GPU-{n:08x}-{g:04x}-0000-0000-000000000000"
        return (f'gpu="{g}",UUID="{uuid}",pci_bus_id="00000000:{0x18 + 0x10 * g:02X}:00.0",device="nvidia{g}",'
                f'modelName="NVIDIA H100 80GB HBM3",Hostname="{host}",DCGM_FI_DRIVER_VERSION="580.105.08",'
                f'instance="{host}:9400",job="dcgm-exporter"')

    def write_window(self, out: Path, t0: int, t1: int) -> int:
        times = list(range(t0, t1, STEP_S))
        lines: dict[str, list[str]] = {name: [] for name, _, _ in self.families}
        samples = 0
        for n in range(self.cluster.nodes):
            rng = random.Random(n * 7919 + t0)
            for g in range(GPUS_PER_NODE):
                labels = self._labels(n, g)
                util = [self.cluster.gpu_util(n, g, t, rng) for t in times]
                for name, kind, captured in self.families:
                    vals = [self._value(name, captured, busy, active, t, n, g) for t, (busy, active) in zip(times, util)]
                    lines[name].append("".join(f"{name}{{{labels}}} {v:.6g} {t}\n" for v, t in zip(vals, times)))
                    samples += len(vals)
        with open(out, "w", encoding="ascii") as fh:
            for name, kind, _ in self.families:
                # dcgm-exporter declares its counters without _total: gauges to OpenMetrics
                fh.write(f"# TYPE {name} gauge\n")
                fh.writelines(lines[name])
            fh.write("# EOF\n")
        return samples

    @staticmethod
    def _value(name: str, captured: float, busy: float, active: float, t: int, n: int, g: int) -> float:
        """What the field reads for a GPU that is `busy`/`active` over the scrape."""
        if name == "DCGM_FI_DEV_GPU_UTIL":
            return round(100 * busy)
        if name in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE"):
            return round(active * (0.6 if "TENSOR" in name else 0.4 if "DRAM" in name else 1.0), 6)
        if name == "DCGM_FI_DEV_POWER_USAGE":
            return round(70 + 130 * busy + 400 * active, 3)
        if name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":        # mJ since boot, a counter
            return float(int(1e9 * (1 + n % 5) + 350_000 * (t % 10**7)))
        if name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP"):
            return round(30 + 40 * active)
        if name == "DCGM_FI_DEV_SM_CLOCK":
            return 1980 if active > 0.05 else 345
        if name == "DCGM_FI_DEV_MEM_COPY_UTIL":
            return round(30 * active)
        if name in ("DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_PROF_PCIE_TX_BYTES"):
            return round(2e8 * active + 1e5 * ((t // STEP_S + g) % 7))
        if name == "DCGM_FI_DEV_FB_USED":
            return 61000 + g if busy > 0 else 0
        if name == "DCGM_FI_DEV_FB_FREE":
            return 81559 - (61000 + g if busy > 0 else 0)
        return captured


def vmalert_rules(work: Path) -> Path:
    """prometheus/rules-vmalert with the recording rules only (what promtool backfills)."""
    groups = []
    for f in sorted((ROOT / "prometheus" / "rules-vmalert").glob("*.yml")):
        for g in yaml.safe_load(f.read_text())["groups"]:
            rules = [r for r in g["rules"] if "record" in r]
            if rules:
                groups.append({**g, "rules": rules})
    out = work / "vmalert-recording.yml"
    out.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return out


def iso(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def replay_rules(vm: Victoria, start: int, end: int, work: Path) -> float:
    """CPU seconds of vmalert and victoria-metrics for a replay of the recording rules."""
    c0 = cpu_seconds(vm.proc.pid)
    with open(work / "vmalert.log", "w") as log:
        p = subprocess.Popen([need("vmalert"), f"-rule={vmalert_rules(work)}", f"-datasource.url={vm.url}",
                              f"-remoteWrite.url={vm.url}", f"-replay.timeFrom={iso(start)}",
                              f"-replay.timeTo={iso(end)}", "-replay.disableProgressBar",
                              f"-evaluationInterval={STEP_S}s", "-loggerLevel=ERROR",
                              # each group at its own interval: the default (5m) would record one
                              # sample every 5 minutes whatever the group's interval
                              "-datasource.queryStep=0"],
                             stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"fleet: vmalert -replay failed: {(work / 'vmalert.log').read_text()[-500:]}")
    vm.flush()
    return usage.ru_utime + usage.ru_stime + cpu_seconds(vm.proc.pid) - c0


def target_of(where: str) -> tuple[str, str, float] | None:
    return next((t for t in TARGETS if where.startswith(t[1])), None)


def panel_requests(start: int, end: int) -> list[tuple[str, tuple]]:
    """(where, (expr, instant, step, span)) of every panel target of every dashboard
    over [start, end], and of the drill-down from an overview row: one node's GPU heatmap."""
    range_ms = (end - start) * 1000
    reqs = [(where, r) for uid in VARIABLES for where, *r in requests_for(uid, range_ms)]
    return reqs + [(f"{DRILL_NODE}: {where}", r) for where, *r in
                   requests_for("gpulse-cluster-heatmap", range_ms, {"node": DRILL_NODE}) if "GPU heatmap" in where]


def queries(server, start: int, end: int, repeat: int, only: re.Pattern | None = None) -> dict[str, tuple[float, int]]:
    """(median seconds, response bytes) of every panel target of every dashboard, and
    of the drill-down from an overview row: the GPU heatmap of one node (`only`: the
    targets whose name it finds). Panels with a target run at least three times,
    whatever `repeat` says."""
    out = {}
    for where, (expr, instant, step, span) in panel_requests(start, end):
        if only and not only.search(where):
            continue
        try:
            runs = [timed(server, expr, instant, step, end - span, end)
                    for _ in range(max(repeat, 3) if target_of(where) else repeat)]
            t, size = statistics.median(r[0] for r in runs), runs[-1][1]
        except (SystemExit, requests.RequestException) as e:
            # one refused or timed-out panel is a result, not the end of an hour's run
            print(f"  FAILED {where}: {e}"[:300], flush=True)
            t, size = math.inf, 0
        out[where] = (t, size)
    return out


def build_fleet(gpus: int, start: int, end: int, root: Path, work: Path) -> dict:
    """gpulse alone into victoria-metrics through the JSON-line import, and its rules replayed."""
    cluster = Cluster(math.ceil(gpus / GPUS_PER_NODE), patterns=PATTERNS)
    vm = Victoria(root / f"vm-gpulse-{cluster.gpus}", work / "vm-gpulse-fleet.log")
    vm.start()
    try:
        t0, c0, v0 = time.monotonic(), os.times(), cpu_seconds(vm.proc.pid)
        series = 0
        for w0 in range(start, end, WINDOW_S):
            series = vm.load_json(cluster.write_json_window(w0, w0 + WINDOW_S))
            print(f"  gpulse {cluster.gpus} GPUs -> VictoriaMetrics: {iso(w0 + WINDOW_S)} loaded after "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
        vm.flush()
        c1 = os.times()
        store = {"engine": "vm", "source": "gpulse", "gpus": cluster.gpus, "series": series,
                 "samples": series * ((end - start) // STEP_S), "backfill_s": time.monotonic() - t0,
                 "backfill_python_cpu": c1.user - c0.user + c1.system - c0.system,
                 "backfill_db_cpu": cpu_seconds(vm.proc.pid) - v0}
        t0 = time.monotonic()
        store["rules_cpu"] = replay_rules(vm, start, end, work)
        store["rules_s"] = time.monotonic() - t0
        print(f"  recording rules replayed in {store['rules_s']:.0f} s", flush=True)
        return store
    finally:
        vm.stop()


def build_compare(gpus: int, start: int, end: int, root: Path, work: Path, scratch: Path) -> dict:
    """gpulse and dcgm-exporter into both databases; gpulse's rules evaluated by both rulers."""
    stores = {}
    nodes = math.ceil(gpus / GPUS_PER_NODE)
    # two identical clusters: one writes the text promtool reads, the other the JSON lines
    # (each carries its counters from one window to the next)
    text, lines = Cluster(nodes, patterns=PATTERNS), Cluster(nodes, patterns=PATTERNS)
    for name, source in (("gpulse", text), ("dcgm", Dcgm(Cluster(nodes)))):
        t0 = time.monotonic()
        vm = Victoria(root / f"vm-{name}-{text.gpus}", work / f"vm-{name}.log")
        prom = Prometheus(root / f"prom-{name}-{text.gpus}", work)
        vm.start()
        try:
            def write(om: Path, w0: int, w1: int, source=source, vm=vm, name=name):
                source.write_window(om, w0, w1)
                if name == "gpulse":
                    vm.load_json(lines.write_json_window(w0, w1))
                else:
                    vm.load(om)        # before promtool consumes (and removes) the file
            load_windows(write, start, end, prom.data, scratch, f"fleet-{name}-{text.gpus}")
            vm.flush()
            prom.start()
            print(f"  {name}: {text.gpus} GPUs × {(end - start) / 3600:g} h loaded into both in "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
            series = requests.get(f"{prom.url}/api/v1/query", timeout=120, params={
                "query": 'count({__name__=~".+"})', "time": end - 60}).json()["data"]["result"]
            base = {"source": name, "gpus": text.gpus, "series": int(float(series[0]["value"][1])) if series else 0}
            p, v = dict(base, engine="prom"), dict(base, engine="vm")
            if name == "gpulse":
                t0 = time.monotonic()
                c0 = os.times()
                cp = cpu_seconds(prom.proc.pid)
                backfill_rules(prom, start, end, work)
                c1 = os.times()
                # promtool and the Prometheus processes it queried, which backfill_rules
                # stops (waited for: children's time) and starts again (read live)
                p["rules_cpu"] = (c1.children_user - c0.children_user + c1.children_system
                                  - c0.children_system) - cp + cpu_seconds(prom.proc.pid)
                v["rules_cpu"] = replay_rules(vm, start, end, work)
                print(f"  recording rules over the range, both rulers: {time.monotonic() - t0:.0f} s", flush=True)
            stores[f"prom-{name}-{text.gpus}"], stores[f"vm-{name}-{text.gpus}"] = p, v
        finally:
            prom.stop()
            vm.stop()
    return stores


# node shards of one hour per OpenMetrics file: 1,024 GPUs, ~1.9 GB of text, what one
# promtool run loads in about half a minute; at least 4 shards an hour, so that a small
# run goes through the same merge of overlapping blocks as a fleet
SHARD_NODES = 128
PROM_FLAGS = (
    # the 16,384-row heatmaps and the rule backfill's range queries: past the 2 min and
    # 50 M-sample defaults at fleet size
    "--query.timeout=30m", "--query.max-samples=2000000000")
# the last minutes of the range where every recording rule is backfilled (the records no
# panel with a target reads, as input to the rules read from them) and where each
# group's evaluation is timed
EVAL_WINDOW_S = 1200
EVAL_AT = (300, 200, 100)       # seconds before the end: the timed evaluation instants
RULES = ROOT / "prometheus" / "rules"
# rule folders timed beside prometheus/rules (--eval-rules)
EVAL_RULES = (ROOT / "prometheus" / "rules-prometheus",)


def prom_server(data: Path, work: Path) -> Prometheus:
    return Prometheus(data, work, flags=PROM_FLAGS)


def node_of(labels: str) -> int:
    """The node index in a series' labels (every series of the model has its instance)."""
    i = labels.index('instance="gpu-node-') + 19
    return int(labels[i:labels.index(":", i)])


def write_shards(cluster: Cluster, t0: int, t1: int, shard_nodes: int, path_of):
    """The scrapes t0, t0+15, ... < t1 as one OpenMetrics file per `shard_nodes` nodes,
    path_of(shard) each; yields (path, series, samples) as each file is complete. One
    pass over the cluster per hour: its counters move on once."""
    stamps = [f" {t}\n" for t in range(t0, t1, STEP_S)]
    formatted: dict[tuple[int, int], list[str]] = {}
    fam: dict[str, list[str]] = {}
    shard, series, samples = 0, 0, 0
    for name, labels, values, key in cluster.series(t0, t1):
        if node_of(labels) // shard_nodes != shard:
            write_families(path_of(shard), fam)
            yield path_of(shard), series, samples
            fam, shard, series, samples = {}, node_of(labels) // shard_nodes, 0, 0
        tails = formatted.get(key)
        if tails is None:
            tails = formatted[key] = [format(v, ".6g") + ts for v, ts in zip(values, stamps)]
        prefix = f"{name}{{{labels}}} "
        fam.setdefault(name, []).append("".join([prefix + tail for tail in tails]))
        series += 1
        samples += len(values)
    write_families(path_of(shard), fam)
    yield path_of(shard), series, samples


def blocks(data: Path) -> list[tuple[int, int]]:
    """(minTime, maxTime) of each block in a TSDB directory."""
    out = []
    for meta in data.glob("*/meta.json"):
        try:
            m = json.loads(meta.read_text())
        except (OSError, ValueError):       # a block being written or deleted
            continue
        out.append((m["minTime"], m["maxTime"]))
    return sorted(out)


def wait_compacted(prom: Prometheus, timeout_s: float = 7200) -> int:
    """Until Prometheus has merged every overlapping block (vertical compaction; with 2 h
    blocks at most, nothing else is compacted) and removed the parents; the blocks left."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        b = blocks(prom.data)
        if all(x[1] <= y[0] for x, y in zip(b, b[1:])) and not list(prom.data.glob("*.tmp*")):
            return len(b)
        if prom.proc.poll() is not None:
            raise SystemExit(f"fleet: prometheus exited while compacting: {prom.proc.stderr.read()[-500:]}")
        time.sleep(5)
    raise SystemExit(f"fleet: {prom.data}: overlapping blocks still there after {timeout_s:.0f} s")


def prom_scrapes(gpus: int, start: int, end: int, data: Path, work: Path, scratch: Path) -> dict:
    """gpulse's scrapes at fleet size into Prometheus: node shard × hour files, two
    promtool runs loading while Python writes the next, then Prometheus started until
    it has merged the overlapping blocks of each hour. Wall and CPU of all three."""
    cluster = Cluster(math.ceil(gpus / GPUS_PER_NODE), patterns=PATTERNS)
    shard_nodes = min(SHARD_NODES, math.ceil(cluster.nodes / 4))
    t0, c0 = time.monotonic(), os.times()
    loading: list[tuple[subprocess.Popen, Path]] = []
    series = samples = 0
    try:
        for w0 in range(start, end, WINDOW_S):
            for om, s, k in write_shards(cluster, w0, w0 + WINDOW_S, shard_nodes,
                                         lambda i, w0=w0: scratch / f"fleet-prom-{gpus}-{w0}-{i}.om"):
                series, samples = (series + s, samples + k) if w0 == start else (series, samples + k)
                while len(loading) >= 2:
                    wait_loaded(*loading.pop(0))
                loading.append((subprocess.Popen([need("promtool"), "tsdb", "create-blocks-from", "openmetrics",
                                                  str(om), str(data)], stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.PIPE, text=True), om))
            print(f"  gpulse {cluster.gpus} GPUs -> Prometheus: {iso(w0 + WINDOW_S)} written after "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
        while loading:
            wait_loaded(*loading.pop(0))
    finally:
        for p, om in loading:
            p.kill()
            p.wait()
            om.unlink(missing_ok=True)
    c1 = os.times()
    loaded_s = time.monotonic() - t0
    prom = prom_server(data, work)
    prom.start()
    try:
        p0 = cpu_seconds(prom.proc.pid)
        n = wait_compacted(prom)
        compact_cpu = cpu_seconds(prom.proc.pid) - p0
    finally:
        prom.stop()
    store = {"engine": "prom", "source": "gpulse", "gpus": cluster.gpus, "series": series, "samples": samples,
             "backfill_s": time.monotonic() - t0, "backfill_loaded_s": loaded_s,
             "backfill_python_cpu": c1.user - c0.user + c1.system - c0.system,
             "backfill_promtool_cpu": c1.children_user - c0.children_user + c1.children_system
             - c0.children_system,
             "backfill_db_cpu": compact_cpu, "blocks": n}
    print(f"  gpulse {cluster.gpus} GPUs -> Prometheus: {samples / 1e6:.0f} M samples in {store['backfill_s']:.0f} s "
          f"(loaded {loaded_s:.0f} s, then compacted into {n} blocks)", flush=True)
    return store


def seconds(duration: str) -> int:
    """A Prometheus duration of one unit (15s, 1m, 2h) in seconds."""
    return int(duration[:-1]) * {"s": 1, "m": 60, "h": 3600}[duration[-1]]


def records_read(exprs: list[str]) -> set[str]:
    """The recorded series the expressions read, and the records those are computed from."""
    rules = {r["record"]: r["expr"] for level in rule_levels() for _, r in level}

    def read(text: str) -> set[str]:
        return {n for n in rules if re.search(rf"(?<![\w:]){re.escape(n)}(?![\w:])", text)}
    out = set().union(*map(read, exprs))
    while True:
        more = out | set().union(*(read(rules[n]) for n in out))
        if more == out:
            return out
        out = more


def prom_rules(data: Path, start: int, end: int, work: Path, only: re.Pattern | None = None,
               eval_rules: tuple[Path, ...] = EVAL_RULES) -> dict:
    """The recording rules into a Prometheus fleet store: over the whole range those the
    panels with a target read (`only`: those of them it finds) and their inputs, over the
    last EVAL_WINDOW_S every other one (the input of the rules read from them); then each
    group evaluated as a live ruler would at EVAL_AT (eval_cost)."""
    exprs = [expr for where, (expr, *_) in panel_requests(start, end)
             if target_of(where) and (not only or only.search(where))]
    full = records_read(exprs)
    prom = prom_server(data, work)
    prom.start()
    t0, c0, db_cpu = time.monotonic(), os.times(), 0.0
    try:
        for i, level in enumerate(rule_levels()):
            for part, a in (("range", start), ("eval", end - EVAL_WINDOW_S)):
                chosen = [(iv, r) for iv, r in level if (r["record"] in full) == (part == "range")]
                if not chosen:
                    continue
                groups: dict[str, list[dict]] = {}
                for iv, r in chosen:
                    groups.setdefault(iv, []).append(r)
                rules_file = work / f"rules-{i}-{part}.yml"
                rules_file.write_text(yaml.safe_dump({"groups": [
                    dict(name=f"level{i}-{part}-{n}", rules=rs, **({"interval": iv} if iv else {}))
                    for n, (iv, rs) in enumerate(groups.items())]}, sort_keys=False))
                out = work / f"rules-{i}-{part}"
                run([need("promtool"), "tsdb", "create-blocks-from", "rules",
                     f"--start={rules_start(a, [chosen])}", f"--end={end}",
                     f"--url={prom.url}", f"--output-dir={out}", f"--eval-interval={STEP_S}s", str(rules_file)])
                print(f"  rules level {i} ({part}, {len(chosen)} records) backfilled after "
                      f"{time.monotonic() - t0:.0f} s", flush=True)
            # the next level reads this one's records: a restart loads the new blocks
            db_cpu += cpu_seconds(prom.proc.pid)
            prom.stop()
            for block in work.glob(f"rules-{i}-*/*"):
                shutil.move(str(block), data / block.name)
            prom.start()
        c1 = os.times()
        p0 = cpu_seconds(prom.proc.pid)
        wait_compacted(prom)
        store = {"rules_s": time.monotonic() - t0, "rules_records_range": sorted(full),
                 "rules_cpu": c1.children_user - c0.children_user + c1.children_system - c0.children_system
                 + db_cpu + p0, "rules_compact_cpu": cpu_seconds(prom.proc.pid) - p0}
        print(f"  recording rules backfilled and compacted in {store['rules_s']:.0f} s", flush=True)
        store["groups"] = eval_cost(prom, end)
        store["groups_by"] = eval_variants(prom, end, list(eval_rules))
        return store
    finally:
        prom.stop()


def eval_cost(prom: Prometheus, end: int, folder: Path = RULES) -> dict:
    """Each rule group of `folder` (prometheus/rules, or a variant of it), recording and
    alerting, evaluated at each of EVAL_AT as its rules' instant queries: Prometheus'
    CPU seconds (and wall seconds) per evaluation of the group and of each rule, averaged
    over the instants. Groups without an interval run at the scrape interval, as the
    shipped rules assume. A rule that reads a record of its own group (the Prometheus
    variant) reads the one backfilled at that instant, as a live ruler reads the one it
    has just written."""
    out = {}
    for f in sorted(folder.glob("*.yml")):
        for g in yaml.safe_load(f.read_text())["groups"]:
            cpu = wall = 0.0
            per_rule: dict[str, float] = {}
            for ago in EVAL_AT:
                c0, w0 = cpu_seconds(prom.proc.pid), time.perf_counter()
                for r in g["rules"]:
                    r0 = cpu_seconds(prom.proc.pid)
                    body = requests.post(f"{prom.url}/api/v1/query", data={"query": r["expr"], "time": end - ago},
                                         timeout=1800).json()
                    if body.get("status") != "success":
                        raise SystemExit(f"fleet: rule {r.get('record') or r.get('alert')} failed: "
                                         f"{body.get('error')}")
                    name = r.get("record") or r["alert"]
                    per_rule[name] = per_rule.get(name, 0.0) + (cpu_seconds(prom.proc.pid) - r0) / len(EVAL_AT)
                cpu += cpu_seconds(prom.proc.pid) - c0
                wall += time.perf_counter() - w0
            out[g["name"]] = {"interval_s": seconds(g.get("interval", f"{STEP_S}s")), "rules": len(g["rules"]),
                              "recording": sum("record" in r for r in g["rules"]),
                              "cpu_s": cpu / len(EVAL_AT), "wall_s": wall / len(EVAL_AT), "rule_cpu_s": per_rule}
            print(f"  {g['name']}: {out[g['name']]['cpu_s']:.2f} CPU s per evaluation", flush=True)
    return out


def eval_variants(prom: Prometheus, end: int, folders: list[Path]) -> dict:
    """eval_cost of each further rule folder, by its path."""
    out = {}
    for folder in folders:
        print(f"  rule groups of {folder}:", flush=True)
        out[str(folder)] = eval_cost(prom, end, folder)
    return out


def per_cycle(groups: dict, recording_only: bool = False) -> float:
    """CPU seconds per scrape interval of the groups, each at its own interval."""
    return sum(g["cpu_s"] * STEP_S / g["interval_s"] for g in groups.values()
               if g["recording"] or not recording_only)


def prom_fleet(meta: dict, root: Path, work: Path, scratch: Path, gpus: int, rules: bool = True,
               only: re.Pattern | None = None, eval_rules: tuple[Path, ...] = EVAL_RULES) -> str:
    """The Prometheus fleet store prom-gpulse-GPUS in a kept directory, each phase not
    yet done (scrapes, then rules; `only`: see prom_rules), fleet.json written after
    each; its name."""
    name = f"prom-gpulse-{math.ceil(gpus / GPUS_PER_NODE) * GPUS_PER_NODE}"
    store = meta["stores"].get(name)
    if store is None:
        if (root / name).exists():
            raise SystemExit(f"fleet: {root / name}: there, but not in fleet.json (an interrupted backfill: "
                             "remove it)")
        store = meta["stores"][name] = prom_scrapes(gpus, meta["start"], meta["end"], root / name, work, scratch)
        (root / "fleet.json").write_text(json.dumps(meta, indent=1))
    if rules and "groups" not in store:
        store.update(prom_rules(root / name, meta["start"], meta["end"], work, only, eval_rules))
        (root / "fleet.json").write_text(json.dumps(meta, indent=1))
    return name


def retime_rules(meta: dict, root: Path, work: Path, folders: list[Path]) -> None:
    """Every kept Prometheus store of gpulse whose rules were evaluated: each rule group
    of `folders` timed again (eval_cost) on the records it holds, kept in fleet.json."""
    kept = json.loads((root / "fleet.json").read_text())
    for name, store in meta["stores"].items():
        if store["engine"] != "prom" or "groups" not in store:
            continue
        prom = prom_server(root / name, work)
        prom.start()
        try:
            store.setdefault("groups_by", {}).update(eval_variants(prom, meta["end"], folders))
        finally:
            prom.stop()
        kept["stores"][name]["groups_by"] = store["groups_by"]
    (root / "fleet.json").write_text(json.dumps(kept, indent=1))


def measure(meta: dict, root: Path, work: Path, repeat: int, only: re.Pattern | None = None,
            replay: bool = False) -> dict:
    """Each kept database started on its own: queries (gpulse), disk, RSS after them.
    `replay`: first evaluate today's recording rules over the range into each
    VictoriaMetrics store of gpulse, so that a backfill kept from older rules has the
    series today's dashboards read (a series recorded before gets its samples a second
    time, same timestamps and values)."""
    out = {}
    for name, store in meta["stores"].items():
        server = (Victoria(root / name, work / f"{name}.log") if store["engine"] == "vm"
                  else prom_server(root / name, work))
        server.start()
        try:
            r = out[name] = {}
            if replay and store["engine"] == "vm" and store["source"] == "gpulse":
                t0 = time.monotonic()
                r["rules_cpu"] = replay_rules(server, meta["start"], meta["end"], work)
                r["rules_s"] = time.monotonic() - t0
                print(f"  {name}: today's recording rules replayed in {r['rules_s']:.0f} s", flush=True)
            if store["source"] == "gpulse":
                t0 = time.monotonic()
                r["queries"] = queries(server, meta["start"], meta["end"], repeat, only)
                print(f"  {name}: {len(r['queries'])} panel queries in {time.monotonic() - t0:.0f} s", flush=True)
            r["rss"] = rss_bytes(server.proc.pid)
        finally:
            server.stop()
        r["disk"] = du(root / name)
    return out


ENGINES = {"prom": "Prometheus 2.42", "vm": "VictoriaMetrics 1.79"}


def measured(name: str, f: dict, meta: dict, res: dict, stores: dict) -> None:
    """The figures of one store at the largest size."""
    hours, cycles = meta["hours"], (meta["end"] - meta["start"]) // STEP_S
    gpu_h = f["gpus"] * hours
    print()
    print(f"MEASURED: gpulse, {f['gpus']} GPUs ({f['gpus'] // GPUS_PER_NODE} nodes) × {hours:g} h at a {STEP_S} s "
          f"scrape ({cycles} scrapes/evaluations) on {ENGINES[f['engine']]}")
    if "backfill_promtool_cpu" in f:
        print(f"  backfill: {f['series']} series, {f['samples'] / 1e6:.0f} M samples in {f['backfill_s']:.0f} s "
              f"({f['backfill_loaded_s']:.0f} s loading, then Prometheus merging the node shards into {f['blocks']} "
              f"blocks; CPU: Python {f['backfill_python_cpu']:.0f} s, promtool {f['backfill_promtool_cpu']:.0f} s, "
              f"prometheus {f['backfill_db_cpu']:.0f} s)")
    elif "backfill_s" in f:
        print(f"  backfill: {f['series']} series, {f['samples'] / 1e6:.0f} M samples in {f['backfill_s']:.0f} s "
              f"({f['samples'] / f['backfill_s'] / 1e6:.2f} M samples/s; CPU: Python {f['backfill_python_cpu']:.0f} s, "
              f"victoria-metrics {f['backfill_db_cpu']:.0f} s)")
    if "disk" in f:
        print(f"  series per GPU {f['series'] / f['gpus']:.1f}; disk {f['disk'] / 1e9:.2f} GB = "
              f"{f['disk'] / gpu_h / 1024:.1f} KiB per GPU-hour; RSS after the queries {f['rss'] / MB:.0f} MB")
    if "groups" in f:
        rest = f.get("rules_note") or f"over the last {EVAL_WINDOW_S // 60} min every other record"
        print(f"  recording rules backfilled by promtool: over the range {', '.join(f['rules_records_range'])}; "
              f"{rest} ({f['rules_s']:.0f} s, {f['rules_cpu']:.0f} CPU s of promtool and prometheus, then "
              f"{f['rules_compact_cpu']:.0f} CPU s merging)")
        print(f"  rule evaluation, every group as instant queries at {len(EVAL_AT)} instants (prometheus CPU s "
              "per evaluation; per 15 s at the group's interval):")
        for g, c in f["groups"].items():
            print(f"    {g:<32} {c['rules']:>3} rules every {c['interval_s']:>3} s: {c['cpu_s']:8.3f} CPU s, "
                  f"{c['wall_s']:7.3f} s wall; {1000 * c['cpu_s'] * STEP_S / c['interval_s']:8.1f} ms per 15 s")
        print(f"  per 15 s cycle: {1000 * per_cycle(f['groups']):.0f} ms of CPU, every group; "
              f"{1000 * per_cycle(f['groups'], True):.0f} ms the recording groups alone")
        for folder, groups in f.get("groups_by", {}).items():
            print(f"  the same, rule groups of {folder}:")
            for g, c in groups.items():
                print(f"    {g:<32} {c['rules']:>3} rules every {c['interval_s']:>3} s: {c['cpu_s']:8.3f} CPU s; "
                      f"{1000 * c['cpu_s'] * STEP_S / c['interval_s']:8.1f} ms per 15 s")
                for r, cpu in c.get("rule_cpu_s", {}).items() if len(c.get("rule_cpu_s", {})) > 1 else ():
                    print(f"      {r[:60]:<60} {cpu:8.3f} CPU s")
            print(f"    per 15 s cycle: {1000 * per_cycle(groups):.0f} ms of CPU, every group; "
                  f"{1000 * per_cycle(groups, True):.0f} ms the recording groups alone")
        vm = stores.get(name.replace("prom-", "vm-", 1), {})
        if vm.get("rules_cpu"):
            latest = (vm.get("replays") or [vm])[-1]
            print(f"  beside VictoriaMetrics at the same size (vmalert -replay, recording rules, at "
                  f"{(latest.get('at') or 'its backfill')}): {1000 * latest['rules_cpu'] / cycles:.0f} ms of CPU "
                  "per 15 s cycle")
    elif "rules_cpu" in f:
        if "rules_s" in res:
            print(f"  recording rules at the backfill: {stores[name]['rules_cpu']:.1f} CPU s for {cycles} cycles = "
                  f"{1000 * stores[name]['rules_cpu'] / cycles:.1f} ms per cycle")
        how = ("vmalert -replay" if f["engine"] == "vm" else "promtool") + ", today's rules" * ("rules_s" in res)
        print(f"  recording rules ({how}): {f['rules_cpu']:.1f} "
              f"CPU s for {cycles} cycles = {1000 * f['rules_cpu'] / cycles:.1f} ms per cycle")
    for label, prefix, limit in TARGETS:
        hits = [(w, t, size) for w, (t, size) in f.get("queries", {}).items() if w.startswith(prefix)]
        if not hits:        # left out by --only
            continue
        # requests_for lists a panel's choices in the dashboard's order, its default first
        for what, (w, t, size) in (("default", hits[0]), ("slowest", max(hits, key=lambda h: h[1]))):
            print(f"  {label}: {what} {t:.3f} s (target {limit:g} s: {'met' if t <= limit else 'MISSED'}), "
                  f"{size / MB:.2f} MB: {w[:90]}")


def report(meta: dict, res: dict, only: re.Pattern | None = None) -> None:
    hours, cycles = meta["hours"], (meta["end"] - meta["start"]) // STEP_S
    stores = meta["stores"]

    def fig(name: str) -> dict:
        return {**stores[name], **res[name]}
    top = max(s["gpus"] for s in stores.values() if s["source"] == "gpulse")
    # the largest size, VictoriaMetrics first: the table's first column
    tops = sorted((n for n, s in stores.items() if s["source"] == "gpulse" and s["gpus"] == top),
                  key=lambda n: n.startswith("prom"))
    for name in tops:
        measured(name, fig(name), meta, res[name], stores)
    fleet = tops[0]
    f = fig(fleet)
    compare = sorted({s["gpus"] for s in stores.values() if s["source"] == "dcgm"})
    others = [n for n in stores if n != fleet and stores[n]["source"] == "gpulse"]
    title = f"panel query, {hours:g} h range ({f['gpus']} GPUs {f['engine']}" + \
        "".join(f"; {stores[n]['gpus']} GPUs {stores[n]['engine']}" for n in others) + ")"
    print()
    print(f"{title[:100]:<100} " + " ".join(f"{stores[n]['engine'] + ' ' + str(stores[n]['gpus']):>22}"
                                            for n in [fleet] + others))
    print(f"{'':<100} " + " ".join(f"{'s       MB':>22}" for _ in [fleet] + others))
    for where, (t, size) in f["queries"].items():
        cells = [f"{t:8.3f} {size / MB:9.2f}"]
        cells += [f"{res[n]['queries'][where][0]:8.3f} {res[n]['queries'][where][1] / MB:9.2f}"
                  if where in res[n].get("queries", {}) else "" for n in others]
        print(f"{where[:100]:<100} " + " ".join(f"{c:>22}" for c in cells))
    print(f"{'all panels' + ' timed' * bool(only) + ', summed':<100} " + " ".join(
        f"{sum(t for t, _ in res[n]['queries'].values()):8.3f}{'':>14}" for n in [fleet] + others))
    for gpus in compare:
        g = {e: fig(f"{e}-gpulse-{gpus}") for e in ENGINES}
        dc = {e: fig(f"{e}-dcgm-{gpus}") for e in ENGINES}
        gpu_h = gpus * hours
        print()
        print(f"MEASURED side by side: {gpus} GPUs × {hours:g} h, gpulse and dcgm-exporter's defaults on both")
        print(f"{'':<40} {'gpulse':>12} {'dcgm-exporter':>14} {'gpulse/dcgm':>12}")
        print(f"{'series per GPU':<40} {g['prom']['series'] / gpus:12.1f} {dc['prom']['series'] / gpus:14.1f} "
              f"{g['prom']['series'] / dc['prom']['series']:12.2f}")
        for e, label in ENGINES.items():
            print(f"{label + ' disk KiB per GPU-hour':<40} {g[e]['disk'] / gpu_h / 1024:12.1f} "
                  f"{dc[e]['disk'] / gpu_h / 1024:14.1f} {g[e]['disk'] / dc[e]['disk']:12.2f}")
            print(f"{label + ' RSS MB after queries':<40} {g[e]['rss'] / MB:12.0f} {dc[e]['rss'] / MB:14.0f} "
                  f"{g[e]['rss'] / dc[e]['rss']:12.2f}")
        print(f"{'VictoriaMetrics / Prometheus disk, gpulse':<40} {g['vm']['disk'] / g['prom']['disk']:12.2f}")
        for e, how in (("prom", "promtool backfill"), ("vm", "vmalert -replay")):
            print(f"recording rules, {ENGINES[e]} ({how}): {g[e]['rules_cpu']:.1f} CPU s for {cycles} cycles = "
                  f"{1000 * g[e]['rules_cpu'] / cycles:.1f} ms per cycle")
        pt = sum(t for t, _ in g["prom"]["queries"].values())
        vt = sum(t for t, _ in g["vm"]["queries"].values())
        print(f"all panels summed at {gpus} GPUs: Prometheus {pt:.1f} s, VictoriaMetrics {vt:.1f} s, "
              f"VM/Prom {vt / pt:.2f}")
    if compare and max(compare) < FLEET:
        top = max(compare)
        scale = FLEET / top
        print()
        print(f"EXTRAPOLATION to {FLEET} GPUs, linear in GPUs from the {top}-GPU side-by-side run (×{scale:g}); "
              "not measured:")
        day = scale * 24 / hours / 1e9
        for e, label in ENGINES.items():
            gp = ("measured above" if f"{e}-gpulse-{FLEET}" in res else
                  f"{fig(f'{e}-gpulse-{top}')['disk'] * day:.1f} GB per day")
            print(f"  {label}: gpulse {gp}, dcgm-exporter {fig(f'{e}-dcgm-{top}')['disk'] * day:.1f} GB per day")
        if f"prom-gpulse-{FLEET}" not in res:
            print(f"  recording rules, Prometheus: {1000 * fig(f'prom-gpulse-{top}')['rules_cpu'] / cycles * scale:.0f} "
                  "ms of CPU per 15 s cycle")


def scratch_dir() -> Path:
    """Where the text files promtool reads are written (RAM where there is a /dev/shm)."""
    return Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path(tempfile.gettempdir())


def regex(text: str) -> re.Pattern:
    try:
        return re.compile(text)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"not a regular expression ({e})") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="64", help=f"fleet size in GPUs, gpulse on VictoriaMetrics (default %(default)s; "
                    f"the target is {FLEET})")
    ap.add_argument("--compare-gpus", type=int, default=None, metavar="N",
                    help="size of the side-by-side run: gpulse and dcgm-exporter on Prometheus and VictoriaMetrics "
                    "(default: --gpus; 0: none)")
    ap.add_argument("--hours", type=float, default=4.0, help="range backfilled (default %(default)s)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each query, the median is reported (panels with "
                    "a target: at least 3)")
    ap.add_argument("--keep", type=Path, metavar="DIR", help="build the databases in DIR (new or empty) and keep them")
    ap.add_argument("--reuse", type=Path, metavar="DIR", help="no backfill: start the servers on DIR (a --keep run) "
                    "and run the queries on the dashboards as they are now")
    ap.add_argument("--prom-gpus", type=int, metavar="N", help="gpulse at N GPUs into Prometheus too (node shard × "
                    "hour files, merged by Prometheus; the records the panels with a target (and --only) read "
                    "backfilled over the range, every rule group's evaluation timed); with --reuse: added to the "
                    "kept directory, each phase not yet there")
    ap.add_argument("--eval-rules", type=Path, action="append", metavar="DIR",
                    help="a rule folder whose groups are timed beside prometheus/rules on each Prometheus store of "
                    "gpulse (repeatable; default: prometheus/rules-prometheus); with --reuse: timed again on the "
                    "kept stores")
    ap.add_argument("--replay-rules", action="store_true", help="with --reuse: first replay today's recording rules "
                    "(vmalert -replay of prometheus/rules-vmalert over the kept range) into each VictoriaMetrics "
                    "store of gpulse; its CPU time is reported in place of the backfill's")
    ap.add_argument("--stores", type=regex, metavar="REGEX", help="with --reuse: only the kept stores whose "
                    "name (ENGINE-SOURCE-GPUS, e.g. vm-gpulse-16384) it finds")
    ap.add_argument("--only", type=regex, metavar="REGEX", help="only the panel targets whose name "
                    "(dashboard / panel [ref] choices) it finds")
    args = ap.parse_args(argv)
    gpus = sizes_and_hours(args, "fleet")[0]
    compare = gpus if args.compare_gpus is None else args.compare_gpus
    if compare < 0 or compare > gpus:
        raise SystemExit(f"fleet: --compare-gpus must be between 0 and --gpus ({gpus}), got {compare}")
    if args.keep and args.reuse:
        raise SystemExit("fleet: --keep builds a backfill, --reuse reads one: give one of them")
    if args.prom_gpus is not None and args.prom_gpus < GPUS_PER_NODE:
        raise SystemExit(f"fleet: --prom-gpus must be at least {GPUS_PER_NODE}, got {args.prom_gpus}")
    if (args.replay_rules or args.stores) and not args.reuse:
        raise SystemExit("fleet: --replay-rules and --stores act on a kept backfill: give --reuse DIR")
    for b in ("prometheus", "promtool", "victoria-metrics", "vmalert"):
        need(b)
    eval_rules = tuple(args.eval_rules or EVAL_RULES)
    for folder in eval_rules:
        if not sorted(folder.glob("*.yml")):
            raise SystemExit(f"fleet: --eval-rules {folder}: no rule files (*.yml) there")
    work = Path(tempfile.mkdtemp(prefix="gpulse-fleet-"))
    try:
        if args.reuse:
            try:
                meta = json.loads((args.reuse / "fleet.json").read_text())
            except (OSError, ValueError) as e:
                raise SystemExit(f"fleet: --reuse {args.reuse}: not a kept backfill ({e})") from None
            root = args.reuse
            if args.prom_gpus:
                prom_fleet(meta, root, work, scratch_dir(), args.prom_gpus, only=args.only, eval_rules=eval_rules)
            if args.stores:
                meta["stores"] = {n: s for n, s in meta["stores"].items() if args.stores.search(n)}
                if not any(s["source"] == "gpulse" for s in meta["stores"].values()):
                    raise SystemExit(f"fleet: --stores {args.stores.pattern}: no kept store of gpulse in {root} "
                                     "matches")
            if args.eval_rules:
                retime_rules(meta, root, work, list(eval_rules))
        else:
            if not DCGM_CAPTURE.is_file():
                raise SystemExit(f"fleet: {DCGM_CAPTURE} not found (the shared data folder beside the checkout)")
            root = args.keep or work / "data"
            if root.exists() and any(root.iterdir()):
                raise SystemExit(f"fleet: --keep {root}: not empty (use --reuse to query a kept backfill)")
            root.mkdir(parents=True, exist_ok=True)
            scratch = scratch_dir()
            end = int(time.time()) // BLOCK_S * BLOCK_S
            start = end - int(args.hours * 3600)
            meta = {"start": start, "end": end, "hours": args.hours, "stores": {}}
            if compare:
                meta["stores"].update(build_compare(compare, start, end, root, work, scratch))
            if gpus > compare:
                meta["stores"][f"vm-gpulse-{math.ceil(gpus / GPUS_PER_NODE) * GPUS_PER_NODE}"] = \
                    build_fleet(gpus, start, end, root, work)
            (root / "fleet.json").write_text(json.dumps(meta, indent=1))
            if args.prom_gpus:
                prom_fleet(meta, root, work, scratch, args.prom_gpus, only=args.only, eval_rules=eval_rules)
        res = measure(meta, root, work, args.repeat, args.only, args.replay_rules)
        if args.only and not any(r.get("queries") for r in res.values()):
            raise SystemExit(f"fleet: --only {args.only.pattern}: no panel target matches")
        if args.replay_rules:
            # the stores now hold today's records too: say so to the next --reuse
            kept = json.loads((root / "fleet.json").read_text())
            for name, r in res.items():
                if "rules_cpu" in r:
                    kept["stores"][name].setdefault("replays", []).append(
                        {"at": iso(int(time.time())), "rules_cpu": r["rules_cpu"], "rules_s": r["rules_s"]})
            (root / "fleet.json").write_text(json.dumps(kept, indent=1))
        report(meta, res, args.only)
        if args.keep:
            print(f"\nkept in {args.keep}; the queries again: .venv/bin/python bench/fleet.py --reuse {args.keep}")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
