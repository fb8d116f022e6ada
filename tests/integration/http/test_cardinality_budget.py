"""The cardinality budget of docs/metrics.md ("Cardinality budget"), checked against a
real `gpulse serve` at 8 GPUs: series per GPU, series per node, labels per series
(Mimir's and Cortex's default limit is 30) and bytes per scrape, at defaults and with
Kubernetes attribution copying two pod labels. The budget table in docs/metrics.md is
the one place the figures live; this test reads it from there and fails when a
change exceeds a row, so raising the budget is a reviewed edit of the docs.
"""
from __future__ import annotations

import gzip
import os
import re

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

import fakenvml
from conftest import ROOT, require_binary

METRICS_MD = ROOT / "docs" / "metrics.md"
GPUS = 8
MIMIR_LABEL_LIMIT = 30
COPIED = ("team", "app.kubernetes.io/name")
# eight GPUs on the fake libnvidia-ml (through the real pynvml), as a node runs it
SCENARIO = f"gpus {GPUS}\nutil * const 0.9\n"


def fake_uuid(i: int) -> str:
    """The UUID the fake libnvidia-ml gives GPU i (tests/fakenvml/fakenvml.c)."""
    return f"GPU-{0xfa4e0000 + i:08x}-0000-4000-8000-{i:012x}"


@pytest.fixture
def nvml_env(tmp_path):
    require_binary("gcc")
    fakenvml.build()
    p = tmp_path / "scenario.txt"
    p.write_text(SCENARIO)
    return fakenvml.env(p)


def budget() -> dict[str, dict[str, float]]:
    """docs/metrics.md's budget table: setup -> {column: limit}."""
    text = METRICS_MD.read_text(encoding="utf-8")
    section = text.split("## Cardinality budget", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    out = {}
    for line in rows[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        out[cells[0].strip("`* ")] = {h: float(re.sub(r"[^\d.]", "", c)) for h, c in zip(head[1:], cells[1:])}
    return out


def measure(text: str, gzipped: int) -> dict[str, float]:
    samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    per_gpu = [s for s in samples if "gpu" in s.labels]
    return {
        "series per GPU": len(per_gpu) / GPUS,
        "node series": len(samples) - len(per_gpu),
        "series at 8 GPUs": len(samples),
        "max labels per series": max(len(s.labels) + 1 for s in samples),  # + __name__
        "bytes per scrape": len(text.encode()),
        "gzip bytes per scrape": gzipped,
    }


def scrape(g) -> tuple[str, int]:
    text = g.metrics()
    r = requests.get(g.url + "/metrics", headers={"Accept-Encoding": "gzip"}, timeout=5, stream=True)
    raw = r.raw.read()
    gz = len(raw) if r.headers.get("Content-Encoding") == "gzip" else len(gzip.compress(raw))
    return text, gz


def settled(g) -> tuple[str, int]:
    """A scrape once every family that needs an analysis window exists."""
    g.wait_metrics(lambda t: "gpulse_group_active{" in t, "the analysis families", timeout=60)
    return scrape(g)


def check(setup: str, got: dict[str, float]) -> None:
    limits = budget()[setup]
    over = {k: (got[k], v) for k, v in limits.items() if got[k] > v}
    assert not over, f"{setup}: over the budget in docs/metrics.md (measured, budget): {over}; all: {got}"
    # the scrape adds job and instance
    assert got["max labels per series"] + 2 <= MIMIR_LABEL_LIMIT


def test_budget_table_covers_every_setup_and_figure():
    b = budget()
    assert set(b) == {"defaults", "attribution + 2 copied labels"}, b
    for row in b.values():
        assert set(row) == {"series per GPU", "node series", "series at 8 GPUs", "max labels per series",
                            "bytes per scrape", "gzip bytes per scrape"}, row
        assert row["max labels per series"] + 2 <= MIMIR_LABEL_LIMIT


def test_defaults_stay_within_budget(gpulse_proc, nvml_env):
    g = gpulse_proc("--source", "nvml", "--analysis-window", "3s", env=nvml_env)
    text, gz = settled(g)
    got = measure(text, gz)
    print("defaults:", got)
    check("defaults", got)


@pytest.fixture
def kube_env(tmp_path):
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        pytest.importorskip("grpc")
        pytest.importorskip("cryptography")
    from testing.fakekube import FakeApiServer, FakeCluster, FakeKubelet, FakePod
    uuids = [fake_uuid(i) for i in range(GPUS)]
    # two jobs, four GPUs each; each pod carries both copied labels
    cluster = FakeCluster([
        FakePod(name=f"job{j}-0", namespace="research", node="node-1",
                devices={"trainer": {"nvidia.com/gpu": uuids[4 * j:4 * j + 4]}},
                labels={"training.kubeflow.org/job-name": f"job{j}", "team": "llm",
                        "app.kubernetes.io/name": "trainer"})
        for j in range(2)])
    sa = tmp_path / "sa"
    sa.mkdir()
    kubelet = FakeKubelet(cluster, str(tmp_path / "kubelet.sock"), node="node-1")
    api = FakeApiServer(cluster, str(sa))
    env = {"KUBERNETES_SERVICE_HOST": api.host, "KUBERNETES_SERVICE_PORT": api.port,
           "KUBERNETES_SERVICEACCOUNT_DIR": str(sa)}
    try:
        yield kubelet.socket_path, env
    finally:
        for part in (kubelet, api):
            part.stop()


def test_attribution_with_two_copied_labels_stays_within_budget(gpulse_proc, kube_env, nvml_env):
    socket_path, env = kube_env
    g = gpulse_proc("--source", "nvml", "--node-name", "node-1", "--analysis-window", "3s", "--kube.enabled",
                    "--kube.pod-resources-socket", socket_path, "--kube.refresh-interval", "1s",
                    "--kube.copy-labels", ",".join(COPIED), env={**nvml_env, **env})
    g.wait_metrics(lambda t: 'label_app_kubernetes_io_name="trainer"' in t and 'workload="job1"' in t
                   and "gpulse_group_active{" in t, "attributed series", timeout=60)
    text, gz = scrape(g)
    got = measure(text, gz)
    print("attribution:", got)
    check("attribution + 2 copied labels", got)
