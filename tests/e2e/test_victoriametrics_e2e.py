"""End to end on VictoriaMetrics: gpulse -> vmagent -> victoria-metrics <- vmalert
(shipped rules, vmalert variant) -> Alertmanager -> webhook; every dashboard query
through victoria-metrics' Prometheus-compatible API.

Real binaries from the Debian packages `victoria-metrics` (victoria-metrics, vmagent,
vmalert 1.79) and `prometheus-alertmanager`. Five exporters: `imbalance` and
`balanced` as in tests/e2e/test_alerting_e2e.py, a `sync-stall` and a `straggler` node
attributed to Slurm jobs (the stall and outlier panels need them), and a `--source dcgm` node reading a real dcgm-exporter capture (the
node-detail dashboard needs its NVLink/ECC/XID families).

What the test changes, and only that: the rules go through
`prometheus/tools/shorten_for.py --factor 0.01` and then `prometheus/tools/variants.py
--variant vmalert`, the same transformation that makes prometheus/rules-vmalert/;
1 s scrape/evaluation; Alertmanager group waits of 1 s and no inhibit rules; vmalert's
`-external.label=cluster=local` stands in for Prometheus' external_labels; and
victoria-metrics' `-search.latencyOffset=1s` (see tests/vmstack.py).
"""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, Gpulse, free_port, require_binary, require_data, wait_http
from test_alerting_e2e import RUNBOOK, Daemon, Receiver, _alertmanager_config, _prometheus_config
from test_dashboards_prometheus import (DCGM_NODE, STALL_JOB, STALL_NODE, STRAGGLER_JOB, STRAGGLER_NODE, VARIABLES,
                                        FakeDcgmExporter, grafana_requests, job_map, run)
from vmstack import VictoriaMetrics

RULES = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))
TOOLS = ROOT / "prometheus" / "tools"
IMBALANCE, BALANCED = "e2e-imbalance", "e2e-balanced"
ALERT_WAIT_S = 180     # hold times are 6-9 s; the margin is for a loaded 2-core machine
# worst first over the 1m cell rules ranks from increase() of their records: two
# evaluations of a 1m group (vmalert evaluates the groups at their own intervals)
DATA_WAIT_S = 300


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
    config = _alertmanager_config(receiver.url)
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

    def __init__(self, tmp: Path, latency_offset: str = "1s"):
        prometheus = require_binary("prometheus")
        capture = require_data("captures/dcgm-exporter/l4-gpu-operator.prom").read_text()
        self.started = time.monotonic()
        self.first_seen: dict[int, dict[frozenset, float]] = {}
        self.receiver, self.prom_receiver = Receiver(), Receiver()
        self.dcgm = FakeDcgmExporter(capture)
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
            am, am_url = alertmanager(tmp, "am-vmalert", self.receiver)
            self.daemons.append(am)
            prom_am, prom_am_url = alertmanager(tmp, "am-prometheus", self.prom_receiver)
            self.daemons.append(prom_am)
            self.vm = VictoriaMetrics(tmp, targets, variant, am_url, external_labels={"cluster": "local"},
                                      latency_offset=latency_offset)
            self.url = self.vm.url
            prom_port = free_port()
            (tmp / "prom.yml").write_text(yaml.safe_dump(
                _prometheus_config(short, int(prom_am_url.rsplit(":", 1)[1]), targets)))
            self.daemons.append(Daemon([prometheus, f"--config.file={tmp / 'prom.yml'}",
                                        f"--storage.tsdb.path={tmp / 'prom-data'}",
                                        f"--web.listen-address=127.0.0.1:{prom_port}"], tmp / "prometheus.log"))
            self.prom_url = f"http://127.0.0.1:{prom_port}"
            wait_http(self.prom_url + "/-/ready", timeout=60)
        except BaseException:
            self.close()
            raise

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
        self.dcgm.close()
        self.receiver.close()
        self.prom_receiver.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("victoriametrics-e2e"))
    try:
        yield s
    finally:
        s.close()


def wait_for_webhook(stack: Stack, alertname: str, node: str) -> tuple[str, dict]:
    deadline = time.monotonic() + ALERT_WAIT_S
    while time.monotonic() < deadline:
        hits = [(p, a) for p, a in stack.receiver.alerts() if a["labels"].get("alertname") == alertname
                and a["labels"].get("node") == node and a["status"] == "firing"]
        if hits:
            return hits[0]
        time.sleep(0.5)
    pytest.fail(f"no {alertname} for {node} at the webhook in {ALERT_WAIT_S} s; "
                f"vmalert alerts: {stack.vm.alerts()}\n{stack.logs()}")


def test_imbalance_pages_through_alertmanager_as_with_prometheus(stack):
    path, alert = wait_for_webhook(stack, "GpulseWorkloadImbalance", IMBALANCE)
    # the assertions of tests/e2e/test_alerting_e2e.py: same route, labels and annotations
    assert path == "/chat", "a warning must take the example's warning route"
    labels = {k: v for k, v in alert["labels"].items() if k != "alertgroup"}
    assert labels == {"alertname": "GpulseWorkloadImbalance", "severity": "warning",
                      "node": IMBALANCE, "cluster": "local"}
    ann = alert["annotations"]
    assert ann["runbook_url"] == RUNBOOK
    assert ann["summary"].startswith(f"Node {IMBALANCE} spreads its work unevenly over its GPUs (imbalance ")
    # the annotation's own queries (bottomk/topk) ran against victoria-metrics
    assert f"of node {IMBALANCE} did 8" in ann["description"] or f"of node {IMBALANCE} did 9" in ann["description"]
    assert "Least active: GPU 2" in ann["description"] or "Least active: GPU 3" in ann["description"]
    assert "Most active: GPU 0" in ann["description"] or "Most active: GPU 1" in ann["description"]


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


def test_the_same_alerts_reach_the_webhook_as_with_prometheus(stack):
    vm, prom = both_paged(stack)
    show = lambda alerts: sorted(sorted(dict(k).items()) for k in alerts)  # noqa: E731
    where = f"vmalert: {show(vm)}\nPrometheus: {show(prom)}\n{stack.logs()}"
    assert any(dict(k).get("alertname") == "GpulseWorkloadImbalance" for k in prom), where
    assert vm.keys() == prom.keys(), where
    assert not [k for k in vm if dict(k).get("node") == BALANCED]


def test_recording_rules_are_written_back_and_the_balanced_node_stays_quiet(stack):
    wait_for_webhook(stack, "GpulseWorkloadImbalance", IMBALANCE)
    # vmalert wrote the recording rules into victoria-metrics, for every node
    imb = stack.api("query", query=f'node:gpulse_gpu_active:imbalance_ratio5m{{node="{BALANCED}"}}')
    assert imb and float(imb[0]["value"][1]) < 0.1, imb
    assert stack.api("query", query=f'node_gpu:gpulse_gpu_active:peer_gap_ratio5m{{node="{BALANCED}"}}')
    # and its ALERTS series, which the vmalert variant's hold reads back; they become
    # visible to queries a few seconds after they are written (docs/victoriametrics.md)
    deadline = time.monotonic() + 60
    while not (held := stack.api("query", query='ALERTS{alertname="GpulseWorkloadImbalance", alertstate="firing"}')):
        assert time.monotonic() < deadline, f"no firing ALERTS in victoria-metrics: {stack.vm.alerts()}"
        time.sleep(1)
    assert {s["metric"].get("node") for s in held} >= {IMBALANCE}
    assert not [a for a in stack.vm.alerts() if a["labels"].get("node") == BALANCED]
    assert not [a for _, a in stack.receiver.alerts() if a["labels"].get("node") == BALANCED]
    # one condition, one page, as with Prometheus
    others = {a["labels"]["alertname"] for a in stack.vm.alerts() if a["labels"].get("node") == IMBALANCE}
    assert others == {"GpulseWorkloadImbalance"}, others


def empty_targets(stack: Stack, uid: str) -> list[str]:
    return [r.where for r in grafana_requests(uid) if not run(stack, r)]


@pytest.fixture(scope="module")
def with_data(stack):
    """Wait until every dashboard target has data, or give up and let the test name them."""
    deadline = time.monotonic() + DATA_WAIT_S
    while time.monotonic() < deadline and any(empty_targets(stack, uid) for uid in VARIABLES):
        time.sleep(2)
    return stack


@pytest.mark.parametrize("uid", sorted(VARIABLES))
def test_every_dashboard_query_returns_data_through_victoriametrics(with_data, uid):
    empty = empty_targets(with_data, uid)
    assert not empty, "panel queries that returned no data from victoria-metrics:\n  " + "\n  ".join(empty)


def test_heatmap_row_keys_are_well_formed_through_victoriametrics(with_data):
    """Heatmap rows sort by their `device` key: node / two-digit GPU index in
    natural order, rank / node / index worst first (rank / node for the nodes
    overview). VictoriaMetrics 1.79 garbles a label_join whose target label is
    one of its sources, so the keys are checked through it, not only through
    Prometheus."""
    checked = 0
    for r in grafana_requests("gpulse-cluster-heatmap"):
        gpus = r.where.startswith("GPU cluster heatmap / GPU heatmap ")
        if not (gpus or r.where.startswith("GPU cluster heatmap / Nodes ")):
            continue
        ranked = "order=.+" in r.where
        for x in run(with_data, r):
            m = x["metric"]
            key = m["node"] + (f"/{int(m['gpu']):02d}" if gpus else "")
            if ranked:
                assert re.fullmatch(r"\d{4}/" + re.escape(key), m.get("device", "")), f"{r.where}: {m}"
            elif gpus:
                assert m.get("device") == key, f"{r.where}: {m}"
            checked += 1
    assert checked > 0
