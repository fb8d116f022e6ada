"""End to end: gpulse -> Prometheus (shipped rules) -> Alertmanager -> webhook.

Real binaries from the Debian packages `prometheus` and `prometheus-alertmanager`,
on free loopback ports with temporary data directories. Two simulated nodes run side
by side: `imbalance` (GPUs 0-1 at 99 %, 2-3 at 10 %) must page through the example
Alertmanager routing with its labels and annotations intact; `balanced` must raise
nothing.

What the test changes, and only that:
- the rules: `prometheus/tools/shorten_for.py --factor 0.01` scales `for:` and
  `keep_firing_for:` (15 m -> 9 s); expressions are the shipped ones;
- the example configs: ports, a 1 s scrape/evaluation interval, and Alertmanager
  group waits of 1 s; routes, grouping and receivers' paths stay as shipped.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
import yaml

from conftest import ROOT, free_port, require_binary, wait_http

EXAMPLES = ROOT / "prometheus" / "examples"
RULES = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))
SHORTEN = ROOT / "prometheus" / "tools" / "shorten_for.py"
RUNBOOK = "https://github.com/gpulse/gpulse/blob/main/docs/runbooks/GpulseWorkloadImbalance.md"


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


class Daemon:
    def __init__(self, args: list[str], log: Path):
        self.log = log
        self.fh = open(log, "w")
        self.proc = subprocess.Popen(args, stdout=self.fh, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.fh.close()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def _alertmanager_config(receiver_url: str) -> dict:
    doc = yaml.safe_load((EXAMPLES / "alertmanager.yml").read_text(encoding="utf-8"))
    for rc in doc["receivers"]:
        for hook in rc.get("webhook_configs", []):
            hook["url"] = receiver_url + "/" + hook["url"].rstrip("/").rsplit("/", 1)[1]
    for route in [doc["route"], *doc["route"].get("routes", [])]:
        route.update(group_wait="1s", group_interval="1s")
    return doc


def _prometheus_config(rules_dir: Path, am_port: int, targets: list[str]) -> dict:
    doc = yaml.safe_load((EXAMPLES / "prometheus.yml").read_text(encoding="utf-8"))
    doc["global"].update(scrape_interval="1s", evaluation_interval="1s")
    doc["rule_files"] = [str(rules_dir / "*.yml")]
    doc["alerting"]["alertmanagers"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{am_port}"]}]
    (job,) = [j for j in doc["scrape_configs"] if j["job_name"] == "gpulse"]
    job["static_configs"] = [{"targets": targets}]
    return doc


def _prom_alerts(prom: str) -> list[dict]:
    r = requests.get(prom + "/api/v1/alerts", timeout=5)
    r.raise_for_status()
    return r.json()["data"]["alerts"]


def _query(prom: str, q: str) -> list[dict]:
    r = requests.get(prom + "/api/v1/query", params={"query": q}, timeout=5)
    r.raise_for_status()
    return r.json()["data"]["result"]


@pytest.fixture
def stack(tmp_path, gpulse_proc):
    prometheus = require_binary("prometheus")
    alertmanager = require_binary("prometheus-alertmanager")
    receiver = Receiver()
    daemons: list[Daemon] = []
    try:
        rules_dir = tmp_path / "rules"
        r = subprocess.run([sys.executable, str(SHORTEN), "--factor", "0.01", "--out", str(rules_dir),
                            *map(str, RULES)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr

        common = ["--source", "sim", "--sim.gpus", "4", "--analysis-window", "5s"]
        imb = gpulse_proc(*common, "--sim.scenario", "imbalance", "--node-name", "e2e-imbalance")
        bal = gpulse_proc(*common, "--sim.scenario", "balanced", "--node-name", "e2e-balanced")

        am_port, prom_port = free_port(), free_port()
        (tmp_path / "am.yml").write_text(yaml.safe_dump(_alertmanager_config(receiver.url)))
        daemons.append(Daemon([alertmanager, f"--config.file={tmp_path / 'am.yml'}",
                               f"--storage.path={tmp_path / 'am-data'}",
                               f"--web.listen-address=127.0.0.1:{am_port}",
                               "--cluster.listen-address="], tmp_path / "am.log"))
        targets = [imb.url.split("//")[1], bal.url.split("//")[1]]
        (tmp_path / "prom.yml").write_text(yaml.safe_dump(_prometheus_config(rules_dir, am_port, targets)))
        daemons.append(Daemon([prometheus, f"--config.file={tmp_path / 'prom.yml'}",
                               f"--storage.tsdb.path={tmp_path / 'prom-data'}",
                               f"--web.listen-address=127.0.0.1:{prom_port}"], tmp_path / "prom.log"))
        am, prom = f"http://127.0.0.1:{am_port}", f"http://127.0.0.1:{prom_port}"
        for url, d in ((am, daemons[0]), (prom, daemons[1])):
            try:
                wait_http(url + "/-/ready", timeout=30)
            except AssertionError:
                pytest.fail(f"{d.proc.args[0]} did not start:\n{d.tail()}")
        yield {"prom": prom, "am": am, "receiver": receiver, "targets": targets, "daemons": daemons}
    finally:
        for d in reversed(daemons):
            d.stop()
        receiver.close()


def test_imbalance_pages_through_alertmanager_and_balanced_stays_quiet(stack):
    prom, receiver = stack["prom"], stack["receiver"]
    deadline = time.monotonic() + 120
    hits: list[tuple[str, dict]] = []
    while time.monotonic() < deadline and not hits:
        hits = [(p, a) for p, a in receiver.alerts()
                if a["labels"].get("alertname") == "GpulseWorkloadImbalance"
                and a["labels"].get("node") == "e2e-imbalance" and a["status"] == "firing"]
        time.sleep(0.5)
    if not hits:
        logs = "\n".join(d.tail() for d in stack["daemons"])
        pytest.fail(f"no GpulseWorkloadImbalance at the webhook in 120 s; "
                    f"Prometheus alerts: {_prom_alerts(prom)}\n{logs}")

    path, alert = hits[0]
    assert path == "/chat", "a warning must take the example's warning route"
    labels = alert["labels"]
    # the rule aggregates per node; the example's external label travels along
    assert labels == {"alertname": "GpulseWorkloadImbalance", "severity": "warning",
                      "node": "e2e-imbalance", "cluster": "local"}
    ann = alert["annotations"]
    assert ann["runbook_url"] == RUNBOOK
    assert ann["summary"].startswith("Node e2e-imbalance spreads its work unevenly over its GPUs (imbalance ")
    # 99 % against 10 %: the least active GPU did ~90 % less; the GPUs named are from the 10 % and 99 % halves
    assert "of node e2e-imbalance did 8" in ann["description"] or "of node e2e-imbalance did 9" in ann["description"]
    assert "Least active: GPU 2" in ann["description"] or "Least active: GPU 3" in ann["description"]
    assert "Most active: GPU 0" in ann["description"] or "Most active: GPU 1" in ann["description"]

    # Intact: exactly the labels and annotations Prometheus computed for the alert
    (firing,) = [a for a in _prom_alerts(prom) if a["labels"].get("alertname") == "GpulseWorkloadImbalance"
                 and a["labels"].get("node") == "e2e-imbalance"]
    assert {k: v for k, v in labels.items() if k != "cluster"} == firing["labels"]
    assert ann["runbook_url"] == firing["annotations"]["runbook_url"]
    assert ann["summary"].split("(imbalance")[0] == firing["annotations"]["summary"].split("(imbalance")[0]

    # The balanced node was scraped and evaluated the whole time, and nothing fired
    # (or is pending) for it.
    imb = _query(prom, 'node:gpulse_gpu_active:imbalance_ratio5m{node="e2e-balanced"}')
    assert imb and float(imb[0]["value"][1]) < 0.1, imb
    assert _query(prom, 'node_gpu:gpulse_gpu_active:peer_gap_ratio5m{node="e2e-balanced"}')
    assert not [a for a in _prom_alerts(prom) if a["labels"].get("node") == "e2e-balanced"]
    assert not [a for _, a in receiver.alerts() if a["labels"].get("node") == "e2e-balanced"]
    # nor anything else for the imbalanced node: one condition, one page
    others = {a["labels"]["alertname"] for a in _prom_alerts(prom) if a["labels"].get("node") == "e2e-imbalance"}
    assert others == {"GpulseWorkloadImbalance"}, others
