"""gpulse's Grafana dashboards, built with grafana-foundation-sdk.

`build_all()` returns {file name: dashboard JSON (a dict)}; grafana/generate.py
writes them to grafana/dashboards/. The JSON is committed and a test checks that
it is exactly what this package produces, so the dashboards are never edited by
hand.
"""
from __future__ import annotations

from .common import SDK_VERSION, require_sdk


def build_all() -> dict[str, dict]:
    require_sdk()
    # Imported here so that a missing or wrong SDK is reported by require_sdk()
    # in one line instead of an ImportError from deep inside a builder.
    from . import cluster, exporter, node, workload
    from .common import to_json

    return {
        "gpulse-cluster-heatmap.json": to_json(cluster.build()),
        "gpulse-training-workload.json": to_json(workload.build()),
        "gpulse-node-detail.json": to_json(node.build()),
        "gpulse-exporter-health.json": to_json(exporter.build()),
    }


__all__ = ["SDK_VERSION", "build_all", "require_sdk"]
