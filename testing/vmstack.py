"""A VictoriaMetrics stack from the Debian `victoria-metrics` package, for tests and
bench/vm_timing.py: vmagent scrapes gpulse targets into victoria-metrics, vmalert
evaluates rule files against it (writing recording rules and ALERTS back, reading
alert state from it) and notifies an Alertmanager (`VictoriaMetrics`); and the
exporters of the end-to-end test scraped by it and, side by side, by Prometheus, each
ruler with its own Alertmanager and webhook (`Stack`). Everything on free loopback
ports with temporary data directories.

Settings a test changes from the defaults, and why:
- 1 s scrape and evaluation interval, as the Prometheus end-to-end test uses;
- `-search.latencyOffset=1s` (default 30 s): VictoriaMetrics hides the newest 30 s
  of samples from queries; with 6-9 s hold times nothing would fire for half a minute.
  bench/vm_timing.py measures the default too;
- a live stack asks victoria-metrics to flush every second (`/internal/force_flush`;
  `flush=False` does not, as bench/vm_timing.py measures a deployed one by default):
  version 1.79 makes a new series searchable 7-9 s after it is written (a new value of
  a known series in 1 s), so each level of the chained rules, whose records are new
  series, would start ~10 s after the one it reads.
"""
from __future__ import annotations

import math
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import requests
import yaml

from testing import ROOT
from testing.daemons import Daemon, Gpulse, free_port, require_binary, require_data, wait_http
from testing.dashstack import DCGM_NODE, STALL_JOB, STALL_NODE, STRAGGLER_JOB, STRAGGLER_NODE, job_map
from testing.dashstack import Stack as PrometheusStack
from testing.fakedcgm import NodeCapture, node_exporter
from testing.promutil import Receiver, alertmanager_config, prometheus_config


class VictoriaMetrics:
    """victoria-metrics + vmagent + vmalert. `url` serves the Prometheus query API.
    Without targets no vmagent runs, without rules no vmalert: victoria-metrics alone,
    for series imported with their timestamps (`import_families`) and rules
    evaluated over them in virtual time (`replay`)."""

    def __init__(self, tmp: Path, targets: list[str] | None, rules_dir: Path | None, alertmanager_url: str = "",
                 external_labels: dict[str, str] | None = None, latency_offset: str = "1s",
                 interval: str = "1s", flush: bool = True):
        vm_bin = require_binary("victoria-metrics")
        self.tmp, self.external_labels = tmp, external_labels or {}
        self.daemons: list[Daemon] = []
        labels = [f"-external.label={k}={v}" for k, v in self.external_labels.items()]
        self._store_argv = lambda port: [
            vm_bin, f"-storageDataPath={tmp / 'vm-data'}", f"-httpListenAddr=127.0.0.1:{port}",
            "-retentionPeriod=1d", f"-search.latencyOffset={latency_offset}", "-loggerLevel=WARN",
            # a replay level tried again writes its records again, at the same instants,
            # and VictoriaMetrics' response cache assumes the past never changes, which
            # a backfilled store written level by level breaks
            *(["-dedup.minScrapeInterval=1ms", "-search.disableCache"] if targets is None else []),
        ]
        self._backfilled = targets is None
        self._stopping = threading.Event()
        try:
            vm_port = self._start(self._store_argv, tmp / "victoria-metrics.log")
            self.url = f"http://127.0.0.1:{vm_port}"
            if targets is None:
                return
            if flush:
                threading.Thread(target=self._flushing, name="vm-flush", daemon=True).start()
            vmagent_bin, vmalert_bin = require_binary("vmagent"), require_binary("vmalert")
            scrape = {"global": {"scrape_interval": interval, "scrape_timeout": "900ms"},
                      "scrape_configs": [{"job_name": "gpulse", "static_configs": [{"targets": targets}]}]}
            (tmp / "scrape.yml").write_text(yaml.safe_dump(scrape))
            self._start(lambda port: [
                vmagent_bin, f"-promscrape.config={tmp / 'scrape.yml'}", f"-httpListenAddr=127.0.0.1:{port}",
                f"-remoteWrite.url={self.url}/api/v1/write", f"-remoteWrite.tmpDataPath={tmp / 'vmagent-data'}",
                "-loggerLevel=WARN",
            ], tmp / "vmagent.log")
            alert_port = self._start(lambda port: [
                vmalert_bin, f"-rule={rules_dir}/*.yml", f"-datasource.url={self.url}",
                f"-remoteWrite.url={self.url}", f"-remoteRead.url={self.url}",
                f"-notifier.url={alertmanager_url}", f"-evaluationInterval={interval}",
                f"-httpListenAddr=127.0.0.1:{port}", "-loggerLevel=WARN", *labels,
            ], tmp / "vmalert.log")
            self.vmalert_url = f"http://127.0.0.1:{alert_port}"
        except BaseException:
            self.stop()
            raise

    def _start(self, argv: Callable[[int], list[str]], log: Path) -> int:
        """Start a daemon on a free port (testing.daemons.free_port: reserved for it)
        and wait for /health; its port."""
        port = free_port()
        daemon = Daemon(argv(port), log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and daemon.proc.poll() is None:
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    self.daemons.append(daemon)
                    return port
            except requests.RequestException:
                pass
            time.sleep(0.1)
        daemon.stop()
        raise AssertionError(f"{daemon.proc.args[0]} did not start:\n{daemon.tail()}")

    # a Prometheus HTTP API call (POST, as Grafana sends them); the result list
    api = PrometheusStack.api

    def import_families(self, families, **labels: str) -> None:
        """Metric families whose samples carry their timestamps (`promutil.scrape_run`),
        each series with `labels` added as a scrape adds job and instance, into
        victoria-metrics."""
        def text(v: str) -> str:
            return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

        lines = []
        for fam in families:
            for s in fam.samples:
                sel = ",".join(f'{k}="{text(v)}"' for k, v in {**labels, **s.labels}.items())
                v = float(s.value)
                value = "NaN" if v != v else "+Inf" if v == float("inf") else "-Inf" if v == -float("inf") else repr(v)
                lines.append(f"{s.name}{{{sel}}} {value} {round(s.timestamp * 1000)}")
        r = requests.post(self.url + "/api/v1/import/prometheus", data="\n".join(lines) + "\n", timeout=120)
        assert r.status_code == 204, r.text
        self.flush()

    def replay(self, rules: list[Path], start: float, end: float, interval: str = "1s",
               attempts: int = 3) -> None:
        """`vmalert -replay`: the rules evaluated over [start, end] as vmalert would have
        evaluated them then, each group at its own interval (or `interval`), the
        results written into victoria-metrics (alerts as `ALERTS`); no wall-clock wait for
        a verdict. A replay evaluates each rule over the whole range before the next,
        and what it writes reaches the store asynchronously (vmalert's remote-write
        queue, then a flush), so a rule reading another's record in the same replay may
        see none, part or all of it. The rules are therefore replayed level by level
        (`rule_levels`: a rule's level is one more than the highest of the records and
        alerts it reads), one `vmalert -replay` per level, each on a store started after
        the level before it was written and checked whole: every sample vmalert says it
        imported is stored. A level whose remote write gave up (vmalert drops a batch
        after five failed sends, exiting 0) is replayed again, up to `attempts` times,
        then the replay fails naming it, instead of leaving the panels that read it
        empty. A store started afresh also forgets which series a label filter matched,
        which victoria-metrics otherwise caches across a record's first write. Alerting
        rules are replayed without their annotations: vmalert refuses `query` templates in
        replay mode, and `ALERTS` carries none."""
        def iso(t: float) -> str:
            return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))

        assert self._backfilled, "replay() is for a backfilled store, with no scraper or ruler writing to it"
        docs = {f.name: yaml.safe_load(f.read_text()) for f in rules}
        levels = rule_levels(docs.values())
        written: set[str] = set()
        imported = 0
        for level in range(1, max(levels.values(), default=0) + 1):
            folder = self.tmp / f"replayed-rules-{level}"
            folder.mkdir(exist_ok=True)
            for name, doc in docs.items():
                groups = []
                for g in doc.get("groups", []):
                    picked = [{k: v for k, v in r.items() if k != "annotations"}
                              for r in g["rules"] if levels[_rule_name(r)] == level]
                    if picked:
                        groups.append({**g, "rules": picked})
                if groups:
                    (folder / name).write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
            written |= {n for doc in docs.values() for g in doc.get("groups", []) for r in g["rules"]
                        if levels[_rule_name(r)] == level for n in _series_names(r)}
            before, complaints = imported, []
            for attempt in range(attempts):
                if level > 1 or attempt:
                    self._restart_store()
                log = self.tmp / f"vmalert-replay-{level}-{attempt}.log"
                with log.open("w") as out:
                    p = subprocess.run([require_binary("vmalert"), f"-rule={folder}/*.yml",
                                        f"-datasource.url={self.url}", f"-remoteWrite.url={self.url}",
                                        f"-replay.timeFrom={iso(start)}", f"-replay.timeTo={iso(end)}",
                                        "-replay.disableProgressBar", "-replay.rulesDelay=0s",
                                        f"-evaluationInterval={interval}", "-datasource.queryStep=0",
                                        *(f"-external.label={k}={v}" for k, v in self.external_labels.items())],
                                       stdout=out, stderr=subprocess.STDOUT, timeout=300)
                text = log.read_text()
                assert p.returncode == 0, f"vmalert -replay of level {level} failed:\n{text[-2000:]}"
                m = re.search(r"replay finished! Imported (\d+) samples", text)
                assert m, f"vmalert -replay of level {level} did not say what it imported:\n{text[-2000:]}"
                imported = before + int(m.group(1))
                self.flush()
                # an hour either side: a range query's steps are aligned to its step, so
                # a 1m group's first instant can fall before `start`
                stored = sum(self.samples(sorted(written), start - 3600, end + 3600).values())
                if stored == imported:
                    break
                # the same samples again are stored once (-dedup.minScrapeInterval)
                complaints.append(f"attempt {attempt + 1}: {imported:.0f} samples imported through level {level}, "
                                  f"{stored:.0f} stored; vmalert said:\n" + "\n".join(
                                      x for x in text.splitlines() if re.search(r"\t(warn|error)\t", x))[-1500:])
            else:
                raise AssertionError("vmalert -replay lost samples on their way to victoria-metrics:\n"
                                     + "\n".join(complaints))

    def _restart_store(self) -> None:
        """victoria-metrics stopped (its data on disk) and started again on the same
        data. It caches which series a label filter matched, and a filter asked before
        a record's first write can go on answering "none" after it: seen under load, a
        whole level of records reading records missing after passes that each added
        nothing, while the same store, started afresh, gave the level in one pass. A
        pass on a store started after the pass before it sees all that pass wrote."""
        self.flush()
        store = self.daemons.pop(0)
        store.proc.terminate()           # victoria-metrics writes its in-memory parts on SIGTERM
        try:
            store.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            store.proc.kill()
            store.proc.wait()
            raise AssertionError(f"victoria-metrics did not stop within 300 s:\n{store.tail()}") from None
        store.fh.close()
        port = self._start(self._store_argv, self.tmp / "victoria-metrics.log")
        self.daemons.insert(0, self.daemons.pop())
        self.url = f"http://127.0.0.1:{port}"

    def samples(self, names: list[str], start: float, end: float) -> dict[str, float]:
        """{record name: its samples in [start, end]} (deduplicated as stored)."""
        selector = '{__name__=~"%s"}' % "|".join(re.escape(n) for n in names)
        query = f"sum by (__name__) (count_over_time({selector}[{max(1, math.ceil(end - start))}s]) keep_metric_names)"
        return {x["metric"]["__name__"]: float(x["value"][1]) for x in self.api("query", query=query, time=end)}

    def flush(self) -> None:
        """What was written is searchable from now on."""
        requests.get(self.url + "/internal/force_flush", timeout=60).raise_for_status()

    def _flushing(self) -> None:
        """Flush every second until stopped (the module doc says why)."""
        while not self._stopping.wait(1.0):
            try:
                self.flush()
            except requests.RequestException:
                pass        # restarting or stopping: the next second tries again

    def alerts(self) -> list[dict]:
        """vmalert's active alerts (pending and firing), Prometheus' /api/v1/alerts shape."""
        r = requests.get(self.vmalert_url + "/api/v1/alerts", timeout=5)
        r.raise_for_status()
        return r.json()["data"]["alerts"] or []     # vmalert 1.79 answers null for none

    def evaluated(self, alert: str) -> set[str]:
        """When vmalert last evaluated the groups holding rules named `alert` (RFC 3339
        text, one per group): a caller polling it counts evaluations, not seconds."""
        r = requests.get(self.vmalert_url + "/api/v1/rules", timeout=5)
        r.raise_for_status()
        return {g["lastEvaluation"] for g in r.json()["data"]["groups"] if any(x["name"] == alert for x in g["rules"])}

    def logs(self) -> str:
        return "\n".join(f"--- {d.log.name}\n{d.tail()}" for d in self.daemons)

    def stop(self) -> None:
        self._stopping.set()
        for d in reversed(self.daemons):
            d.stop()


def _rule_name(rule: dict) -> str:
    return rule.get("record") or f'ALERTS{{alertname="{rule["alert"]}"}}'


def _series_names(rule: dict) -> set[str]:
    """The metrics a rule writes in a replay: its record, or an alerting rule's `ALERTS`
    and `ALERTS_FOR_STATE`."""
    return {rule["record"]} if "record" in rule else {"ALERTS", "ALERTS_FOR_STATE"}


def rule_levels(docs) -> dict[str, int]:
    """{record, or `ALERTS{alertname="…"}` for an alerting rule: its level}: 1 for a rule
    that reads only scraped series, else one more than the highest level among the
    records and alerts its expression reads."""
    exprs: dict[str, list[str]] = {}
    for doc in docs:
        for g in doc.get("groups", []):
            for r in g["rules"]:
                exprs.setdefault(_rule_name(r), []).append(r["expr"])
    names = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")

    def reads(expr: str) -> set[str]:
        alerts = {f'ALERTS{{alertname="{a}"}}' for a in re.findall(r'ALERTS\{[^}]*alertname="([^"]+)"', expr)}
        return ({n for n in names.findall(expr) if n in exprs} | alerts) & exprs.keys()

    levels: dict[str, int] = {}

    def level(name: str, path: tuple[str, ...] = ()) -> int:
        if name not in levels:
            assert name not in path, f"rules read each other in a cycle: {' -> '.join(path + (name,))}"
            levels[name] = 1 + max((level(d, path + (name,)) for e in exprs[name] for d in reads(e) - {name}),
                                   default=0)
        return levels[name]

    for name in exprs:
        level(name)
    return levels


def checked_live(uid: str, where: str) -> bool:
    """The dashboard targets the end-to-end test checks on the live stack; the others are
    checked on series recorded in virtual time and rules replayed over them
    (tests/e2e/test_victoriametrics_dashboards.py). Live: the exporter-health dashboard,
    which reads what only a running exporter and its scrapes have (`up`, scrape
    durations, the sample loop's histogram)."""
    return uid == "gpulse-exporter-health"


RULES = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))


TOOLS = ROOT / "prometheus" / "tools"


IMBALANCE, BALANCED = "e2e-imbalance", "e2e-balanced"


ALERT_WAIT_S = 180     # hold times are 6-9 s; the margin is for a loaded 2-core machine


def rule_dirs(tmp) -> tuple[Path, Path]:
    """The shipped rules with hold times scaled by 0.01 (for Prometheus), and those
    as the vmalert variant (for vmalert)."""
    short, out = tmp / "rules-short", tmp / "rules-vmalert"
    for tool, args in (("shorten_for.py", ["--factor", "0.01", "--out", str(short), *map(str, RULES)]),
                       ("variants.py", ["--variant", "vmalert", "--out", str(out)])):
        if tool == "variants.py":
            args += sorted(map(str, short.glob("*.yml")))
        r = subprocess.run([sys.executable, str(TOOLS / tool), *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    return short, out


def alertmanager(tmp: Path, name: str, receiver: Receiver) -> tuple[Daemon, str]:
    """The example Alertmanager routing without its inhibit rules: inhibition depends
    on which of two alerts arrived first, a race between the rulers that says nothing
    about the rules. tests/e2e/test_alerting_e2e.py covers the routing as shipped."""
    binary = require_binary("prometheus-alertmanager")
    port = free_port()
    config = alertmanager_config(receiver.url)
    config.pop("inhibit_rules", None)
    (tmp / f"{name}.yml").write_text(yaml.safe_dump(config))
    d = Daemon([binary, f"--config.file={tmp / f'{name}.yml'}", f"--storage.path={tmp / f'{name}-data'}",
                f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="], tmp / f"{name}.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/-/ready", timeout=30)
    except AssertionError:
        d.stop()
        raise AssertionError(f"alertmanager did not start:\n{d.tail()}") from None
    return d, url


class Stack:
    """The exporters, scraped both by the VictoriaMetrics stack and, side by side, by
    the Debian Prometheus with the source rules; each ruler has its own Alertmanager
    and webhook, so the alerts that reach each can be compared."""

    def __init__(self, tmp: Path, latency_offset: str = "1s", flush: bool = True):
        prometheus = require_binary("prometheus")
        capture = require_data("captures/dcgm-exporter/l4-gpu-operator.prom").read_text()
        self.started = time.monotonic()
        self.first_seen: dict[int, dict[frozenset, float]] = {}
        self.receiver, self.prom_receiver = Receiver(), Receiver()
        self.dcgm = node_exporter(capture)
        self.procs: list[Gpulse] = []
        self.daemons: list[Daemon] = []
        self.vm: VictoriaMetrics | None = None
        try:
            sim = ["--source", "sim", "--analysis-window", "5s"]
            self.procs = [
                Gpulse(*sim, "--sim.gpus", "4", "--sim.scenario", "imbalance", "--node-name", IMBALANCE),
                Gpulse(*sim, "--sim.gpus", "4", "--sim.scenario", "balanced", "--node-name", BALANCED),
                Gpulse(*sim, "--sim.scenario", "sync-stall", "--node-name", STALL_NODE,
                       "--slurm.job-map-dir", job_map(tmp, STALL_JOB)),
                Gpulse(*sim, "--sim.scenario", "straggler", "--node-name", STRAGGLER_NODE,
                       "--slurm.job-map-dir", job_map(tmp, STRAGGLER_JOB)),
                Gpulse("--source", "dcgm", "--dcgm.url", self.dcgm.url, "--node-name", DCGM_NODE),
            ]
            targets = [g.url.removeprefix("http://") for g in self.procs]
            short, variant = rule_dirs(tmp)
            self._past_failing_requests()
            am, am_url = alertmanager(tmp, "am-vmalert", self.receiver)
            self.daemons.append(am)
            prom_am, prom_am_url = alertmanager(tmp, "am-prometheus", self.prom_receiver)
            self.daemons.append(prom_am)
            self.vm = VictoriaMetrics(tmp, targets, variant, am_url, external_labels={"cluster": "local"},
                                      latency_offset=latency_offset, flush=flush)
            self.url = self.vm.url
            prom_port = free_port()
            (tmp / "prom.yml").write_text(yaml.safe_dump(
                prometheus_config(short, int(prom_am_url.rsplit(":", 1)[1]), targets)))
            self.daemons.append(Daemon([prometheus, f"--config.file={tmp / 'prom.yml'}",
                                        f"--storage.tsdb.path={tmp / 'prom-data'}",
                                        f"--web.listen-address=127.0.0.1:{prom_port}"], tmp / "prometheus.log"))
            self.prom_url = f"http://127.0.0.1:{prom_port}"
            wait_http(self.prom_url + "/-/ready", timeout=60)
        except BaseException:
            self.close()
            raise

    def _past_failing_requests(self) -> None:
        """Wait until the dcgm node's exporter has answered after its failing requests
        (`NodeCapture.FAILING`: they make its error counter exist), before either ruler
        starts: with `for:` scaled to 0.6 s, the GPU unreadable for those two polls
        would page GpulseGPULost on whichever ruler scraped them, a race between the
        rulers' start-up and the exporter's polls that says nothing about the rules."""
        deadline = time.monotonic() + 60
        while self.dcgm.requests < max(NodeCapture.FAILING) + 2:
            if time.monotonic() > deadline:
                raise AssertionError(f"the dcgm node polled its exporter {self.dcgm.requests} times in 60 s:\n"
                                     f"{self.procs[-1].output()[-2000:]}")
            time.sleep(0.1)

    def firing(self, receiver: Receiver) -> dict[frozenset, float]:
        """Alerts that reached a webhook firing: identity (labels but vmalert's
        `alertgroup`) -> seconds after the stack started when first seen (by the caller's polling)."""
        seen = self.first_seen.setdefault(id(receiver), {})
        for _, a in receiver.alerts():
            if a["status"] == "firing":
                key = frozenset((k, v) for k, v in a["labels"].items() if k != "alertgroup")
                seen.setdefault(key, time.monotonic() - self.started)
        return seen

    # the interface test_dashboards_prometheus.run() expects
    def api(self, path: str, **params) -> list:
        return self.vm.api(path, **params)

    def logs(self) -> str:
        return (self.vm.logs() if self.vm else "") + "".join(f"\n--- {d.log.name}\n{d.tail()}" for d in self.daemons)

    def close(self) -> None:
        if self.vm:
            self.vm.stop()
        for d in reversed(self.daemons):
            d.stop()
        for g in self.procs:
            g.stop()
        self.dcgm.stop()
        self.receiver.close()
        self.prom_receiver.close()


def both_paged(stack: Stack, timeout: float = ALERT_WAIT_S) -> tuple[dict, dict]:
    """Poll both webhooks until the imbalance page has reached each and each has
    the same alerts; return what each received, with
    first-seen times. On timeout, return what there is."""
    deadline = time.monotonic() + timeout
    while True:
        vm, prom = stack.firing(stack.receiver), stack.firing(stack.prom_receiver)
        paged = all(any(dict(k).get("alertname") == "GpulseWorkloadImbalance" for k in x) for x in (vm, prom))
        if (paged and vm.keys() == prom.keys()) or time.monotonic() > deadline:
            return vm, prom
        time.sleep(0.5)
