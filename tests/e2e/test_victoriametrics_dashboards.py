"""Every dashboard query through VictoriaMetrics, in virtual time: the dashboards'
three nodes (a simulated node with periodic sync stalls and one with a straggler,
attributed to Slurm jobs, and a `--source dcgm` node reading a real dcgm-exporter
capture) run through the engine offline and scraped every second, their series
imported into the Debian `victoria-metrics` (1.79) with their timestamps and a scrape's
`job` and `instance`, the shipped rules (vmalert variant, hold times scaled by 0.01 as
in tests/e2e/test_victoriametrics_e2e.py) evaluated over them by `vmalert -replay`,
then each panel target sent as Grafana sends it for the range ending where the run
ends. Nothing waits on a clock: what the live test waited minutes for (two
evaluations of a 1m group) is replayed. The few targets only a live stack answers
are checked there (`testing/vmstack.checked_live`)."""
from __future__ import annotations

import re
import time

import pytest

from testing.config import test_config
from testing.daemons import require_data
from testing.dashstack import (DCGM_NODE, STALL_JOB, STALL_NODE, STRAGGLER_JOB, STRAGGLER_NODE, VARIABLES,
                               grafana_requests, run)
from testing.fakedcgm import node_exporter
from testing.promutil import scrape_run
from testing.vmstack import VictoriaMetrics, checked_live, rule_dirs

SECONDS = 6 * 60.0    # long enough for the 5m rules and two evaluations of every 1m group
SCRAPE = 1.0          # the dashboards' test datasource interval (testing/dashstack.py)


def recorded(source_name: str, node: str, now: float, workload: str = "", **settings):
    """(metric families, first and last scrape) of a node run in virtual time, its
    last scrape 5 s before `now`."""
    from gpulse.sources import make_source

    cfg = test_config(source=source_name, node_name=node, **settings)
    _, families, first, last, _ = scrape_run(cfg, make_source(cfg), SECONDS, SCRAPE, ago=5.0, workload=workload,
                                             now=now)
    return families, first, last


class Store:
    """victoria-metrics holding the recorded nodes and the replayed rules; `api` and
    `at` as testing/dashstack.run reads them."""

    def __init__(self, tmp):
        dcgm = node_exporter(require_data("captures/dcgm-exporter/l4-gpu-operator.prom").read_text())
        # One end for every node: the panels ask for the instant where the runs end,
        # and a node recorded earlier (a loaded machine takes minutes over three
        # runs) would have ended before it, its 5m records gone stale there.
        now = time.time()
        try:
            runs = [(STALL_NODE, recorded("sim", STALL_NODE, now, STALL_JOB, sim__scenario="sync-stall")),
                    (STRAGGLER_NODE, recorded("sim", STRAGGLER_NODE, now, STRAGGLER_JOB, sim__scenario="straggler")),
                    (DCGM_NODE, recorded("dcgm", DCGM_NODE, now, dcgm__url=dcgm.url, dcgm__interval=1.0))]
        finally:
            dcgm.stop()
        self.vm = VictoriaMetrics(tmp, None, None, external_labels={"cluster": "local"})
        try:
            for i, (node, (families, _, _)) in enumerate(runs):
                self.vm.import_families(families, job="gpulse", instance=f"127.0.0.1:{9400 + i}")
            start = min(first for _, (_, first, _) in runs)
            self.at = max(last for _, (_, _, last) in runs)
            _, variant = rule_dirs(tmp)
            self.vm.replay(sorted(variant.glob("*.yml")), start, self.at)
        except BaseException:
            self.vm.stop()
            raise

    def api(self, path: str, **params) -> list:
        return self.vm.api(path, **params)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = Store(tmp_path_factory.mktemp("vm-dashboards"))
    yield s
    s.vm.stop()


@pytest.mark.parametrize("uid", sorted(set(VARIABLES) - {"gpulse-exporter-health"}))
def test_every_dashboard_query_returns_data_through_victoriametrics(store, uid):
    """Every target but those checked on the live stack (`vmstack.checked_live`)."""
    asked = [r for r in grafana_requests(uid) if not checked_live(uid, r.where)]
    assert asked
    empty = [r.where for r in asked if not run(store, r)]
    assert not empty, "panel queries that returned no data from victoria-metrics:\n  " + "\n  ".join(empty)


def test_heatmap_row_keys_are_well_formed_through_victoriametrics(store):
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
        for x in run(store, r):
            m = x["metric"]
            key = m["node"] + (f"/{int(m['gpu']):02d}" if gpus else "")
            if ranked:
                assert re.fullmatch(r"\d{4}/" + re.escape(key), m.get("device", "")), f"{r.where}: {m}"
            elif gpus:
                assert m.get("device") == key, f"{r.where}: {m}"
            checked += 1
    assert checked > 0
