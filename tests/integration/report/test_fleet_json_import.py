"""bench/fleet.py's fast path into VictoriaMetrics: the JSON-line import (/api/v1/import)
of a tiled cluster stores, series by series and sample by sample, what the OpenMetrics
text of the same cluster stores through /api/v1/import/prometheus; and the nodes that
repeat a pattern's values are still series of their own, under their own labels."""
from __future__ import annotations

import json
import time

import requests

from conftest import require_binary
from bench import fleet  # noqa: E402
from bench.lib.dashboards_data import Cluster  # noqa: E402

NODES = 12          # jobs of 4, 4, 2, 2 nodes: with 2 patterns the 4-node jobs repeat one
PATTERNS = 2
T0 = int(time.time()) // 7200 * 7200 - 7200     # inside victoria-metrics' retention
WINDOWS = ((T0, T0 + 600), (T0 + 600, T0 + 1200))   # counters carried across the boundary


def exported(vm: fleet.Victoria) -> dict[frozenset, list[tuple[int, float]]]:
    r = requests.post(vm.url + "/api/v1/export", data={"match[]": '{__name__!=""}'}, timeout=120)
    r.raise_for_status()
    out = {}
    for line in r.text.splitlines():
        row = json.loads(line)
        key = frozenset(row["metric"].items())
        out.setdefault(key, []).extend(zip(row["timestamps"], row["values"]))
    return {k: sorted(v) for k, v in out.items()}


def test_json_lines_store_what_the_text_stores(tmp_path):
    require_binary("victoria-metrics")
    text, lines = Cluster(NODES, patterns=PATTERNS), Cluster(NODES, patterns=PATTERNS)
    assert text.pattern != list(range(NODES)), "the cluster is not tiled: the test would not cover tiling"
    servers = [fleet.Victoria(tmp_path / name, tmp_path / f"{name}.log") for name in ("text", "json")]
    try:
        for vm in servers:
            vm.start()
        sent = 0
        for w0, w1 in WINDOWS:
            om = tmp_path / f"{w0}.om"
            series, _ = text.write_window(om, w0, w1)
            servers[0].load(om)
            sent = servers[1].load_json(lines.write_json_window(w0, w1))
            assert sent == series
        for vm in servers:
            vm.flush()
        from_text, from_json = (exported(vm) for vm in servers)
    finally:
        for vm in servers:
            vm.stop()

    assert len(from_json) == sent
    assert from_json.keys() == from_text.keys()
    for key, samples in from_text.items():
        assert from_json[key] == samples, dict(key)
        assert len(samples) == sum(w1 - w0 for w0, w1 in WINDOWS) // 15

    # a repeating node: its own labels throughout, the values of its pattern
    copy = next(n for n in range(NODES) if text.pattern[n] != n)
    source = text.pattern[copy]

    def busy(node: int):
        name = text.names[node]
        return {dict(k)["gpu"]: (dict(k), v) for k, v in from_json.items()
                if dict(k).get("__name__") == "gpulse_gpu_busy_seconds_total" and dict(k)["node"] == name}
    mine, theirs = busy(copy), busy(source)
    assert len(mine) == 8
    for gpu, (labels, values) in mine.items():
        assert labels["instance"] == f"{text.names[copy]}:9479"
        assert labels["pod"].endswith(f"-{copy:03d}")
        assert values == theirs[gpu][1]
