"""Headless Chromium through selenium, for the page tests: the `browser` fixture (a
driver per test module; chromium, chromedriver and selenium missing: a skip on a
laptop, a failure in CI), a page loaded until it says it is ready, what its console
logged, and the colours of its heatmap rows."""
from __future__ import annotations


import pytest

from gpulse.palette import lut
from testing.daemons import IN_CI, require_binary

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # a laptop without the test extra
    webdriver = None


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chromium = require_binary("chromium")
    chromedriver = require_binary("chromedriver")
    if webdriver is None:
        if IN_CI:
            pytest.fail("selenium is not installed (CI=true: .ci/run must install it)")
        pytest.skip("selenium is not installed")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,900",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    # the driver path is given, so selenium never tries to download one
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=opts)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def load(driver, url):
    # leave the earlier page first: until it is gone its timers still fetch (from an
    # exporter a finished test stopped, ERR_CONNECTION_REFUSED), and a loaded machine
    # logged one between the drain and the navigation
    driver.get("about:blank")
    driver.get_log("browser")          # drop what earlier pages logged
    driver.get_log("performance")
    driver.get(url)
    WebDriverWait(driver, 20).until(lambda d: d.execute_script("return document.body.dataset.ready === '1'"))


def console_errors(driver):
    return [e["message"] for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def row_colours(driver, canvas_id="heatmap"):
    """The colour at the middle of every row band, read from the canvas itself."""
    return driver.execute_script("""
        const c = document.getElementById(arguments[0]);
        const rows = +c.dataset.rows, ctx = c.getContext('2d'), out = [];
        for (let r = 0; r < rows; r++) {
          const y = Math.floor((r + 0.5) * c.height / rows);
          const px = ctx.getImageData(Math.floor(c.width * 0.75), y, 1, 1).data;
          out.push([px[0], px[1], px[2]]);
        }
        return out;""", canvas_id)


def nearest_fraction(rgb):
    """Which utilisation a colour stands for, by the page's own colour table."""
    table = lut()[:255]
    best = min(range(255), key=lambda i: sum((a - b) ** 2 for a, b in zip(table[i], rgb)))
    return best / 254


def wait_rows(driver, n, timeout=20):
    WebDriverWait(driver, timeout).until(
        lambda d: d.find_element("id", "heatmap").get_attribute("data-rows") == str(n))
