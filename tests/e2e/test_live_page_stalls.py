"""The live page in headless Chromium: sub-cell sync stalls show in a stall strip,
and after a replay the time axis reads in the log's time.

`make demo` runs the sync-stall scenario (0.3 s stalls every 2 s): in 1 s columns a
stall moves the work score a little, so the page draws, as the report does, one strip
per peer group in the stall colour at each column's share of stalled time. A balanced
node's strip stays clear. A 700 s log replayed at 50x fills 14 s of wall time; its
axis must span the log's ~12 minutes, not 14 seconds."""
from __future__ import annotations

import base64
import re
import time

import requests

from conftest import require_data
from testing.browser import WebDriverWait, browser, console_errors, load  # noqa: F401 (browser: a fixture)

from gpulse.palette import STALL_HEX
from gpulse.report.png import decode_png_rgb

STALL_RGB = tuple(int(STALL_HEX[i:i + 2], 16) for i in (1, 3, 5))


def data(url: str) -> dict:
    return requests.get(url + "/api/heatmap", timeout=10).json()


def strip_shares(doc: dict) -> list[float]:
    return [b / 254 for g in doc["groups"] for b in base64.b64decode(g["stall"]) if b != 255]


def stall_coloured(png: bytes) -> int:
    """Pixels of the strip screenshot tinted towards the stall colour (the strip blends
    the neutral paper towards magenta by the share): red and blue above green."""
    w, h, rows = decode_png_rgb(png)
    n = 0
    for row in rows:
        for x in range(w):
            r, g, b = row[3 * x:3 * x + 3]
            if r - g >= 10 and b - g >= 5:
                n += 1
    return n


def test_stalls_shorter_than_a_column_show_in_the_stall_strip(browser, gpulse_proc):  # noqa: F811
    stall = gpulse_proc("--source", "sim", "--sim.scenario", "sync-stall", "--sim.gpus", "8")
    calm = gpulse_proc("--source", "sim", "--sim.scenario", "balanced", "--sim.gpus", "8")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:         # a few columns with a stall in them
        if sum(s > 0.05 for s in strip_shares(data(stall.url))) >= 4:
            break
        time.sleep(1)
    doc = data(stall.url)
    shares = strip_shares(doc)
    assert sum(s > 0.05 for s in shares) >= 4, shares
    assert max(shares) < 0.6, shares            # 0.3 s of a 1 s column, never the whole column
    assert abs(doc["col_seconds"] - doc["interval"]) < 0.2 and doc["timeline"] == "live"

    load(browser, stall.url + "/")
    WebDriverWait(browser, 20).until(lambda d: d.find_element("id", "stallstrip").get_attribute("data-cols"))
    strip = browser.find_element("id", "stallstrip")
    assert strip.size["height"] >= 14 and strip.get_attribute("data-rows") == "1"
    assert stall_coloured(strip.screenshot_as_png) > 20
    assert browser.find_element("css selector", "#strip-labels .strip-label").text == "sync stalls"
    assert "stall strip" in browser.find_element("id", "stall-legend").text
    assert console_errors(browser) == []

    assert max(strip_shares(data(calm.url)), default=0.0) == 0.0
    load(browser, calm.url + "/")
    WebDriverWait(browser, 20).until(lambda d: d.find_element("id", "stallstrip").get_attribute("data-cols"))
    assert stall_coloured(browser.find_element("id", "stallstrip").screenshot_as_png) == 0


def test_after_a_replay_the_axis_reads_in_the_logs_time(browser, gpulse_proc):  # noqa: F811
    log = require_data("traces/h100-8gpu/ckpt50.csv")
    g = gpulse_proc("--source", "replay", "--replay.file", str(log), "--replay.speed", "50")
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not data(g.url)["stale"]:   # the replay has finished
        time.sleep(1)
    doc = data(g.url)
    assert doc["stale"] and doc["timeline"] == "log"
    span = doc["cols"] * doc["col_seconds"]
    assert 600 < span < 800, (doc["cols"], doc["col_seconds"])     # the log's ~700 s, not ~14 s of wall time
    load(browser, g.url + "/")
    labels = [s.text for s in browser.find_elements("css selector", "#axis span")]
    m = re.fullmatch(r"−(\d+) min", labels[0])
    assert m and 10 <= int(m.group(1)) <= 13, labels
    assert labels[-1] == "latest (log time)", labels
    assert console_errors(browser) == []
