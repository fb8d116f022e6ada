"""The real 8xH100 ckpt1 trace exported with `gpulse export` at a 15 s scrape and
backfilled into the Debian `prometheus` with the shipped recording rules, for the
tests of the heatmap's cells (the benchmarks' Prometheus over blocks,
bench/dashboards_scale.py)."""
from __future__ import annotations

from contextlib import contextmanager

from bench import stall_visibility as sv
from bench.dashboards_scale import Prometheus, backfill_rules
from conftest import ROOT, require_binary, require_data


CKPT1 = ROOT.parent / "shared" / "data" / "traces" / "h100-8gpu" / "ckpt1.csv"
NODE = "h100-ckpt1"


@contextmanager
def backfilled(tmp_path_factory, tag: str, lead_s: int):
    """The ckpt1 trace exported at a 15 s scrape into a running Prometheus with
    the recording rules backfilled from `lead_s` before the run to 10 minutes
    after it: (prometheus, run start, run end)."""
    require_binary("prometheus")
    require_binary("promtool")
    log = require_data(CKPT1)
    work = tmp_path_factory.mktemp(tag)
    sv.export_and_load(log, NODE, "15s", work / "data", work)
    _, (start, end) = sv.episodes(log, NODE)
    p = Prometheus(work / "data", work, retention="100y")
    p.start()
    try:
        backfill_rules(p, int(start) - lead_s, int(end) + 600, work)
        yield p, start, end
    finally:
        p.stop()
