#!/usr/bin/env python3
"""A fleet in Prometheus and VictoriaMetrics side by side, against dcgm-exporter's cost.

    .venv/bin/python bench/fleet.py                     # 64 GPUs × 4 h; a minute or two here
    .venv/bin/python bench/fleet.py --gpus 256          # the largest run on a 2-core machine, ~4 minutes
    .venv/bin/python bench/fleet.py --gpus 16384        # the 2,048-node fleet (hours of backfill)

For N GPUs (8 a node) × --hours at a 15 s scrape:

- gpulse: every series a gpulse exporter serves for the node (the cluster model of
  bench/dashboards_data.py: every per-GPU family, peer groups, exporter health,
  job/instance labels), written one hour per OpenMetrics file;
- dcgm-exporter's default field set: the 23 families and the label set of the real
  capture ../shared/data/captures/dcgm-exporter/l4-gpu-operator.prom, per GPU,
  utilisation, activity and power following the same cluster model, the rest moving
  as an idle GPU's do (the baseline cost a user pays without gpulse).

Each is loaded into the Debian `prometheus` (`promtool tsdb create-blocks-from
openmetrics`) and into `victoria-metrics` (`/api/v1/import/prometheus`, the same
samples in milliseconds). For gpulse the shipped recording rules are then evaluated
over the whole range: by `promtool tsdb create-blocks-from rules` for Prometheus and
by `vmalert -replay` with prometheus/rules-vmalert for VictoriaMetrics, and every
panel target of every dashboard is sent to both the way Grafana sends it for a
1,920 px panel over the range (bench/dashboards_scale.py's requests). Printed: disk
per GPU-hour, resident memory of each server after the queries, CPU seconds per
rule-evaluation cycle (ruler and database together, over the range's cycles), each
panel's median time, and the ratios gpulse / dcgm-exporter and VictoriaMetrics /
Prometheus. Sizes beyond what runs here are an extrapolation from these figures,
and the script says so.
"""
from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _proc import cpu_seconds, free_port, rss_bytes, wait_ready  # noqa: E402
from dashboards_data import GPUS_PER_NODE, STEP_S, Cluster  # noqa: E402
from dashboards_scale import (BLOCK_S, VARIABLES, Prometheus, backfill_rules, du, load_windows, need,  # noqa: E402
                              requests_for, sizes_and_hours, timed)

DCGM_CAPTURE = ROOT.parent / "shared" / "data" / "captures" / "dcgm-exporter" / "l4-gpu-operator.prom"
MB = 1e6
FLEET = 16384


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
                                      "-search.latencyOffset=0s", "-search.disableCache", "-loggerLevel=ERROR"],
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
                util = [self.cluster._util(n, g, t, rng) for t in times]
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
                              f"-evaluationInterval={STEP_S}s", "-loggerLevel=ERROR"],
                             stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"fleet: vmalert -replay failed: {(work / 'vmalert.log').read_text()[-500:]}")
    vm.flush()
    return usage.ru_utime + usage.ru_stime + cpu_seconds(vm.proc.pid) - c0


def queries(server, start: int, end: int, repeat: int) -> dict[str, tuple[float, int]]:
    out = {}
    for uid in VARIABLES:
        for where, expr, instant, step, span in requests_for(uid, (end - start) * 1000):
            t, size, _, _ = timed(server, expr, instant, step, end - span, end, repeat)
            out[where] = (t, size)
    return out


def measure(gpus: int, hours: float, repeat: int, scratch: Path) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"gpulse-fleet-{gpus}-"))
    servers: list = []
    try:
        cluster = Cluster(math.ceil(gpus / GPUS_PER_NODE))
        end = int(time.time()) // BLOCK_S * BLOCK_S
        start = end - int(hours * 3600)
        res: dict = {"gpus": cluster.gpus, "hours": hours, "cycles": (end - start) // STEP_S}
        for name, source in (("gpulse", cluster), ("dcgm", Dcgm(cluster))):
            t0 = time.monotonic()
            vm = Victoria(work / f"vm-{name}", work / f"vm-{name}.log")
            vm.start()
            servers.append(vm)

            def write(om: Path, w0: int, w1: int, source=source, vm=vm):
                n = source.write_window(om, w0, w1)
                vm.load(om)            # before promtool consumes (and removes) the file
                return n
            counts = load_windows(write, start, end, work / f"prom-{name}", scratch, f"fleet-{name}-{gpus}")
            vm.flush()
            prom = Prometheus(work / f"prom-{name}", work)
            prom.start()
            servers.append(prom)
            print(f"  {name}: {cluster.gpus} GPUs × {hours:g} h loaded into both in {time.monotonic() - t0:.0f} s",
                  flush=True)
            r = res[name] = {}
            series = requests.get(f"{prom.url}/api/v1/query", timeout=120, params={
                "query": 'count({__name__=~".+"})', "time": end - 60}).json()["data"]["result"]
            r["series"] = int(float(series[0]["value"][1])) if series else 0
            if name == "gpulse":
                t0 = time.monotonic()
                c0 = os.times()
                cp = cpu_seconds(prom.proc.pid)
                backfill_rules(prom, start, end, work)
                c1 = os.times()
                # promtool and the Prometheus processes it queried, which backfill_rules
                # stops (waited for: children's time) and starts again (read live)
                r["rules_prom_cpu"] = (c1.children_user - c0.children_user + c1.children_system
                                       - c0.children_system) - cp + cpu_seconds(prom.proc.pid)
                r["rules_vm_cpu"] = replay_rules(vm, start, end, work)
                print(f"  recording rules over {hours:g} h: {time.monotonic() - t0:.0f} s", flush=True)
                r["prom_queries"] = queries(prom, start, end, repeat)
                r["vm_queries"] = queries(vm, start, end, repeat)
            r["prom_disk"] = du(work / f"prom-{name}")
            r["vm_disk"] = du(work / f"vm-{name}")
            r["prom_rss"] = rss_bytes(prom.proc.pid)
            r["vm_rss"] = rss_bytes(vm.proc.pid)
            prom.stop()
            vm.stop()
        return res
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(work, ignore_errors=True)


def report(res: dict) -> None:
    g, dc = res["gpulse"], res["dcgm"]
    gpu_h = res["gpus"] * res["hours"]
    print()
    print(f"{res['gpus']} GPUs × {res['hours']:g} h at a {STEP_S} s scrape ({res['cycles']} scrapes/evaluations)")
    print(f"{'':<36} {'gpulse':>12} {'dcgm-exporter':>14} {'gpulse/dcgm':>12}")
    print(f"{'series per GPU (Prometheus)':<36} {g['series'] / res['gpus']:12.1f} {dc['series'] / res['gpus']:14.1f} "
          f"{g['series'] / dc['series']:12.2f}")
    for db in ("prom", "vm"):
        label = "Prometheus" if db == "prom" else "VictoriaMetrics"
        print(f"{label + ' disk KiB per GPU-hour':<36} {g[db + '_disk'] / gpu_h / 1024:12.1f} "
              f"{dc[db + '_disk'] / gpu_h / 1024:14.1f} {g[db + '_disk'] / dc[db + '_disk']:12.2f}")
        print(f"{label + ' RSS MB after queries':<36} {g[db + '_rss'] / MB:12.0f} {dc[db + '_rss'] / MB:14.0f} "
              f"{g[db + '_rss'] / dc[db + '_rss']:12.2f}")
    print(f"{'VM / Prometheus disk (gpulse)':<36} {g['vm_disk'] / g['prom_disk']:12.2f}")
    for db, label in (("prom", "Prometheus (promtool backfill)"), ("vm", "VictoriaMetrics (vmalert -replay)")):
        cpu = g[f"rules_{db}_cpu"]
        print(f"recording rules, {label}: {cpu:.1f} CPU s for {res['cycles']} cycles = "
              f"{1000 * cpu / res['cycles']:.1f} ms per cycle")
    print()
    title = f"panel query (gpulse dashboards, {res['hours']:g} h range)"
    print(f"{title:<100} {'Prom s':>8} {'VM s':>8} {'VM/Prom':>8} {'Prom MB':>8} {'VM MB':>8}")
    for where, (t, size) in g["prom_queries"].items():
        vt, vsize = g["vm_queries"][where]
        print(f"{where[:100]:<100} {t:8.3f} {vt:8.3f} {vt / max(t, 1e-6):8.2f} {size / MB:8.2f} {vsize / MB:8.2f}")
    pt = sum(t for t, _ in g["prom_queries"].values())
    vt = sum(t for t, _ in g["vm_queries"].values())
    print(f"{'all panels, summed':<100} {pt:8.3f} {vt:8.3f} {vt / pt:8.2f}")
    scale = FLEET / res["gpus"]
    print()
    print(f"EXTRAPOLATION to {FLEET} GPUs ({FLEET // GPUS_PER_NODE} nodes), linear in GPUs from this run "
          f"(×{scale:g}); not measured:")
    for db, label in (("prom", "Prometheus"), ("vm", "VictoriaMetrics")):
        day = scale * 24 / res["hours"] / 1e9
        print(f"  {label}: gpulse {g[db + '_disk'] * day:.1f} GB per day, dcgm-exporter "
              f"{dc[db + '_disk'] * day:.1f} GB per day")
    print(f"  recording rules: {1000 * g['rules_prom_cpu'] / res['cycles'] * scale:.0f} ms (Prometheus) and "
          f"{1000 * g['rules_vm_cpu'] / res['cycles'] * scale:.0f} ms (vmalert + VM) of CPU per 15 s cycle")
    worst = max(g["prom_queries"].items(), key=lambda kv: kv[1][0])
    print(f"  slowest panel at this size: {worst[0][:80]} {worst[1][0]:.3f} s (Prometheus); "
          "panel times grew 3-7x for 8x the GPUs in bench/dashboards_scale.py, so no linear figure is given")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="64", help=f"fleet size in GPUs (default %(default)s; the target is {FLEET})")
    ap.add_argument("--hours", type=float, default=4.0, help="range backfilled (default %(default)s)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each query; the median is reported")
    args = ap.parse_args(argv)
    gpus = sizes_and_hours(args, "fleet")[0]
    if not DCGM_CAPTURE.is_file():
        raise SystemExit(f"fleet: {DCGM_CAPTURE} not found (the shared data folder beside the checkout)")
    for b in ("prometheus", "promtool", "victoria-metrics", "vmalert"):
        need(b)
    scratch = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path(tempfile.gettempdir())
    report(measure(gpus, args.hours, args.repeat, scratch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
