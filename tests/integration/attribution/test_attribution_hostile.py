"""Attribution label values a tenant controls, through a real `gpulse serve` and a
fake kubelet: what they cost /metrics is bounded by gpulse, not by the tenant."""
from __future__ import annotations

import os

import pytest

if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
    pytest.importorskip("grpc")

from testing.fakekube import FakePod  # noqa: E402
from kubefixtures import NODE, cluster, kubelet, sim_uuid  # noqa: E402,F401 (cluster, kubelet: fixtures)


def test_megabyte_pod_name_keeps_metrics_small(kubelet, gpulse_proc):
    """A 1 MiB name on 2 GPUs made /metrics 53 MB; now it costs 262 characters a
    series and is counted in gpulse_attribution_rewritten_label_values."""
    huge = "w" * (1 << 20)
    kubelet.cluster.set_pods([FakePod(name=huge, namespace="ml", node=NODE,
                                      devices={"worker": {"nvidia.com/gpu": [sim_uuid(0), sim_uuid(1)]}})])
    g = gpulse_proc("--source", "sim", "--sim.gpus", "2", "--node-name", NODE,
                    "--kube.pod-resources-socket", kubelet.socket_path, "--no-kube.api",
                    "--kube.refresh-interval", "1s")
    text = g.wait_metrics(lambda t: 'pod="www' in t, "the attributed series")
    assert len(text.encode()) < 200_000, len(text.encode())
    assert f'gpulse_attribution_rewritten_label_values{{node="{NODE}"}} 1.0' in text
    pods = {line.split('pod="', 1)[1].split('"', 1)[0] for line in text.splitlines() if 'pod="w' in line}
    assert len(pods) == 1 and len(pods.pop()) == 253 + 9
