"""Prometheus for tests and benchmarks: a real Prometheus (the Debian binary) scraping
test targets every second with the shipped exporter alert rules, for checks on alert
conditions; the example configuration (prometheus/examples/) pointed at test ports and
an Alertmanager, and a webhook `Receiver` for what Alertmanager sends; and a simulated
run scraped in virtual time (`scrape_run`, `scrape_sim`), with the alerts the shipped rules fire on
it in the real promtool (`promtool_firing`)."""
from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests
import yaml

from testing import ROOT, rulegraph
from testing.daemons import free_port, require_binary, wait_http

EXPORTER_RULES = ROOT / "prometheus" / "rules" / "gpulse-exporter.rules.yml"
EXAMPLES = ROOT / "prometheus" / "examples"


class Prometheus:
    """The Debian `prometheus` on a free loopback port, evaluating `rules` every second
    and scraping `targets` every `scrape` (none: it serves only what `storage` holds, such
    as blocks promtool backfilled, kept whatever their age); behind `web_config` (basic
    auth) when given, `auth` being what the checks here send. The one way the tests and
    stacks start a Prometheus of their own configuration."""

    def __init__(self, workdir: Path, targets: list[str], rules: list[Path] = (EXPORTER_RULES,), *,
                 scrape: str = "1s", scrape_timeout: str | None = None, storage: Path | None = None,
                 web_config: Path | None = None, auth: tuple[str, str] | None = None):
        prom = require_binary("prometheus")
        glob = {"scrape_interval": scrape, "evaluation_interval": "1s"}
        if scrape_timeout:
            glob["scrape_timeout"] = scrape_timeout
        cfg: dict = {"global": glob, "rule_files": [str(r) for r in rules]}
        if targets:
            cfg["scrape_configs"] = [{"job_name": "gpulse", "static_configs": [{"targets": targets}]}]
        config = workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(cfg))
        args = [prom, f"--config.file={config}", f"--storage.tsdb.path={storage or workdir / 'tsdb'}",
                "--log.level=warn"]
        if storage:
            args.append("--storage.tsdb.retention.time=100y")
        if web_config:
            args.append(f"--web.config.file={web_config}")
        port = free_port()
        log = workdir / "prometheus.log"
        with open(log, "w") as out:
            self.proc = subprocess.Popen([*args, f"--web.listen-address=127.0.0.1:{port}"],
                                         stdout=subprocess.DEVNULL, stderr=out)
        self.url = f"http://127.0.0.1:{port}"
        try:
            wait_http(self.url + "/-/ready", timeout=30, auth=auth)
        except AssertionError as e:
            self.stop()
            raise AssertionError(f"{e}; prometheus said: {log.read_text(errors='replace')[-2000:]}") from None

    def alerts(self, name: str) -> list[dict]:
        """Label sets of ALERTS{alertname=name} now (pending or firing)."""
        r = requests.get(self.url + "/api/v1/query", params={"query": f'ALERTS{{alertname="{name}"}}'}, timeout=5)
        return [x["metric"] for x in r.json()["data"]["result"]]

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def add_scrape(series: dict[str, list], snap, n: int) -> None:
    """Scrape number n of a snapshot (its collector families, histograms left out) into
    promtool input series {series text: values}, None for scrapes a series missed."""
    from gpulse.collector import snapshot_families
    for fam in snapshot_families(snap):
        if fam.type == "histogram":
            continue
        for s in fam.samples:
            key = s.name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items())) + "}"
            col = series.setdefault(key, [])
            col.extend([None] * (n - len(col)))
            col.append(s.value)


class Attributed:
    """A source whose readings all carry `workload`, as attribution would give them."""

    def __init__(self, source, workload: str):
        self.source, self.workload = source, workload

    def poll(self, now: float):
        res = self.source.poll(now)
        for r in res.readings:
            r.attribution = {**(r.attribution or {}), "workload": self.workload}
        return res

    def __getattr__(self, name: str):
        return getattr(self.source, name)


def scrape_run(cfg, source, seconds: float, scrape: float = 15.0, ago: float = 60.0, workload: str = "",
               now: float | None = None):
    """A run of `source` through the engine in virtual time (with the live page's
    history), anchored so its last snapshot is `ago` seconds before `now` (the wall
    clock unless given: runs stored side by side pass one `now`, or each is anchored
    to when it was recorded and a loaded machine leaves the earlier ones stale at the
    last one's end), scraped every `scrape` seconds: (the last snapshot, the scrapes as metric families with their
    samples' timestamps, the first and last scrape time, the promtool input series
    {series: values})."""
    import math
    import time

    from gpulse.drive import run_offline
    from gpulse.export import Series, store_scrape

    wall0 = math.floor((time.time() if now is None else now) - seconds - ago)
    store = Series()
    series: dict[str, list] = {}
    t = first = served = None
    n = 0
    for _engine, snap in run_offline(Attributed(source, workload) if workload else source, cfg, until=seconds,
                                     wall0=wall0, history=True):
        if t is None:
            t = first = math.ceil(snap.wall / scrape) * scrape
        while served is not None and t < snap.wall:
            store_scrape(store, cfg, t, served, final=False)
            add_scrape(series, served, n)
            n += 1
            t += scrape
        served = snap
    for col in series.values():
        col.extend([None] * (n - len(col)))
    return served, store.metrics(), first, t - scrape, series


def scrape_sim(scenario: str, seconds: float, scrape: float = 15.0, node: str = "n1", gpus: int = 8):
    """A `--source sim` run scraped in virtual time (`scrape_run`), its last snapshot a
    minute ago: (its Config, the last snapshot, the scrapes as OpenMetrics, the first
    and last scrape time, the promtool input series {series: values})."""
    from gpulse.collector import encode
    from gpulse.sources.sim import SimSource
    from testing.config import test_config

    cfg = test_config(source="sim", sim__scenario=scenario, sim__gpus=gpus, node_name=node)
    served, families, first, last, series = scrape_run(cfg, SimSource(cfg), seconds, scrape)
    return cfg, served, encode(families, openmetrics=True), first, last, series


def backfill(openmetrics: str | bytes, data: Path) -> Path:
    """OpenMetrics text whose samples carry their timestamps (`gpulse export`, or
    `scrape_run`'s families encoded) into TSDB blocks at `data` by the real promtool
    (`tsdb create-blocks-from openmetrics`), as a user backfills; `data`."""
    om = data.parent / f"{data.name}.om"
    if isinstance(openmetrics, str):
        om.write_text(openmetrics)
    else:
        om.write_bytes(openmetrics)
    made = subprocess.run([require_binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(om),
                           str(data)], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    return data


def promtool_firing(workdir: Path, series: dict[str, list], checks: list[tuple[float, str]],
                    scrape: float = 15.0) -> dict[tuple[float, str], list[dict[str, str]]]:
    """{(eval seconds, alert): the labels and annotations of each alert firing then}
    for every check, by the shipped rules evaluated every `scrape` seconds over
    `series` in promtool. Every expectation is empty, so promtool prints what fired."""
    import re
    # the shipped rules the checked alerts can see (testing/rulegraph.py)
    rules = rulegraph.seen_by(sorted((ROOT / "prometheus" / "rules").glob("*.yml")), [name for _, name in checks],
                              workdir / "rules")
    lines = ["rule_files:"] + [f"  - {r}" for r in rules]
    lines += [f"evaluation_interval: {scrape:g}s", "tests:", f"  - interval: {scrape:g}s", "    input_series:"]
    for key, col in series.items():
        lines += [f"      - series: '{key}'",
                  "        values: '" + " ".join("_" if v is None else repr(float(v)) for v in col) + "'"]
    lines += ["    alert_rule_test:"]
    for at, name in checks:
        lines += [f"      - eval_time: {at:g}s", f"        alertname: {name}", "        exp_alerts: []"]
    path = workdir / "firing.test.yml"
    path.write_text("\n".join(lines) + "\n")
    p = subprocess.run([require_binary("promtool"), "test", "rules", str(path)], capture_output=True, text=True,
                       timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 0 or "got:" in out, out[-2000:]
    fired: dict[tuple[float, str], list[dict[str, str]]] = {c: [] for c in checks}
    for block in re.split(r"\n\s*alertname: ", out)[1:]:
        m = re.match(r"(\w+), time: (\S+),", block)
        if not m or "got:" not in block:
            continue
        got = block.split("got:", 1)[1]
        at = _seconds(m.group(2))
        for lab, ann in re.findall(r"Labels:\{([^}]*)\}\s*Annotations:\{([^}]*)\}", got):
            fired.setdefault((at, m.group(1)), []).append(
                dict(re.findall(r'(\w+)="([^"]*)"', lab)) | dict(re.findall(r'(\w+)="([^"]*)"', ann)))
    return fired


def _seconds(go: str) -> float:
    """A Go duration as promtool prints it (1m30s) in seconds."""
    import re
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)(ms|h|m|s)", go))


class Receiver:
    """A webhook endpoint that records every Alertmanager notification by path."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict]] = []
        lock = self.lock = threading.Lock()
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server naming)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with lock:
                    received.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):  # keep pytest output clean
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self) -> list[tuple[str, dict]]:
        with self.lock:
            return [(path, a) for path, body in self.received for a in body["alerts"]]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def alertmanager_config(receiver_url: str) -> dict:
    doc = yaml.safe_load((EXAMPLES / "alertmanager.yml").read_text(encoding="utf-8"))
    for rc in doc["receivers"]:
        for hook in rc.get("webhook_configs", []):
            hook["url"] = receiver_url + "/" + hook["url"].rstrip("/").rsplit("/", 1)[1]
    for route in [doc["route"], *doc["route"].get("routes", [])]:
        route.update(group_wait="1s", group_interval="1s")
    return doc


def prometheus_config(rules_dir: Path, am_port: int, targets: list[str]) -> dict:
    doc = yaml.safe_load((EXAMPLES / "prometheus.yml").read_text(encoding="utf-8"))
    doc["global"].update(scrape_interval="1s", evaluation_interval="1s")
    doc["rule_files"] = [str(rules_dir / "*.yml")]
    doc["alerting"]["alertmanagers"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{am_port}"]}]
    (job,) = [j for j in doc["scrape_configs"] if j["job_name"] == "gpulse"]
    job["static_configs"] = [{"targets": targets}]
    return doc


RUNBOOK = "https://github.com/gpulse/gpulse/blob/main/docs/runbooks/GpulseWorkloadImbalance.md"
