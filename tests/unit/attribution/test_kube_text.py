"""Text from a non-conformant API server: a lone surrogate (`"\\ud800"`) in a pod's
labels or owner is replaced where the PodList is read, so every name gpulse exports
is valid UTF-8 and /metrics keeps answering."""
from __future__ import annotations

from kubefixtures import WHOLE, api, attributor_for, cluster, gpu_pod, kubelet  # noqa: F401 (fixtures)

from gpulse.collector import encode
from prometheus_client.metrics_core import GaugeMetricFamily


def test_lone_surrogates_in_labels_and_owners_are_replaced(cluster, kubelet, api):  # noqa: F811
    cluster.set_pods([gpu_pod("p0", [0], labels={"team": "a\udfff"},
                              owners=[{"kind": "Job", "name": "job\ud800", "controller": True}])])
    att = attributor_for(kubelet, api, kube__copy_labels="team")
    att.refresh_once()
    got = att.lookup(WHOLE[0])
    assert (got["workload"], got["label_team"]) == ("job\ufffd", "a\ufffd")
    fam = GaugeMetricFamily("gpulse_gpu_up", "up", labels=list(got))
    fam.add_metric(list(got.values()), 1)
    assert 'workload="job\ufffd"' in encode([fam], openmetrics=False).decode("utf-8")
