"""The live page names why a straggler is slow and what to do, beside its mark.

A `gpulse serve --source sim --sim.scenario straggler-throttled` process (GPU 3 held
down by hw_thermal and sw_power_cap) in headless Chromium: once the engine has
confirmed and judged the straggler, its row label carries the cause and the list
under the cards the cause, the remedy and the evidence, the same cause /metrics
exports. The page reads it from the published snapshot through /api/heatmap. The
exporter runs the minutes the verdict takes in virtual time (testing/virtualclock.py)."""
from __future__ import annotations

import re

import requests

from testing.browser import WebDriverWait, browser, console_errors, load  # noqa: F401 (browser: a fixture)

from gpulse.analysis.cause import REMEDIES
from gpulse.analysis.thresholds import value
from testing import virtualclock

# the analysis window fills, the straggler deviates straggler_min_span_seconds, a margin
SPAN = 2 * value("straggler_min_span_seconds") + 60


def test_live_page_names_the_cause_and_remedy_of_a_throttled_straggler(browser, gpulse_proc):  # noqa: F811
    g = gpulse_proc("--source", "sim", "--sim.scenario", "straggler-throttled", "--sim.gpus", "8",
                    "--node-name", "n1", env=virtualclock.env(SPAN))
    virtualclock.wait_spent(g.url, 120)   # a bound on CPU, not on the verdict's minutes
    load(browser, g.url + "/")
    # the page polls every few seconds
    WebDriverWait(browser, 30, poll_frequency=0.5).until(
        lambda d: d.find_elements("css selector", '#causes li[data-gpu="3"]')
        and "throttling" in d.find_element("css selector", '#causes li[data-gpu="3"]').text)

    item = browser.find_element("css selector", '#causes li[data-gpu="3"]').text
    assert item.startswith("GPU 3: throttling — " + REMEDIES["throttling"]), item
    assert "do not rebalance" in item and "Evidence: " in item and "hw_thermal throttle" in item, item
    [row] = browser.find_elements("css selector", "#labels .row-label.straggler")
    tag = row.find_element("css selector", ".cause")
    assert row.text.endswith("GPU 3") and tag.text == "throttling"
    assert REMEDIES["throttling"] in tag.get_attribute("title")
    assert len(browser.find_elements("css selector", "#causes li")) == 1

    # the page says what the exporter publishes
    [s] = requests.get(g.url + "/api/heatmap", timeout=10).json()["stragglers"]
    assert (s["gpu"], s["cause"], s["remedy"]) == ("3", "throttling", REMEDIES["throttling"])
    assert any("hw_thermal throttle" in e for e in s["evidence"]), s
    exported = [dict(re.findall(r'(\w+)="([^"]*)"', line)) for line in g.metrics().splitlines()
                if line.startswith("gpulse_gpu_straggler_cause{") and line.endswith(" 1.0")]
    assert [(x["gpu"], x["cause"]) for x in exported] == [("3", "throttling")], exported
    assert console_errors(browser) == []
