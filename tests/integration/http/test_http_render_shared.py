"""Scrapes that arrive together for a snapshot not rendered yet share one render: the
first starts it on a worker thread, the others wait for it on the event loop (each in
its request slot) and are answered from the cache. Judged by counts (renders, worker
threads, answers), never by time."""
from __future__ import annotations

import dataclasses
import threading
import time

import requests

from conftest import wait_http
from liveserver import Live

SCRAPERS = 24


def _workers() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("gpulse-http-"))


def test_concurrent_scrapes_of_a_new_snapshot_share_one_render():
    live = Live(web__max_requests=64)
    try:
        wait_http(live.url + "/metrics", timeout=30)
        exp = live.rt.exposition
        renders: list[int] = []
        release = threading.Event()

        def slow_render_input():
            # called once per render of a snapshot, under the render lock: hold the
            # render until every scraper has asked, so they all find it in progress
            renders.append(1)
            release.wait(60)
            return None

        snap = dataclasses.replace(exp.get_snapshot())     # a snapshot no scrape has rendered
        exp.get_snapshot = lambda: snap
        exp.attribution_health = slow_render_input
        workers_before = _workers()
        answers: list[requests.Response] = []
        lock = threading.Lock()

        def scrape():
            r = requests.get(live.url + "/metrics", headers={"Accept-Encoding": "identity"}, timeout=60)
            with lock:
                answers.append(r)

        threads = [threading.Thread(target=scrape) for _ in range(SCRAPERS)]
        for t in threads:
            t.start()
        # every scraper is inside a request once the server counts them all in flight
        deadline = time.monotonic() + 60
        while live.server.in_flight < SCRAPERS and time.monotonic() < deadline:
            time.sleep(0.05)
        in_flight = live.server.in_flight
        release.set()
        for t in threads:
            t.join(90)
        assert in_flight == SCRAPERS
        assert [r.status_code for r in answers] == [200] * SCRAPERS
        assert len(renders) == 1
        assert _workers() <= workers_before + 1            # one thread rendered, none waited
        bodies = {r.text.split("# HELP gpulse_exporter_stale")[0] for r in answers}
        assert len(bodies) == 1 and "gpulse_gpu_up" in bodies.pop()
    finally:
        live.close()
