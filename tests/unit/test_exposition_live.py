"""The per-scrape part of /metrics: the staleness series written into pre-rendered
families (byte for byte what prometheus_client's encoders write), and process_* read
at most once per PROCESS_MAX_AGE."""
from __future__ import annotations

import gzip
import time

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from gpulse.collector import PROCESS_MAX_AGE, Exposition, _render, _Static, live_families
from gpulse.drive import run_offline
from gpulse.sources import make_source
from testing.config import test_config

HOSTILE_NODE = 'node "7"\\ with\na newline'


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _cpu_value(body: bytes) -> float:
    [line] = [ln for ln in body.decode().splitlines() if ln.startswith("process_cpu_seconds_total")]
    return float(line.split()[-1])


def _burn_cpu(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


@pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
@pytest.mark.parametrize("health", [
    {"stale": False, "seconds_since_success": 0.0},
    {"stale": True, "seconds_since_success": 12.345678901},
    {"stale": False, "seconds_since_success": 1e-7},
    {"stale": True, "seconds_since_success": float("inf")},
    {"stale": False, "seconds_since_success": 3},
])
def test_live_series_are_what_the_encoder_writes(openmetrics, health):
    exp = Exposition(HOSTILE_NODE, lambda: None, lambda: health)
    want = _render(_Static(live_families(HOSTILE_NODE, health)), openmetrics)
    if openmetrics:
        want = want[: -len(b"# EOF\n")]
    assert exp.live.render(openmetrics) == want


def test_process_series_are_read_at_most_once_per_max_age():
    clock = Clock()
    exp = Exposition("n", lambda: None, lambda: {"stale": False, "seconds_since_success": 0.5}, clock=clock)
    first = exp.render(False)
    _burn_cpu(0.3)                                   # process_cpu_seconds_total moves by 0.3
    clock.t += PROCESS_MAX_AGE * 0.9
    assert _cpu_value(exp.render(False)) == _cpu_value(first)
    clock.t += PROCESS_MAX_AGE * 0.2                 # now older than the limit: read again
    assert _cpu_value(exp.render(False)) >= _cpu_value(first) + 0.25
    _burn_cpu(0.3)
    clock.t -= 50                                    # a clock that went back never pins old values
    assert _cpu_value(exp.render(False)) >= _cpu_value(first) + 0.5


def test_live_part_follows_health_on_every_scrape():
    clock, health = Clock(), {"stale": False, "seconds_since_success": 0.25}
    exp = Exposition("n", lambda: None, lambda: health, clock=clock)
    assert b'gpulse_exporter_seconds_since_last_sample{node="n"} 0.25\n' in exp.render(False)
    health = {"stale": True, "seconds_since_success": 9.5}
    body = exp.render(False)                         # same clock: process_* cached, staleness not
    assert b'gpulse_exporter_stale{node="n"} 1.0\n' in body
    assert b'gpulse_exporter_seconds_since_last_sample{node="n"} 9.5\n' in body


@pytest.fixture(scope="module")
def snapshot():
    cfg = test_config(source="sim", sim__gpus=2)
    return [snap for _, snap in run_offline(make_source(cfg), cfg, until=3)][-1]


def test_whole_body_parses_and_keeps_its_family_order(snapshot):
    exp = Exposition(snapshot.node, lambda: snapshot, lambda: {"stale": False, "seconds_since_success": 0.1},
                     clock=Clock())                  # process_* the same in both renders below
    om = exp.render(True)
    assert om.endswith(b"\n# EOF\n") and om.count(b"# EOF") == 1
    names = [f.name for f in parse_openmetrics(om.decode())]
    text_names = [f.name for f in parse_text(exp.render(False).decode())]
    for order in (names, text_names):
        assert order[0] == "gpulse_build_info"
        live = order.index("gpulse_exporter_stale")
        assert order[live + 1] == "gpulse_exporter_seconds_since_last_sample"
        assert all(n.startswith("process_") for n in order[live + 2:]) and len(order) - live - 2 >= 4
        assert not any(n.startswith("process_") for n in order[:live])
    # gzip: members for the snapshot part and the live part, one stream for the client
    assert gzip.decompress(exp.render(True, gzip=True)) == om
