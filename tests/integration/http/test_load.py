"""200 concurrent scrapers plus 200 slowloris connections against a real `gpulse serve`.

The harness is bench/load.py's (the bench runs it for 60 s and prints the figures);
here it runs a shorter while and checks what must hold whatever the machine:
every scrape is answered 200, the idle connections are cut at the head deadline
and come back without starving anyone, and the exporter is healthy afterwards.
Latency percentiles are printed, not asserted (see bench/README.md).
"""
from __future__ import annotations

import os

import requests

from conftest import Gpulse
from bench.load import describe, run_load  # noqa: E402

SECONDS = float(os.environ.get("GPULSE_LOAD_SECONDS", "10"))


def test_200_scrapers_and_200_slowloris_connections(capsys):
    g = Gpulse("--source", "sim", "--sim.gpus", "8", "--web.max-requests", "256", "--web.timeout", "4s")
    try:
        r = run_load(g.port, scrapers=200, idle=200, duration=SECONDS, pid=g.proc.pid, interval=0.5)
        after = requests.get(g.url + "/metrics", timeout=5)
    finally:
        g.stop()
    with capsys.disabled():
        print()
        for line in describe(f"load test, {SECONDS:.0f}s", r):
            print(line)
    answered = sum(r["codes"].values())
    assert answered >= 200 * 2             # throughput is the bench's business; every scraper got through
    assert r["codes"] == {200: answered}, r["codes"]
    assert set(r["errors"]) <= {"retried after keep-alive close"}, r["errors"]
    assert r["cut"] >= 200 and r["refused"] == 0        # every idle connection was cut at least once
    assert after.status_code == 200 and "gpulse_gpu_busy_seconds_total" in after.text
    out = g.output()
    assert "Traceback" not in out and "ERROR" not in out, out[-2000:]
