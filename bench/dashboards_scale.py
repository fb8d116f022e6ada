#!/usr/bin/env python3
"""Dashboards at scale: every panel query over 4 hours of a 1,024-GPU cluster.

    .venv/bin/python bench/dashboards_scale.py                 # 128 then 1,024 GPUs
    .venv/bin/python bench/dashboards_scale.py --gpus 128 --repeat 3
    .venv/bin/python bench/dashboards_scale.py --gpus 1024 --only "/ GPU heatmap [A] metric=active|busy" \
        --only "/ Nodes [A] metric=active|busy" --compare HEAD~5
    .venv/bin/python bench/dashboards_scale.py --gpus 1024 --keep ...      # prints the kept directory
    .venv/bin/python bench/dashboards_scale.py --gpus 1024 --reuse DIR --compare HEAD~1 --only ...
    .venv/bin/python bench/dashboards_scale.py --gpus 16384 --node-records --only "/ Nodes [A]"   # the overview at fleet size

For each cluster size: synthesise 4 h of gpulse scrapes every 15 s
(bench/lib/dashboards_data.py), load them with `promtool tsdb create-blocks-from
openmetrics`, start the Debian `prometheus` on the blocks, evaluate the shipped
recording rules over the same 4 h with `promtool tsdb create-blocks-from rules`
(one pass per level of rule-on-rule dependency, restarting Prometheus between
passes so the next level sees the previous one), then send every panel target
of every dashboard the way Grafana would for a 1,920-pixel-wide panel over the
4-hour range, once untimed and then several times each, the targets in turn
round by round, and print the median time and response size.
The first size is the baseline the larger one is compared with; the heatmaps
are timed for every colouring, from the raw counters and from the 5m recording
rules ("Cells from"), in both row orders. `--reuse DIR` skips the build and
times the queries on a TSDB kept by `--keep`: the data and records of then, the
dashboards of now (and of `--compare REV`).
"""
from __future__ import annotations

import argparse
import json
import math
import os
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
sys.path.insert(0, str(ROOT / "grafana"))
sys.path.insert(0, str(ROOT))          # bench.lib, testing/

from bench.lib.proc import cpu_seconds, free_port  # noqa: E402
from gpulse.config import parse_duration  # noqa: E402
from gpulse.rulenames import NODE_CELLS_15S  # noqa: E402
from bench.lib.dashboards_data import GPUS_PER_NODE, STEP_S, Cluster  # noqa: E402
from testing.grafana_queries import (choices, fixed_values, format_value,  # noqa: E402
                                     panel_queries, substitute, variable_defaults)

BLOCK_S = 7200
WINDOW_S = 3600
SCRAPE = "15s"
WIDTH_PX = 1920
MB = 1e6

VARIABLES = {
    "gpulse-cluster-heatmap": {"cluster": "$__all", "node": "$__all", "workload": "$__all"},
    "gpulse-training-workload": {"cluster": "$__all", "workload": "llm-pretrain"},
    "gpulse-node-detail": {"cluster": "$__all", "node": "gpu-node-000", "gpu": "$__all"},
    "gpulse-exporter-health": {"cluster": "$__all", "job": "$__all", "instance": "$__all"},
}
HEATMAP = "GPU cluster heatmap / GPU heatmap [A]"
# variables whose every choice is timed (colouring, where cells come from, row order)
SWITCHES = ("metric", "cells", "order")


def need(binary: str) -> str:
    path = shutil.which(binary)
    if not path:
        raise SystemExit(f"dashboards_scale: {binary} not found on PATH (Debian package prometheus)")
    return path


def run(cmd: list[str]) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"dashboards_scale: {' '.join(cmd[:4])} failed: {(p.stderr or p.stdout).strip()[-500:]}")
    return p.stdout


class Prometheus:
    def __init__(self, data: Path, workdir: Path, retention: str = "30d", flags: tuple[str, ...] = ()):
        self.data, self.workdir, self.proc, self.retention, self.flags = data, workdir, None, retention, flags
        (workdir / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")

    def start(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [need("prometheus"), f"--config.file={self.workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.data}", f"--web.listen-address=127.0.0.1:{port}",
             f"--storage.tsdb.retention.time={self.retention}", "--log.level=error",
             # 2h blocks stay as they are: no compaction running while queries are timed
             "--storage.tsdb.min-block-duration=2h", "--storage.tsdb.max-block-duration=2h", *self.flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if requests.get(self.url + "/-/ready", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if self.proc.poll() is not None:
                raise SystemExit(f"dashboards_scale: prometheus exited: {self.proc.stderr.read()[-500:]}")
            time.sleep(0.2)
        raise SystemExit("dashboards_scale: prometheus not ready after 120 s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)


def rule_levels() -> list[list[tuple[str, dict]]]:
    """The shipped recording rules grouped by dependency depth: level 0 reads
    only scraped series, level n reads rules of level < n."""
    rules: list[tuple[str, dict]] = []
    for f in sorted((ROOT / "prometheus" / "rules").glob("*.yml")):
        for g in yaml.safe_load(f.read_text())["groups"]:
            rules += [(g.get("interval", ""), r) for r in g["rules"] if "record" in r]
    names = {r["record"] for _, r in rules}
    level: dict[str, int] = {}
    while len(level) < len(rules):
        for _, r in rules:
            deps = [n for n in names if n in r["expr"] and n != r["record"]]
            if r["record"] not in level and all(d in level for d in deps):
                level[r["record"]] = 1 + max((level[d] for d in deps), default=-1)
    out: list[list[tuple[str, dict]]] = [[] for _ in range(max(level.values()) + 1)]
    for interval, r in rules:
        out[level[r["record"]]].append((interval, r))
    return out


EVAL_INTERVAL = "15s"   # what promtool evaluates a group without an interval at (the example config's)


def rules_start(start: int, levels: list[list[tuple[str, dict]]]) -> int:
    """Where promtool's rule backfill must start for every group of `levels` to record
    from `start` on. promtool evaluates each group block by block (2 h blocks), from the
    group's first evaluation inside each (aligned by a hash of the group and its file),
    and stops the group at the first block that holds none: a range starting less than
    one group interval before a block boundary records nothing for that group. Started
    two intervals before the boundary, the first block holds an evaluation of every
    group; those before the data record nothing. One loss remains, promtool's own: it
    ends each block's range query on a whole second, so an evaluation in the last second
    before a block boundary (1 group in `interval` seconds) is never made."""
    longest = max((parse_duration(iv or EVAL_INTERVAL) for level in levels for iv, _ in level),
                  default=parse_duration(EVAL_INTERVAL))
    boundary = (start // BLOCK_S + 1) * BLOCK_S
    return min(start, boundary - math.ceil(2 * longest))


def backfill_rules(prom: Prometheus, start: int, end: int, work: Path,
                   levels: list[list[tuple[str, dict]]] | None = None) -> None:
    """Record the rules' results over [start, end] into `prom`'s TSDB with promtool's
    rule backfill, level by level (each level reads what the ones before recorded)."""
    levels = rule_levels() if levels is None else levels
    start = rules_start(start, levels)
    for i, rules in enumerate(levels):
        groups: dict[str, list[dict]] = {}
        for interval, r in rules:
            groups.setdefault(interval, []).append(r)
        doc = {"groups": [dict(name=f"level{i}-{n}", rules=rs, **({"interval": iv} if iv else {}))
                          for n, (iv, rs) in enumerate(groups.items())]}
        rules_file = work / f"rules-{i}.yml"
        rules_file.write_text(yaml.safe_dump(doc, sort_keys=False))
        out = work / f"rules-{i}"
        # groups without an interval use the example config's evaluation_interval
        run([need("promtool"), "tsdb", "create-blocks-from", "rules", f"--start={start}", f"--end={end}",
             f"--url={prom.url}", f"--output-dir={out}", f"--eval-interval={EVAL_INTERVAL}", str(rules_file)])
        prom.stop()
        if not out.is_dir():
            raise SystemExit(f"dashboards_scale: promtool wrote no block for rule level {i} ({rules_file}): "
                             f"no rule of it gave a sample from {prom.url} over {start}..{end}")
        for block in out.iterdir():
            shutil.move(str(block), prom.data / block.name)
        prom.start()


def wait_loaded(proc: subprocess.Popen, om: Path) -> None:
    _, err = proc.communicate()
    om.unlink(missing_ok=True)
    if proc.returncode != 0:
        raise SystemExit(f"dashboards_scale: promtool create-blocks-from openmetrics failed: {err.strip()[-500:]}")


def load_windows(write, start: int, end: int, data: Path, scratch: Path, tag: str) -> list:
    """Backfill [start, end) into the TSDB at `data`: write(path, w0, w1) writes the
    OpenMetrics of one hour, returning anything; the list of what it returned. One
    file per hour of data, promtool loading one while Python writes the next (two
    cores); hour files never straddle a 2 h block, so each becomes one block and no
    two blocks overlap."""
    out = []
    loading: tuple[subprocess.Popen, Path] | None = None
    try:
        for w0 in range(start, end, WINDOW_S):
            om = scratch / f"{tag}-{w0}.om"
            out.append(write(om, w0, w0 + WINDOW_S))
            if loading:
                wait_loaded(*loading)
            loading = (subprocess.Popen([need("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(om),
                                         str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True), om)
        if loading:
            wait_loaded(*loading)
            loading = None
    finally:
        if loading:
            loading[0].kill()
            loading[0].wait()
            loading[1].unlink(missing_ok=True)
    return out


NODE_RECORD = NODE_CELLS_15S


def node_record_rules() -> list[list[tuple[str, dict]]]:
    """The shipped rules that read the node cell sums alone (the nodes overview's
    worst-first rank), as rule_levels gives them."""
    return [[(iv, r) for iv, r in level if NODE_RECORD in r["expr"] and "gpulse_gpu_" not in
             r["expr"].replace(NODE_RECORD, "")] for level in rule_levels()][1:]


def write_node_records(om: Path, nodes: int, w0: int, w1: int) -> tuple[int, int]:
    """The nodes overview's data alone, one hour of it: each node's 15 s cell sums
    (NODE_RECORD, one series per `signal`) as gpulse.gpu.cells15s records them for 8
    GPUs, each node at its own share of work with a stall column every 10 minutes.
    (series, samples)."""
    stamps = range(w0, w1, STEP_S)
    with om.open("w") as f:
        f.write(f"# TYPE {NODE_RECORD} gauge\n")
        for n in range(nodes):
            share = 0.2 + 0.75 * ((n * 7919) % 1000) / 1000
            for signal, k in (("sampled", 0.0), ("active|busy", 1.0), ("busy", 1.1), ("active", 0.9)):
                head = f'{NODE_RECORD}{{node="gpu-node-{n:04d}",signal="{signal}"}} '
                f.write("".join(
                    f"{head}{GPUS_PER_NODE * STEP_S * (1.0 if not k else min(1.0, share * k) * (0.1 if t % 600 == 0 else 1.0)):.6g} {t}\n"
                    for t in stamps))
        f.write("# EOF\n")
    return nodes * 4, nodes * 4 * len(stamps)


def build(gpus: int, hours: float, work: Path, scratch: Path,
          node_records: bool = False) -> tuple[Prometheus, int, int, int]:
    nodes = math.ceil(gpus / GPUS_PER_NODE)
    cluster = Cluster(nodes)
    end = int(time.time()) // BLOCK_S * BLOCK_S
    start = end - int(hours * 3600)
    data = work / "data"
    t0 = time.monotonic()
    if node_records:
        series = max(n for n, _ in load_windows(lambda om, w0, w1: write_node_records(om, nodes, w0, w1), start, end,
                                                data, scratch, f"nodes-{nodes}"))
        print(f"  {nodes} nodes: {series} node cell records, {hours:g} h backfilled in "
              f"{time.monotonic() - t0:.0f} s", flush=True)
        prom = Prometheus(data, work)
        prom.start()
        t0 = time.monotonic()
        backfill_rules(prom, start, end, work, [level for level in node_record_rules() if level])
        print(f"  the rules that read them backfilled in {time.monotonic() - t0:.0f} s", flush=True)
        return prom, start, end, series
    series = max(n for n, _ in load_windows(lambda om, w0, w1: cluster.write_window(om, w0, w1), start, end,
                                            data, scratch, f"gpulse-{gpus}"))
    print(f"  {gpus} GPUs: {series} scraped series, {hours:g} h backfilled in {time.monotonic() - t0:.0f} s",
          flush=True)
    prom = Prometheus(data, work)
    prom.start()
    t0 = time.monotonic()
    backfill_rules(prom, start, end, work)
    print(f"  recording rules backfilled in {time.monotonic() - t0:.0f} s", flush=True)
    return prom, start, end, series


def dashboard(uid: str, rev: str = "") -> dict:
    """A generated dashboard, from the working tree or from git revision `rev`."""
    path = f"grafana/dashboards/{uid}.json"
    if not rev:
        return json.loads((ROOT / path).read_text())
    p = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"dashboards_scale: --compare {rev}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def requests_for(uid: str, range_ms: int, variables: dict | None = None,
                 rev: str = "") -> list[tuple[str, str, bool, float, int]]:
    """(where, expr, instant, step seconds, range seconds) for every target, as
    Grafana sends them (a panel's relative time, e.g. 30m, shortens its range);
    `variables` override VARIABLES[uid]."""
    d = dashboard(uid, rev)
    defs = variable_defaults(d)
    values = {**VARIABLES[uid], **(variables or {})}
    chosen = {**fixed_values(d), **{k: format_value(defs[k], v) for k, v in values.items()}}
    out = []
    for q in panel_queries(d):
        timing = q.timing(range_ms, width_px=WIDTH_PX, scrape_interval=SCRAPE)
        combos = [{}]
        for name in SWITCHES:
            if "${" + name + "}" in q.expr:
                combos = [dict(c, **{name: v}) for c in combos for v in choices(d, name)]
        for combo in combos:
            out.append((f"({rev}) " * bool(rev) + q.where + "".join(f" {k}={v}" for k, v in combo.items()),
                        substitute(q.expr, timing, dict(chosen, **combo)),
                        q.instant, timing.step_ms / 1000, timing.range_ms // 1000))
    return out


def timed(prom: Prometheus, expr: str, instant: bool, step: float, start: int, end: int) -> tuple[float, int, int, float]:
    """(seconds, response bytes, series, Prometheus CPU seconds) of one run of
    one query over [start, end]. The CPU time is what the query cost Prometheus,
    whatever else the machine was doing meanwhile."""
    if instant:
        path, params = "query", {"query": expr, "time": end}
    else:
        # Grafana aligns the range to the step
        path, params = "query_range", {"query": expr, "start": start // step * step, "end": end // step * step,
                                       "step": step}
    c0 = cpu_seconds(prom.proc.pid)
    t0 = time.perf_counter()
    r = requests.post(f"{prom.url}/api/v1/{path}", data=params, timeout=120)
    wall, cpu = time.perf_counter() - t0, cpu_seconds(prom.proc.pid) - c0
    body = r.json()
    if body.get("status") != "success":
        raise SystemExit(f"dashboards_scale: query failed: {body.get('error')}: {expr[:200]}")
    return wall, len(r.content), len(body["data"]["result"]), cpu


def timed_in_turn(prom: Prometheus, targets: dict[str, tuple[str, bool, float, int, int]],
                  repeat: int) -> dict[str, tuple[float, int, int, float]]:
    """where -> (median seconds, response bytes, series, median Prometheus CPU
    seconds) of each target (expr, instant, step, start, end): one untimed run
    of each first (its chunks read from disk), then `repeat` rounds with every
    target once in each, so a load that changes meanwhile weighs on all of them
    alike and `--compare` sets two revisions side by side."""
    for expr, instant, step, start, end in targets.values():
        timed(prom, expr, instant, step, start, end)
    runs: dict[str, list[tuple[float, int, int, float]]] = {where: [] for where in targets}
    for _ in range(repeat):
        for where, (expr, instant, step, start, end) in targets.items():
            runs[where].append(timed(prom, expr, instant, step, start, end))
    return {where: (statistics.median(r[0] for r in rs), rs[-1][1], rs[-1][2], statistics.median(r[3] for r in rs))
            for where, rs in runs.items()}


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def reuse(work: Path) -> tuple[Prometheus, int, int, int]:
    """Prometheus on a TSDB kept by --keep (scrapes and recording rules already
    in it); the range from its blocks, the scraped series counted."""
    metas = [json.loads(m.read_text()) for m in (work / "data").glob("*/meta.json")]
    if not metas:
        raise SystemExit(f"dashboards_scale: --reuse {work}: no TSDB blocks under {work / 'data'}")
    start, end = min(m["minTime"] for m in metas) // 1000, max(m["maxTime"] for m in metas) // 1000
    prom = Prometheus(work / "data", work)
    prom.start()
    # none in a store of --node-records (records only): count() of nothing is no sample
    counted = requests.get(f"{prom.url}/api/v1/query", timeout=120, params={
        "query": 'count({__name__=~"[^:]+"})', "time": end - 60}).json()["data"]["result"]
    scraped = int(float(counted[0]["value"][1])) if counted else 0
    print(f"  reusing {work}: {scraped} scraped series, {(end - start) / 3600:g} h", flush=True)
    return prom, start, end, scraped


def measure(gpus: int, args, scratch: Path) -> dict:
    work = Path(args.reuse) if args.reuse else Path(tempfile.mkdtemp(prefix=f"gpulse-dash-{gpus}-"))
    prom = None
    try:
        prom, start, end, scraped = reuse(work) if args.reuse else build(gpus, args.hours, work, scratch,
                                                                         args.node_records)
        range_ms = (end - start) * 1000
        total_series = int(float(requests.get(f"{prom.url}/api/v1/query", timeout=60, params={
            "query": 'count({__name__=~".+"})', "time": end - 60}).json()["data"]["result"][0]["value"][1]))
        targets = {}
        load_before = os.getloadavg()[0]
        for rev in ("", *([args.compare] if args.compare else [])):
            for uid in VARIABLES:
                for where, expr, instant, step, span in requests_for(uid, range_ms, rev=rev):
                    if args.only and not any(o in where for o in args.only):
                        continue
                    targets[where] = (expr, instant, step, end - span, end)
        results = timed_in_turn(prom, targets, args.repeat)
        return {"gpus": gpus, "scraped": scraped, "series": total_series, "bytes": du(work / "data"),
                "results": results, "load": (load_before, os.getloadavg()[0])}
    finally:
        if prom:
            prom.stop()
        if args.keep or args.reuse:
            print(f"  kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def report(runs: list[dict], compare: dict[str, str]) -> None:
    base, top = runs[0], runs[-1]
    print()
    for r in runs:
        print(f"{r['gpus']:>5} GPUs: {r['series']} series ({r['scraped']} scraped + rules), "
              f"{r['series'] / r['gpus']:.1f} series/GPU, TSDB {r['bytes'] / MB:.1f} MB = "
              f"{r['bytes'] / r['gpus'] / 1024:.0f} KiB/GPU for the range; "
              f"load average {r['load'][0]:.1f} -> {r['load'][1]:.1f} while timing")
    print()
    head = f"{'query':<118} " + " ".join(f"{str(r['gpus']) + ' GPUs':>22}" for r in runs)
    if len(runs) > 1:
        head += f" {'ratio':>6}"
    print(head)
    print(f"{'':<118} " + " ".join(f"{'wall s  cpu s   MB':>22}" for _ in runs))
    worst = 0.0
    for where in top["results"]:
        cells = []
        for r in runs:
            t, size, _, cpu = r["results"][where]
            cells.append(f"{t:6.3f} {cpu:6.3f} {size / MB:6.2f}")
        line = f"{where[:118]:<118} " + " ".join(f"{c:>22}" for c in cells)
        if len(runs) > 1:
            line += f" {top['results'][where][0] / max(base['results'][where][0], 1e-6):6.1f}"
        if not where.startswith("(raw"):
            worst = max(worst, top["results"][where][0])
        print(line)
    # each "Cells from" choice against the counters (the exact default), same target, same run
    # each recorded "Cells from" choice against the raw counters, same target, same run
    for k in top["results"]:
        for cells in ("increase15s", "cells1m"):
            base_k = k.replace(f"cells={cells}", "cells=seconds_total")
            if f"cells={cells}" in k and base_k in top["results"]:
                (t, _, _, cpu), (t0, _, _, cpu0) = top["results"][k], top["results"][base_k]
                print(f"{cells} / counters at {top['gpus']} GPUs: {t:.3f} / {t0:.3f} s wall, {cpu:.3f} / "
                      f"{cpu0:.3f} s CPU ({cpu0 / max(cpu, 1e-6):.1f}x less CPU): {k[:90]}")
    # each panel's default choice now against its default at --compare REV
    for k, prev in compare.items():
        if k in top["results"] and prev in top["results"]:
            (t, _, _, cpu), (t0, _, _, cpu0) = top["results"][k], top["results"][prev]
            print(f"default now / before: {t:.3f} / {t0:.3f} s wall, {cpu:.3f} / {cpu0:.3f} s CPU: {k[:90]}")
    heat = [v for k, v in top["results"].items() if k.startswith(HEATMAP)]
    print()
    print(f"slowest dashboard panel at {top['gpus']} GPUs: {worst:.3f} s median (target 1 s)")
    if heat:    # --only may leave the heatmap out
        print(f"heatmap at {top['gpus']} GPUs: {max(h[1] for h in heat) / MB:.1f} MB, "
              f"{heat[0][2]} rows (target 20 MB)")


def default_pairs(rev: str) -> dict[str, str]:
    """Target name with each dashboard's default switches now -> the same target
    with its defaults at `rev` (the names of the timed results)."""
    def defaults(uid: str, rev: str) -> str:
        d = dashboard(uid, rev)
        cur = {v["name"]: v["current"]["value"] for v in d["templating"]["list"] if v["name"] in SWITCHES}
        return cur
    out = {}
    for uid in VARIABLES:
        now, then = defaults(uid, ""), defaults(uid, rev)
        for q in panel_queries(dashboard(uid)):
            used = [n for n in SWITCHES if "${" + n + "}" in q.expr]
            if used:
                out[q.where + "".join(f" {n}={now[n]}" for n in used)] = \
                    f"({rev}) " + q.where + "".join(f" {n}={then[n]}" for n in used)
    return out


def sizes_and_hours(args, prog: str) -> list[int]:
    """The --gpus list, after checking it and --hours (whole hours: see load_windows)."""
    try:
        sizes = [int(x) for x in args.gpus.split(",")]
    except ValueError:
        raise SystemExit(f"{prog}: --gpus: expected numbers like 128,1024, got {args.gpus!r}") from None
    if args.hours <= 0 or args.hours * 3600 % WINDOW_S:
        raise SystemExit(f"{prog}: --hours must be a whole number of hours, got {args.hours:g}")
    return sizes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="128,1024", help="cluster sizes, the first is the baseline (default %(default)s)")
    ap.add_argument("--hours", type=float, default=4.0, help="time range backfilled and queried (default %(default)s)")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each query; the median is reported")
    ap.add_argument("--keep", action="store_true", help="keep the TSDB directories")
    ap.add_argument("--reuse", default="", metavar="DIR",
                    help="time the queries on a TSDB kept by --keep (one size: --gpus names it) instead of building one")
    ap.add_argument("--only", action="append", default=[], metavar="TEXT",
                    help="only the targets whose name (dashboard / panel [ref] choices) has TEXT; repeatable")
    ap.add_argument("--compare", default="", metavar="REV",
                    help="also time the dashboards as generated at git revision REV, on the same data")
    ap.add_argument("--node-records", action="store_true",
                    help="load only the nodes overview's data (each node's 15 s cell sums, --gpus / 8 nodes, and the worst-first rank the shipped rules record from them), not "
                    "every series: the overview at fleet size in minutes; give --only for its targets")
    args = ap.parse_args(argv)
    sizes = sizes_and_hours(args, "dashboards_scale")
    if args.node_records and not args.only:
        raise SystemExit("dashboards_scale: --node-records holds the nodes overview's data only: give --only "
                         "for its targets (e.g. --only '/ Nodes [A] metric=active|busy cells=increase15s')")
    if args.reuse and len(sizes) != 1:
        raise SystemExit("dashboards_scale: --reuse times one kept TSDB: give its size alone in --gpus")
    scratch = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path(tempfile.gettempdir())
    print(f"dashboards at scale: {args.hours:g} h at a {SCRAPE} scrape interval, queries as Grafana sends them "
          f"for a {WIDTH_PX}-px panel, median of {args.repeat}", flush=True)
    runs = [measure(g, args, scratch) for g in sizes]
    report(runs, default_pairs(args.compare) if args.compare else {})
    return 0


if __name__ == "__main__":
    sys.exit(main())
