"""bench/fleet.py's path into Prometheus at fleet size: the node-shard files of one hour
hold, line for line, the OpenMetrics text of the whole cluster for that hour, each one a
valid file promtool loads; their blocks overlap in time, and Prometheus serves them as
one: every series with every sample. (Prometheus merges overlapping blocks into one per
hour too, but only on its compaction timer, a minute after start: bench/fleet.py waits
for that, as it measures the merged store; a test would only wait on Prometheus's
clock.)"""
from __future__ import annotations

import time
from pathlib import Path

import requests

from conftest import require_binary
from bench import fleet  # noqa: E402
from bench.lib.dashboards_data import Cluster  # noqa: E402

NODES = 12          # jobs of 4, 4, 2, 2 nodes: with 2 patterns the 4-node jobs repeat one
PATTERNS = 2
SHARD_NODES = 5     # shards cut across jobs and patterns: nodes 0-4, 5-9, 10-11
T0 = int(time.time()) // 7200 * 7200 - 7200
WINDOWS = ((T0, T0 + 600), (T0 + 600, T0 + 1200))   # counters carried across the boundary


def samples(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if not line.startswith("#")]


def test_node_shards_hold_the_whole_cluster_and_prometheus_serves_them_as_one(tmp_path):
    promtool = require_binary("promtool")
    require_binary("prometheus")
    whole, sharded = Cluster(NODES, patterns=PATTERNS), Cluster(NODES, patterns=PATTERNS)
    data = tmp_path / "data"
    series = 0
    for w0, w1 in WINDOWS:
        expected, _ = whole.write_window(tmp_path / "whole.om", w0, w1)
        files = list(fleet.write_shards(sharded, w0, w1, SHARD_NODES, lambda i: tmp_path / f"{w0}-{i}.om"))
        assert len(files) == 3
        assert sum(s for _, s, _ in files) == expected
        lines = [line for path, _, _ in files for line in samples(path)]
        assert sorted(lines) == sorted(samples(tmp_path / "whole.om"))
        for path, _, _ in files:
            nodes = {fleet.node_of(line.split("{", 1)[1]) for line in samples(path)}
            assert nodes and {n // SHARD_NODES for n in nodes} == {int(path.stem.split("-")[1])}
            assert path.read_text().endswith("# EOF\n")
            fleet.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(path), str(data)])
        series = expected
    assert len(fleet.blocks(data)) == 6, "one block per shard file: they overlap"

    prom = fleet.prom_server(data, tmp_path)
    prom.start()
    try:
        end = WINDOWS[-1][1]

        def value(query: str) -> int:
            r = requests.get(prom.url + "/api/v1/query", timeout=60, params={"query": query, "time": end - 1})
            result = r.json()["data"]["result"]
            return int(result[0]["value"][1]) if result else 0
        names = requests.get(prom.url + "/api/v1/label/__name__/values", timeout=60).json()["data"]
        # every series of every family with all 80 scrapes of the 20 minutes
        assert sum(value(f"count(count_over_time({n}[20m]) == 80)") for n in names) == series
    finally:
        prom.stop()
