"""bench/dashboards_scale.py --node-records: the nodes overview's data alone, as the
shipped dashboards read it. A few nodes' cell sums go through promtool into the Debian
`prometheus`, and the overview, in both row orders, is sent as Grafana sends it: one row
per node, every cell a share, the stall columns dark, and worst first shows the
WORST_ROWS nodes furthest from the median, the furthest on top. If the records or the
overview's query change shape, this fails instead of the benchmark timing empty answers."""
from __future__ import annotations

import time

import requests

from conftest import require_binary
from bench import dashboards_scale as ds  # noqa: E402
from gpulse_dashboards.queries import WORST_ROWS  # noqa: E402  (grafana/ on the path through ds)

NODES = WORST_ROWS + 21     # more than worst first shows; odd, so the median is one node's
T0 = int(time.time()) // 7200 * 7200 - 7200
ONLY = "/ Nodes [A] metric=active|busy cells=increase15s"


def test_node_records_feed_the_nodes_overview(tmp_path):
    promtool = require_binary("promtool")
    require_binary("prometheus")
    data, om = tmp_path / "data", tmp_path / "nodes.om"
    series, samples = ds.write_node_records(om, NODES, T0, T0 + 3600)
    assert (series, samples) == (NODES * 4, NODES * 4 * 240)
    ds.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)])
    prom = ds.Prometheus(data, tmp_path, retention="100y")
    prom.start()
    try:
        # the shipped rules that read the node sums: worst first's recorded rank
        levels = [level for level in ds.node_record_rules() if level]
        assert levels, "no shipped rule reads the node cell sums"
        ds.backfill_rules(prom, T0, T0 + 3600, tmp_path, levels)
        reqs = {where.rsplit("order=", 1)[1]: (expr, step) for where, expr, _, step, _ in
                ds.requests_for("gpulse-cluster-heatmap", 3600 * 1000) if ONLY in where}
        assert set(reqs) == {"natural", ".+"}
        rows = {}
        for order, (expr, step) in reqs.items():
            r = requests.post(prom.url + "/api/v1/query_range", timeout=60, data={
                "query": expr, "start": T0 + 600, "end": T0 + 3000, "step": step}).json()
            assert r["status"] == "success", r
            rows[order] = [(s["metric"]["node"], [float(v) for _, v in s["values"]]) for s in r["data"]["result"]]
        natural = rows["natural"]
        assert [n for n, _ in natural] == [f"gpu-node-{i:04d}" for i in range(NODES)]
        cells = [v for _, vs in natural for v in vs]
        assert len(cells) >= NODES * 150 and all(0 <= v <= 1 for v in cells)
        assert min(cells) < 0.15 < max(cells)       # a stall column among working cells
        # worst first: the same rows, the nodes furthest from the median active share
        # first (the rank rounds the distance to 1/999). The rank is the recorded
        # distance minute by minute, averaged; every node here keeps its share but in
        # the stall columns, where all drop alike, so it orders as the share over the
        # range does
        share = requests.get(prom.url + "/api/v1/query", timeout=60, params={"time": T0 + 3000, "query": (
            f'sum by (node) (sum_over_time({ds.NODE_RECORD}{{signal="active"}}[1h]))'
            f' / sum by (node) (sum_over_time({ds.NODE_RECORD}{{signal="sampled"}}[1h]))')}).json()["data"]["result"]
        share = {s["metric"]["node"]: float(s["value"][1]) for s in share}
        median = sorted(share.values())[NODES // 2]
        ranked = [n for n, _ in rows[".+"]]
        assert len(ranked) == len(set(ranked)) == WORST_ROWS and set(ranked) < set(share)
        distance = [abs(share[n] - median) for n in ranked]
        assert all(a >= b - 1 / 999 for a, b in zip(distance, distance[1:])), (ranked, distance)
        # the nodes left out are no further from the median than the nearest shown
        left_out = [abs(share[n] - median) for n in set(share) - set(ranked)]
        assert max(left_out) <= min(distance) + 1 / 999, (max(left_out), min(distance))
        # each shown row holds the node's cells, as in natural order
        assert dict(rows[".+"]) == {n: dict(natural)[n] for n in ranked}
    finally:
        prom.stop()
