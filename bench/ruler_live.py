#!/usr/bin/env python3
"""The shipped rules in a live Prometheus ruler at fleet size: its CPU per 15 s cycle.

    .venv/bin/python bench/ruler_live.py                          # 1,024 GPUs, ~12 minutes
    nice -n 10 .venv/bin/python bench/ruler_live.py --gpus 16384  # the fleet of issue 31, ~15 minutes
    .venv/bin/python bench/ruler_live.py --groups 'cells15s$' --unit  # one group, and the unit it is counted in

bench/fleet.py prices each rule group as instant queries over a backfilled store: the
query engine reading compacted blocks, the answer encoded as JSON. A ruler does neither:
it reads the last minutes from the in-memory head and appends its records there. This
bench runs the rules as they run in production. A synthetic fleet (the cluster model
of bench/lib/dashboards_data.py, every series a gpulse exporter serves, each node under
its own labels, counters moving on every 15 s) is served over HTTP as shard targets of
SHARD_NODES nodes; two Prometheus servers (the Debian `prometheus`) scrape it every 15 s,
one evaluating the rule files of --rules (default prometheus/rules-prometheus, the
chart's default for Prometheus; given again, another folder in a third Prometheus), the
other no rules. After --warmup seconds (the 5 m
windows full, every record written) their CPU is read over --measure seconds:

- the ruler's CPU per cycle = (CPU of the one with rules - CPU of the one without) per
  15 s: evaluation, appending the records, and the garbage they make, on the same
  scrapes at the same time;
- per group, Prometheus' own `prometheus_rule_group_last_duration_seconds` (wall time of
  an evaluation, read every cycle; wall, not CPU: groups run concurrently on the cores
  the machine has) and the evaluations missed;
- that the rules computed what they should: the number of per-GPU straggler records
  (one per GPU of a job) and of the node rank records;
- with --unit, each set's cost in units of one rule that reads every GPU's busy counter
  and records it: a ruler's cost is paid per series selected (bench/README.md, "Fleet").

No value here is a measurement of a GPU; only the shape and size of the series are.
"""
from __future__ import annotations

import argparse
import http.server
import math
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))          # bench.lib, testing/

from bench.dashboards_scale import need  # noqa: E402
from bench.fleet import node_of  # noqa: E402
from bench.lib.dashboards_data import GPUS_PER_NODE, STEP_S, Cluster  # noqa: E402
from bench.lib.proc import cpu_seconds, free_port, rss_bytes, wait_ready  # noqa: E402

RULES = ROOT / "prometheus" / "rules-prometheus"
# nodes per scrape target: the ruler's cost does not depend on how the series are split
# into targets, and a few large ones keep the Python server's share of the CPU small
SHARD_NODES = 32
# as bench/fleet.py: a fleet's nodes repeat this many node patterns per job
PATTERNS = 16
# the record the check counts: one per GPU of a job
PER_GPU = "node_gpu:gpulse_gpu_peer_wait:ratio5m"
# the record of --unit
UNIT_RECORD = "node_gpu:ruler_live_unit:copy"
TOP_RULES = 12


class Fleet:
    """The cluster's scrape at the current 15 s step, one text per shard of nodes."""

    def __init__(self, gpus: int):
        self.cluster = Cluster(math.ceil(gpus / GPUS_PER_NODE), patterns=PATTERNS)
        self.step = (int(time.time()) // STEP_S) * STEP_S
        # the series' names and labels, once: (prefix "name{labels} ", pattern key) per shard
        self.shards: list[list[tuple[str, tuple[int, int]]]] = []
        values: dict[tuple[int, int], list[float]] = {}
        for name, labels, vals, key in self.cluster.series(self.step, self.step + STEP_S):
            shard = node_of(labels) // SHARD_NODES
            while len(self.shards) <= shard:
                self.shards.append([])
            self.shards[shard].append((f"{name}{{{labels}}} ", key))
            values[key] = vals
        self.bodies = self._bodies(values)
        self.gen_cpu = 0.0
        self.lock = threading.Lock()

    @property
    def series(self) -> int:
        return sum(map(len, self.shards))

    def _bodies(self, values: dict[tuple[int, int], list[float]]) -> list[bytes]:
        text = {k: format(v[0], ".6g") + "\n" for k, v in values.items()}
        return ["".join([p + text[k] for p, k in shard]).encode() for shard in self.shards]

    def advance(self, stop: threading.Event) -> None:
        """Every 15 s of the wall clock, the next scrape's values (the counters move on)."""
        while not stop.wait(max(0.0, self.step + STEP_S - time.time())):
            c0 = time.thread_time()
            self.step += STEP_S
            bodies = self._bodies(self.cluster.pattern_values(self.step, self.step + STEP_S))
            with self.lock:
                self.bodies = bodies
            self.gen_cpu += time.thread_time() - c0

    def serve(self) -> tuple[http.server.ThreadingHTTPServer, str]:
        fleet = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                try:
                    shard = int(self.path.rsplit("/", 1)[1])
                    with fleet.lock:
                        body = fleet.bodies[shard]
                except (ValueError, IndexError):
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args):
                pass

        port = free_port()
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, f"127.0.0.1:{port}"


class Prom:
    """The Debian prometheus scraping the fleet's shards every 15 s, with `rules` or none."""

    def __init__(self, work: Path, target: str, shards: int, rules: list[Path]):
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        lines = ["global: {scrape_interval: 15s, scrape_timeout: 10s, evaluation_interval: 15s}",
                 "rule_files: [" + ", ".join(f"'{r}'" for r in rules) + "]", "scrape_configs:"]
        for s in range(shards):
            lines += [f"  - job_name: shard-{s}", "    honor_labels: true", f"    metrics_path: /shard/{s}",
                      f"    static_configs: [{{targets: ['{target}']}}]"]
        work.mkdir(parents=True)
        (work / "prometheus.yml").write_text("\n".join(lines) + "\n")
        self.log = open(work / "prometheus.log", "w")
        self.proc = subprocess.Popen([need("prometheus"), f"--config.file={work / 'prometheus.yml'}",
                                      f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                                      "--storage.tsdb.retention.time=2h", "--log.level=warn"],
                                     stdout=self.log, stderr=self.log)
        wait_ready(self.proc, self.url + "/-/ready", 120, f"ruler_live: prometheus not ready; see {work}")

    def by_group(self, name: str) -> dict[str, float]:
        """One rule-group metric of its own /metrics, by the group's name."""
        text = requests.get(self.url + "/metrics", timeout=30).text
        return {smp.labels["rule_group"].rsplit(";", 1)[1]: smp.value
                for fam in text_string_to_metric_families(text) for smp in fam.samples if smp.name == name}

    def rule_times(self) -> dict[str, float]:
        """Each rule's wall seconds at its group's last evaluation (the rules API's
        evaluationTime), by group and rule name."""
        out = {}
        for g in requests.get(self.url + "/api/v1/rules", timeout=60).json()["data"]["groups"]:
            for r in g["rules"]:
                key = f"{g['name']} / {r['name']}"
                # a name may repeat in a group (two alerts of one name): add them up
                out[key] = out.get(key, 0.0) + r.get("evaluationTime", 0.0)
        return out

    def count(self, expr: str) -> int:
        body = requests.get(self.url + "/api/v1/query", params={"query": f"count({expr})"}, timeout=120).json()
        res = body.get("data", {}).get("result", [])
        return int(float(res[0]["value"][1])) if res else 0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=120)
        self.log.close()


def _seconds(duration: str) -> float:
    return float(duration[:-1]) * {"s": 1, "m": 60, "h": 3600}[duration[-1]]


def measure(gpus: int, sets: dict[str, Path], warmup: float, window: float, work: Path) -> dict:
    """Each rule set (name: folder) in its own Prometheus, beside one without rules, on one fleet."""
    folders = list(sets.values())
    t0 = time.process_time()
    fleet = Fleet(gpus)
    print(f"ruler_live: {gpus} GPUs, {fleet.series:,} series in {len(fleet.shards)} targets "
          f"(named in {time.process_time() - t0:.1f} s)", flush=True)
    server, target = fleet.serve()
    stop = threading.Event()
    threading.Thread(target=fleet.advance, args=(stop,), daemon=True).start()
    files = {folder: sorted(folder.glob("*.yml")) for folder in folders}
    proms: dict[Path | None, Prom] = {}
    try:
        proms[None] = Prom(work / "without", target, len(fleet.shards), [])
        for i, folder in enumerate(folders):
            proms[folder] = Prom(work / f"rules-{i}", target, len(fleet.shards), files[folder])
        time.sleep(warmup)
        cpu0 = {k: cpu_seconds(p.proc.pid) for k, p in proms.items()}
        count0 = {f: (proms[f].by_group("prometheus_rule_group_iterations_total"),
                      proms[f].by_group("prometheus_rule_group_iterations_missed_total")) for f in folders}
        gen0, start = fleet.gen_cpu, time.monotonic()
        durations: dict[Path, dict[str, list[float]]] = {f: {} for f in folders}
        rule_walls: dict[Path, dict[str, list[float]]] = {f: {} for f in folders}
        while time.monotonic() - start < window:
            time.sleep(STEP_S)
            for f in folders:
                for g, v in proms[f].by_group("prometheus_rule_group_last_duration_seconds").items():
                    durations[f].setdefault(g, []).append(v)
                for name, v in proms[f].rule_times().items():
                    rule_walls[f].setdefault(name, []).append(v)
        cycles = (time.monotonic() - start) / STEP_S
        cpu = {k: (cpu_seconds(p.proc.pid) - cpu0[k]) / cycles for k, p in proms.items()}
        out = {"gpus": gpus, "series": fleet.series, "cycles": cycles, "without_cpu_s": cpu[None],
               "generator_cpu_s": (fleet.gen_cpu - gen0) / cycles,
               "without_rss_mb": rss_bytes(proms[None].proc.pid) / 1e6, "rules": {}}
        for f in folders:
            iters0, missed0 = count0[f]
            out["rules"][next(n for n, v in sets.items() if v == f)] = {
                "ruler_cpu_s": cpu[f] - cpu[None], "cpu_s": cpu[f],
                "groups": {g: statistics.mean(d) for g, d in durations[f].items()},
                "rule_walls": {r: statistics.mean(d) for r, d in rule_walls[f].items()},
                "intervals": {g["name"]: _seconds(g.get("interval", f"{STEP_S}s"))
                              for path in files[f] for g in yaml.safe_load(path.read_text())["groups"]},
                "iterations": {g: v - iters0.get(g, 0)
                               for g, v in proms[f].by_group("prometheus_rule_group_iterations_total").items()},
                "missed": {g: v - missed0.get(g, 0)
                           for g, v in proms[f].by_group("prometheus_rule_group_iterations_missed_total").items()},
                "per_gpu_records": proms[f].count(PER_GPU), "rss_mb": rss_bytes(proms[f].proc.pid) / 1e6}
        return out
    finally:
        stop.set()
        for p in proms.values():
            p.stop()
        server.shutdown()


def report(r: dict) -> None:
    print(f"\n{r['gpus']:,} GPUs, {r['series']:,} scraped series, {r['cycles']:.1f} cycles measured; Prometheus "
          f"without rules {r['without_cpu_s']:.3f} s of CPU a cycle, RSS {r['without_rss_mb']:.0f} MB; making the "
          f"fleet's next scrape {r['generator_cpu_s']:.3f} s a cycle")
    for folder, x in r["rules"].items():
        print(f"  {folder}: ruler CPU per 15 s cycle {x['ruler_cpu_s']:.3f} s (Prometheus {x['cpu_s']:.3f} s), "
              f"RSS {x['rss_mb']:.0f} MB, {PER_GPU}: {x['per_gpu_records']:,} series")
        print("    group: mean wall s per evaluation (Prometheus' last duration), evaluations, missed")
        for g, d in sorted(x["groups"].items(), key=lambda kv: -kv[1]):
            print(f"      {g:32s} {d:8.3f}  {x['iterations'].get(g, 0):5.0f}  {x['missed'].get(g, 0):3.0f}")
        print(f"    the {TOP_RULES} slowest rules, mean wall s at their group's evaluation:")
        for name, d in sorted(x["rule_walls"].items(), key=lambda kv: -kv[1])[:TOP_RULES]:
            print(f"      {d:8.3f}  {name}")
        per_cycle = sum(d * STEP_S / x["intervals"].get(g, STEP_S) for g, d in x["groups"].items())
        print(f"    the groups' wall per 15 s cycle: {per_cycle:.3f} s (a group at a 1 m interval counted a quarter)")
    unit = next((x for name, x in r["rules"].items() if name.startswith("unit:")), None)
    if unit is not None and unit["ruler_cpu_s"] > 0:
        print(f"  in units (one per-GPU series read and recorded every 15 s, {unit['ruler_cpu_s']:.3f} s a cycle, "
              f"{unit['ruler_cpu_s'] / r['gpus'] * 1e6:.1f} µs a GPU):")
        for name, x in r["rules"].items():
            print(f"    {x['ruler_cpu_s'] / unit['ruler_cpu_s']:7.1f}  {name}")


def rule_sets(folders: list[Path], groups: str | None, unit: bool, work: Path) -> dict[str, Path]:
    """{name shown: folder} of the rule sets to run: each folder as it is, or only its
    groups whose name matches `groups` (copied into `work`); with `unit`, one more set
    of one rule that reads every GPU's busy counter and records it, the cost of one
    per-GPU series read and written every 15 s, in which the others can be counted."""
    sets: dict[str, Path] = {}
    for i, folder in enumerate(folders):
        name = str(folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder)
        if groups is None:
            sets[name] = folder
            continue
        kept = work / f"set-{i}"
        kept.mkdir(parents=True)
        found = 0
        for path in sorted(folder.glob("*.yml")):
            doc = yaml.safe_load(path.read_text())
            chosen = [g for g in doc["groups"] if re.search(groups, g["name"])]
            found += len(chosen)
            if chosen:
                (kept / path.name).write_text(yaml.safe_dump({"groups": chosen}, sort_keys=False))
        if not found:
            raise SystemExit(f"ruler_live: no group of {folder} matches --groups {groups!r}")
        sets[f"{name} [groups {groups}]"] = kept
    if unit:
        (work / "unit").mkdir(parents=True)
        (work / "unit" / "unit.yml").write_text(yaml.safe_dump({"groups": [{"name": "unit", "interval": f"{STEP_S}s", "rules": [
            {"record": UNIT_RECORD, "expr": "gpulse_gpu_busy_seconds_total"}]}]}, sort_keys=False))
        sets["unit: one per-GPU series read and recorded"] = work / "unit"
    return sets


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[1024])
    ap.add_argument("--rules", type=Path, action="append",
                    help=f"a folder of rule files, each in its own Prometheus (default {RULES.relative_to(ROOT)})")
    ap.add_argument("--groups", help="only the groups whose name matches this regular expression")
    ap.add_argument("--unit", action="store_true",
                    help="beside them, one rule copying every GPU's busy counter: the unit the costs are counted in")
    ap.add_argument("--warmup", type=float, default=420.0, help="seconds before measuring (default %(default)s)")
    ap.add_argument("--measure", type=float, default=300.0, help="seconds measured (default %(default)s)")
    a = ap.parse_args(argv)
    for gpus in a.gpus:
        with tempfile.TemporaryDirectory(prefix="gpulse-ruler-") as d:
            sets = rule_sets([f.resolve() for f in a.rules or [RULES]], a.groups, a.unit, Path(d) / "sets")
            report(measure(gpus, sets, a.warmup, a.measure, Path(d)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
