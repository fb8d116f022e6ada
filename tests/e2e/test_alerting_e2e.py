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

import re
import subprocess
import sys
import time

import pytest
import requests
import yaml

from testing.daemons import Daemon
from testing.promutil import Receiver, alertmanager_config, prometheus_config
from conftest import ROOT, free_port, require_binary, wait_http
from testing.promutil import RUNBOOK

RULES = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))
SHORTEN = ROOT / "prometheus" / "tools" / "shorten_for.py"


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
        (tmp_path / "am.yml").write_text(yaml.safe_dump(alertmanager_config(receiver.url)))
        daemons.append(Daemon([alertmanager, f"--config.file={tmp_path / 'am.yml'}",
                               f"--storage.path={tmp_path / 'am-data'}",
                               f"--web.listen-address=127.0.0.1:{am_port}",
                               "--cluster.listen-address="], tmp_path / "am.log"))
        targets = [imb.url.split("//")[1], bal.url.split("//")[1]]
        (tmp_path / "prom.yml").write_text(yaml.safe_dump(prometheus_config(rules_dir, am_port, targets)))
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
    # and the lost time's query over the exporter's scraped counter, the alert carrying
    # the external cluster label that the counter lacks
    assert re.search(r"Lost to imbalance over the last hour: \d+\.\d\d GPU-hours\.", ann["description"]), ann

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
