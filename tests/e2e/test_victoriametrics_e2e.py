"""End to end on VictoriaMetrics: gpulse -> vmagent -> victoria-metrics <- vmalert
(shipped rules, vmalert variant) -> Alertmanager -> webhook; the dashboard queries that
only a live stack answers through victoria-metrics' Prometheus-compatible API (the
others: tests/e2e/test_victoriametrics_dashboards.py, in virtual time).

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
victoria-metrics' `-search.latencyOffset=1s` (see testing/vmstack.py).
"""
from __future__ import annotations

import re
import time

import pytest

from testing.dashstack import VARIABLES, grafana_requests, run
from testing.promutil import RUNBOOK
from testing.vmstack import ALERT_WAIT_S, BALANCED, IMBALANCE, Stack, both_paged, checked_live

DATA_WAIT_S = 120     # the live targets read scraped series: seconds on a quiet machine


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
    # and the lost time's query over the exporter's scraped counter, the alert carrying
    # the external cluster label that the counter lacks
    assert re.search(r"Lost to imbalance over the last hour: \d+\.\d\d GPU-hours\.", ann["description"]), ann


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
    return [r.where for r in grafana_requests(uid) if checked_live(uid, r.where) and not run(stack, r)]


LIVE_UIDS = sorted(uid for uid in VARIABLES if any(checked_live(uid, r.where) for r in grafana_requests(uid)))


@pytest.fixture(scope="module")
def with_data(stack):
    """Wait until every live dashboard target has data, or give up and let the test name them."""
    deadline = time.monotonic() + DATA_WAIT_S
    while time.monotonic() < deadline and any(empty_targets(stack, uid) for uid in LIVE_UIDS):
        time.sleep(2)
    return stack


@pytest.mark.parametrize("uid", LIVE_UIDS)
def test_the_live_dashboard_queries_return_data_through_victoriametrics(with_data, uid):
    empty = empty_targets(with_data, uid)
    assert not empty, "panel queries that returned no data from victoria-metrics:\n  " + "\n  ".join(empty)
