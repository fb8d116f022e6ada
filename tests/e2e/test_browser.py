"""report.html and the live page in headless Chromium (Debian's chromium + chromedriver,
driven by selenium): no console errors, no request outside the page, one heatmap row
per GPU with the right colours, and a screenshot that is a picture."""
import base64
import json
import time
from urllib.parse import urlsplit

import pytest
import requests

from tlsutil import bcrypt_hash, write_web_config

from testing.config import test_config
from gpulse.report.findings import analyse
from gpulse.report.inputs import from_source
from gpulse.report.png import decode_png_rgb
from gpulse.report.outputs import write_outputs
from gpulse.sources.sim import SimSource
from testing.browser import (WebDriverWait, browser, console_errors, load, nearest_fraction,  # noqa: F401
                             row_colours, wait_rows)  # (browser: a fixture)


def requested_urls(driver, page_url):
    """Every request the page (its document and what it loads or fetches) sent; the
    browser's own internal pages (new-tab resources) are not the page's."""
    urls = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent" and msg["params"].get("documentURL") == page_url:
            urls.append(msg["params"]["request"]["url"])
    return urls


def foreign(urls, origin):
    """Requests that leave the page: anything but its own origin and inline data."""
    return [u for u in urls if not u.startswith("data:") and _origin(u) != origin]


def _origin(url):
    p = urlsplit(url)
    return f"{p.scheme}://{p.netloc}"


def assert_picture(driver, element):
    png = base64.b64decode(element.screenshot_as_base64)
    w, h, rows = decode_png_rgb(png)
    assert w > 100 and h > 30
    colours = {rows[y][x:x + 3] for y in range(0, h, 2) for x in range(0, w * 3, 9)}
    assert len(colours) >= 4, "the heatmap screenshot is blank"


def make_report(tmp_path, scenario, gpus, seconds):
    cfg = test_config(source="sim", sim__scenario=scenario, sim__gpus=gpus, node_name="n1")
    rec = from_source(SimSource(cfg), cfg, f"sim {scenario}", until=seconds)
    write_outputs(analyse(rec), str(tmp_path))
    return tmp_path / "report.html"


def test_report_page(browser, tmp_path):
    page = make_report(tmp_path, "imbalance", 4, 120)
    url = page.as_uri()
    load(browser, url)
    assert console_errors(browser) == []
    urls = requested_urls(browser, url)
    assert url in urls
    assert foreign(urls, "file://") == []
    canvas = browser.find_element("id", "heatmap")
    assert canvas.get_attribute("data-rows") == "4"
    labels = [e.text for e in browser.find_elements("css selector", "#heatmap-section .row-label")]
    assert labels == ["GPU 0", "GPU 1", "GPU 2", "GPU 3"]
    fractions = [nearest_fraction(c) for c in row_colours(browser)]
    assert fractions[0] > 0.9 and fractions[1] > 0.9, fractions
    assert fractions[2] < 0.2 and fractions[3] < 0.2, fractions
    assert "work is unevenly distributed" in browser.find_element("id", "verdict").text
    assert_picture(browser, canvas)


def test_report_page_marks_stragglers_and_stalls(browser, tmp_path):
    load(browser, make_report(tmp_path, "checkpoint", 8, 150).as_uri())
    assert console_errors(browser) == []
    assert browser.find_element("id", "heatmap").get_attribute("data-rows") == "8"
    marked = browser.find_elements("css selector", "#heatmap-section .row-label.straggler")
    assert [e.get_attribute("data-gpu") for e in marked] == ["0"]
    assert len(browser.find_elements("css selector", ".band")) >= 4      # 15 s stalls every 30 s
    # switching to real work repaints: spin-waiting GPUs 1–7 turn darker
    before = row_colours(browser)
    browser.execute_script("const m = document.getElementById('mode'); m.value = 'active';"
                           "m.dispatchEvent(new Event('change'));")
    after = row_colours(browser)
    assert before[0] == after[0] or nearest_fraction(before[0]) == pytest.approx(nearest_fraction(after[0]), abs=0.05)
    assert sum(nearest_fraction(after[i]) for i in range(1, 8)) <= sum(nearest_fraction(before[i]) for i in range(1, 8))


def test_live_page(browser, gpulse_proc):
    g = gpulse_proc("--source", "sim", "--sim.scenario", "imbalance", "--sim.gpus", "4", "--node-name", "n1")
    time.sleep(3)
    load(browser, g.url + "/")
    wait_rows(browser, 4)
    # let it refresh at least once on its own
    first = browser.find_element("id", "status").text
    WebDriverWait(browser, 15).until(lambda d: d.find_element("id", "status").text != first)
    assert console_errors(browser) == []
    urls = requested_urls(browser, g.url + "/")
    assert foreign(urls, g.url) == []
    assert any(u.startswith(g.url + "/api/heatmap") for u in urls)
    labels = [e.text for e in browser.find_elements("css selector", "#labels .row-label")]
    assert labels == ["GPU 0", "GPU 1", "GPU 2", "GPU 3"]
    fractions = [nearest_fraction(c) for c in row_colours(browser)]
    assert fractions[0] > 0.9 and fractions[3] < 0.2, fractions
    assert float(browser.find_element("id", "imbalance").text) > 0.7
    assert_picture(browser, browser.find_element("id", "heatmap"))


def test_live_page_behind_basic_auth(browser, gpulse_proc, tmp_path):
    cfg = write_web_config(tmp_path / "web.yml", {"basic_auth_users": {"ops": bcrypt_hash("pw")}})
    g = gpulse_proc("--source", "sim", "--sim.scenario", "straggler", "--sim.gpus", "3",
                    "--web.config-file", str(cfg))
    for path in ("/", "/api/heatmap", "/metrics"):
        assert requests.get(g.url + path, timeout=5).status_code == 401
    assert requests.get(g.url + "/api/heatmap", auth=("ops", "pw"), timeout=5).json()["rows"] == \
        ["GPU 0", "GPU 1", "GPU 2"]
    token = base64.b64encode(b"ops:pw").decode()
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": "Basic " + token}})
    try:
        load(browser, g.url + "/")
        wait_rows(browser, 3)
        assert console_errors(browser) == []
    finally:
        browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {}})


def test_live_data_bad_window_is_400(gpulse_proc):
    g = gpulse_proc("--source", "sim", "--sim.gpus", "2")
    r = requests.get(g.url + "/api/heatmap?minutes=-3", timeout=5)
    assert r.status_code == 400 and r.json() == {"error": "minutes: expected a positive number, got '-3'"}
    doc = requests.get(g.url + "/api/heatmap?minutes=1", timeout=5).json()
    assert doc["rows"] == ["GPU 0", "GPU 1"] and len(base64.b64decode(doc["busy"])) == 2 * doc["cols"]


def test_the_checks_see_errors_and_foreign_requests(browser, tmp_path):
    """A page that breaks both rules is caught (the other page tests can fail)."""
    page = tmp_path / "bad.html"
    page.write_text("<!doctype html><body><img src='http://127.0.0.2:9/pixel.png'>"
                    "<script>document.body.dataset.ready = '1'; undefinedFunction();</script></body>")
    load(browser, page.as_uri())
    time.sleep(0.5)
    errors = console_errors(browser)
    assert any("undefinedFunction" in e for e in errors), errors
    assert foreign(requested_urls(browser, page.as_uri()), "file://") == ["http://127.0.0.2:9/pixel.png"]


# ------------------------------------------------------------------ palette, spans, many GPUs

def test_report_page_default_colouring_legend_and_finding_spans(browser, tmp_path):
    from gpulse import palette
    from gpulse.report.render import render_html
    cfg = test_config(source="sim", sim__scenario="checkpoint", sim__gpus=8, node_name="n1")
    a = analyse(from_source(SimSource(cfg), cfg, "sim checkpoint", until=150))
    doc = a.as_json()
    f = next(f for f in doc["findings"] if f["kind"] == "straggler")
    f["spans"] = [{"start": a.t0 + 40, "end": a.t0 + 100}]
    page = tmp_path / "report.html"
    page.write_text(render_html(a, doc))
    load(browser, page.as_uri())
    assert console_errors(browser) == []
    mode = browser.find_element("id", "mode")
    assert mode.get_attribute("value") == "work"
    assert [o.text for o in mode.find_elements("tag name", "option")] == list(palette.MODES.values())
    assert palette.LEGEND["cells"] in browser.find_element("css selector", ".legend-text").text
    # the stall bands are drawn in the palette's stall colour
    colour = browser.execute_script("return getComputedStyle(document.querySelector('.band')).borderLeftColor")
    assert colour == "rgb(%d, %d, %d)" % palette.STALL_RGB
    # the finding's lane: one bar from 40 s to 100 s of a 150 s run, and an outline over the rows
    lane = browser.find_element("css selector", ".strip.fspans span")
    plot = browser.find_element("id", "heatmap")
    left = (lane.rect["x"] - plot.rect["x"]) / plot.rect["width"]
    assert left == pytest.approx(40 / 150, abs=0.03) and lane.rect["width"] / plot.rect["width"] == \
        pytest.approx(60 / 150, abs=0.03)
    assert len(browser.find_elements("css selector", ".fbox")) == 1
    badge = browser.find_element("css selector", "#heatmap-section .row-label.straggler .badge")
    assert badge.text == palette.STRAGGLER["idler"][0] and "everyone waits for" in badge.get_attribute("title")


def test_report_page_of_many_gpus_has_node_rows_and_a_drill_down(browser, tmp_path):
    from reportutil import NODES, fleet
    a = analyse(fleet(NODES, "node-17"))
    write_outputs(a, str(tmp_path))
    load(browser, (tmp_path / "report.html").as_uri())
    assert console_errors(browser) == []
    assert browser.find_element("id", "heatmap").get_attribute("data-rows") == "33"
    assert browser.find_element("id", "drill").get_attribute("data-rows") == "8"
    labels = browser.find_elements("css selector", ".node-row")
    assert [e.text for e in labels[:3]] == ["node-1 (8 GPUs)", "node-2 (8 GPUs)", "node-3 (8 GPUs)"]
    assert all(e.size["height"] >= 9 for e in labels)
    def drill_text(d):
        return d.find_element("id", "drill").find_element("xpath", "ancestor::div[@class='hm-grid']").text
    # it opens on the worst node: node-17's own rows, GPU 1 (the hot straggler) brighter than its peers
    assert "node-17 GPU 0" in drill_text(browser)
    fractions = [nearest_fraction(c) for c in row_colours(browser, "drill")]
    assert fractions[1] > max(fractions[:1] + fractions[2:]) + 0.2, fractions
    assert_picture(browser, browser.find_element("id", "drill"))
    # a click on a node's row drills into that node
    browser.find_element("css selector", ".node-row[data-node='node-3']").click()
    WebDriverWait(browser, 10).until(lambda d: "node-3 GPU 0" in drill_text(d))
    fractions = [nearest_fraction(c) for c in row_colours(browser, "drill")]
    assert max(fractions) - min(fractions) < 0.1, fractions


def test_live_page_uses_the_palette_and_names_a_straggler(browser, gpulse_proc):
    from gpulse import palette
    from gpulse.analysis.thresholds import value
    from testing import virtualclock
    # the hot straggler is named as the GPU the others wait for once the model has
    # confirmed it: it must deviate for straggler_min_span_seconds (2 min) first,
    # which the exporter runs in virtual time
    g = gpulse_proc("--source", "sim", "--sim.scenario", "straggler", "--sim.gpus", "4", "--node-name", "n1",
                    env=virtualclock.env(2 * value("straggler_min_span_seconds") + 60))
    virtualclock.wait_spent(g.url, 120)   # a bound on CPU, not on the verdict's minutes
    load(browser, g.url + "/")
    wait_rows(browser, 4)
    assert browser.find_element("id", "mode").get_attribute("value") == "work"
    assert requests.get(g.url + "/api/heatmap", timeout=5).json()["work"]
    WebDriverWait(browser, 30).until(lambda d: d.find_elements("css selector", "#labels .badge"))
    badge = browser.find_element("css selector", "#labels .badge")
    assert badge.text == palette.STRAGGLER["busier"][0]
    assert "GPU 1 (hot)" in browser.find_element("id", "stragglers").text
    assert console_errors(browser) == []


def test_page_writes_times_as_the_report_does(browser, tmp_path):
    from gpulse.report.clock import Clock, elapsed
    load(browser, make_report(tmp_path, "balanced", 2, 30).as_uri())
    for s in (0, 12, 245, 3725):
        got = browser.execute_script("return gpulse.fmtTime(arguments[0], {epoch: false, t0: 0, offset: 0})", s)
        assert got == f"{elapsed(s)} into the recording" == Clock(epoch=False).when(s, 0)
    t = 1753576947.0            # 2025-07-27 00:42:27 UTC
    got = browser.execute_script("return gpulse.fmtTime(arguments[0], {epoch: true, t0: arguments[0] - 5, "
                                 "offset: 7200})", t)
    from gpulse.report.clock import parse_zone
    assert got == Clock(zone=parse_zone("+02:00")).when(t, t - 5) == "02:42:27 (5 s into the recording)"
