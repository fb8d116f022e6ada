"""report.html and the live page in Chromium when the names in them are hostile (a
log's file name, a dcgm Hostname, the node name, a workload): nothing they hold runs
(no handler fires, no CSP violation is even logged), and the page still draws its
heatmap."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from conftest import ROOT
from hostilelogs import HOSTILE, HOSTILE_FILE, dcgm_text
from testing.browser import (browser, console_errors, load, nearest_fraction, row_colours,  # noqa: F401
                             wait_rows)  # (browser: a fixture)
from reportutil import hostile_analysis

from gpulse.report.outputs import write_outputs


def _untouched(driver, rows: int, canvas: str = "heatmap") -> None:
    assert driver.execute_script("return window.pwned === undefined")
    assert console_errors(driver) == []
    assert driver.find_element("id", canvas).get_attribute("data-rows") == str(rows)
    fractions = [nearest_fraction(c) for c in row_colours(driver, canvas)]
    assert fractions[0] > 0.9 and fractions[-1] < 0.2, fractions


def test_report_from_a_log_with_hostile_names(browser, tmp_path):  # noqa: F811
    log = tmp_path / HOSTILE_FILE
    log.write_text(dcgm_text(HOSTILE, HOSTILE))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "exporter")}
    p = subprocess.run([sys.executable, "-m", "gpulse", "report", "--input", str(log), "--out", str(tmp_path / "out"),
                        "--quiet"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    load(browser, (tmp_path / "out" / "report.html").as_uri())
    _untouched(browser, 4)
    assert browser.title == f"gpulse report — {HOSTILE_FILE} (dcgm)"
    assert HOSTILE_FILE in browser.find_element("tag name", "h1").text


def test_report_with_hostile_node_and_workload_names(browser, tmp_path):  # noqa: F811
    write_outputs(hostile_analysis(), str(tmp_path))
    load(browser, (tmp_path / "report.html").as_uri())
    _untouched(browser, 4)
    labels = [e.get_attribute("textContent") for e in
              browser.find_elements("css selector", "#heatmap-section .row-label")]
    assert labels[-1].endswith(f"{HOSTILE}2 GPU 3"), labels
    # the layout the stylesheet now carries (no inline style attributes): rows keep their height
    assert browser.execute_script(
        "return document.querySelector('#heatmap-section .row-label').getBoundingClientRect().height") > 8


def test_live_page_with_a_hostile_node_name(browser, gpulse_proc):  # noqa: F811
    g = gpulse_proc("--source", "sim", "--sim.scenario", "imbalance", "--sim.gpus", "4", "--node-name", HOSTILE)
    time.sleep(3)
    load(browser, g.url + "/")
    wait_rows(browser, 4)
    _untouched(browser, 4)
    assert browser.title == f"gpulse {HOSTILE}"
