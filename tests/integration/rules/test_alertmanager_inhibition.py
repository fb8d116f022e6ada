"""The example Alertmanager's inhibitions, in the real Alertmanager.

One condition, one page: a GPU that is gone silences its own warnings; a straggler
(steady, recurring, or a whole slow node) silences the imbalance it causes in its
group; a GPU paged as a steady straggler is not paged again as a recurring one. Each
inhibition must reach no further than the GPU, node, workload and cluster it names.

The alerts are posted to Alertmanager's API with the labels the shipped rules give
them (alert name and severity read from prometheus/rules, the rest as Prometheus
sends them: node, gpu, workload, pod and the `cluster` external label), and the
verdict is Alertmanager's own: each alert's status.inhibitedBy from /api/v2/alerts.
"""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
import requests
import yaml

from conftest import ROOT, free_port, require_binary, wait_http
from testing.daemons import Daemon
from testing.promutil import Receiver, alertmanager_config

RULES = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))


def _severities() -> dict[str, str]:
    out = {}
    for path in RULES:
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    out[rule["alert"]] = rule["labels"]["severity"]
    return out


SEVERITY = _severities()

# (key, alert name, labels besides alertname/severity, inhibited?)
CASES = [
    # cluster a: GPU 3 of job-a is a steady straggler on n1; GPU 5 of n1 is lost
    ("a.straggler3", "GpulseStragglerGPU", {"cluster": "a", "node": "n1", "gpu": "3", "workload": "job-a"}, False),
    ("a.recurring3", "GpulseStragglerGPURecurring", {"cluster": "a", "node": "n1", "gpu": "3", "workload": "job-a"}, True),
    ("a.recurring4", "GpulseStragglerGPURecurring", {"cluster": "a", "node": "n1", "gpu": "4", "workload": "job-a"}, False),
    ("a.imbalance", "GpulseWorkloadImbalance", {"cluster": "a", "workload": "job-a"}, True),
    ("a.imbalance-b", "GpulseWorkloadImbalance", {"cluster": "a", "workload": "job-b"}, False),
    ("a.lost5", "GpulseGPULost", {"cluster": "a", "node": "n1", "gpu": "5"}, False),
    ("a.recurring5", "GpulseStragglerGPURecurring", {"cluster": "a", "node": "n1", "gpu": "5", "workload": "job-c"}, True),
    ("a.straggler5-n2", "GpulseStragglerGPU", {"cluster": "a", "node": "n2", "gpu": "5", "workload": "job-d"}, False),
    # cluster b: node n7 is a slow node of job-a; the same workload name in cluster c is another job
    ("b.node", "GpulseStragglerNode", {"cluster": "b", "node": "n7", "workload": "job-a"}, False),
    ("b.imbalance", "GpulseWorkloadImbalance", {"cluster": "b", "workload": "job-a"}, True),
    ("c.imbalance", "GpulseWorkloadImbalance", {"cluster": "c", "workload": "job-a"}, False),
    # cluster d: no attribution; a recurring straggler on n4 spreads n4, not n5
    ("d.recurring", "GpulseStragglerGPURecurring", {"cluster": "d", "node": "n4", "gpu": "1"}, False),
    ("d.imbalance4", "GpulseWorkloadImbalance", {"cluster": "d", "node": "n4"}, True),
    ("d.imbalance5", "GpulseWorkloadImbalance", {"cluster": "d", "node": "n5"}, False),
]


@pytest.fixture
def alertmanager(tmp_path):
    binary = require_binary("prometheus-alertmanager")
    receiver = Receiver()
    port = free_port()
    (tmp_path / "am.yml").write_text(yaml.safe_dump(alertmanager_config(receiver.url)))
    daemon = Daemon([binary, f"--config.file={tmp_path / 'am.yml'}", f"--storage.path={tmp_path / 'data'}",
                     f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="], tmp_path / "am.log")
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_http(url + "/-/ready", timeout=60)
        except AssertionError:
            pytest.fail(f"Alertmanager did not start:\n{daemon.tail()}")
        yield url
    finally:
        daemon.stop()
        receiver.close()


def test_every_alert_named_in_the_cases_is_a_shipped_alert():
    assert {name for _, name, _, _ in CASES} <= set(SEVERITY), set(SEVERITY)


def test_inhibitions_silence_what_the_source_explains_and_nothing_else(alertmanager):
    now = datetime.now(timezone.utc)
    iso = lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.000Z")  # noqa: E731
    posted = [{"labels": {"alertname": name, "severity": SEVERITY[name], "case": key, **labels},
               "annotations": {"summary": key},
               "startsAt": iso(now - timedelta(minutes=1)), "endsAt": iso(now + timedelta(minutes=30))}
              for key, name, labels, _ in CASES]
    r = requests.post(alertmanager + "/api/v2/alerts", json=posted, timeout=10)
    assert r.status_code == 200, r.text

    want = {key for key, _, _, inhibited in CASES if inhibited}
    # Alertmanager's inhibitor takes the posted alerts in asynchronously: wait until
    # every expected inhibition holds; the alerts that must stay loud are judged then,
    # when every source they could have been silenced by is known to be in.
    deadline = time.monotonic() + 60
    while True:
        r = requests.get(alertmanager + "/api/v2/alerts", timeout=10)
        r.raise_for_status()
        status = {a["labels"]["case"]: a["status"] for a in r.json()}
        got = {k for k, s in status.items() if s["inhibitedBy"]}
        if len(status) == len(CASES) and want <= got or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(status) == len(CASES), sorted(status)
    assert got == want, f"inhibited {sorted(got)}, expected {sorted(want)}"
    for key in want:
        assert status[key]["state"] == "suppressed", (key, status[key])
