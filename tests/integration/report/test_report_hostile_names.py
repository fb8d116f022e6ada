"""Names from the input (a log's file name, a dcgm Hostname, a node, a workload) in
report.html and the live page: the template is filled in one pass, every value is
escaped for where it lands, and the CSP allows exactly the page's one script and one
stylesheet. Read back with Python's HTML parser; test_browser_hostile.py opens the
same pages in Chromium."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser

import requests

from conftest import ROOT
from hostilelogs import HOSTILE, HOSTILE_FILE, dcgm_api_json, dcgm_text

from testing.config import test_config
from gpulse.http.livepage import LivePage
from gpulse.report.render import render_html
from gpulse.safetext import csp_hash
from reportutil import hostile_analysis


class Page(HTMLParser):
    """Every element, attribute and script/style text of a page, as a browser's parser
    would split them."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.scripts: list[tuple[dict[str, str], str]] = []
        self.styles: list[str] = []
        self.text: list[str] = []
        self._open: tuple[str, dict[str, str]] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        self.tags.append((tag, a))
        self._open = (tag, a) if tag in ("script", "style") else None

    def handle_data(self, data):
        if self._open and self._open[0] == "script":
            self.scripts.append((self._open[1], data))
        elif self._open and self._open[0] == "style":
            self.styles.append(data)
        else:
            self.text.append(data)

    def handle_endtag(self, tag):
        self._open = None

    def csp(self) -> dict[str, list[str]]:
        [meta] = [a for t, a in self.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
        return {d.split()[0]: d.split()[1:] for d in meta["content"].split(";") if d.strip()}

    def data(self, element_id: str):
        [text] = [s for a, s in self.scripts if a.get("id") == element_id]
        return json.loads(text)


def assert_only_own_code(page: str) -> Page:
    """One executable script and one stylesheet, allowed by hash and by nothing else;
    no event handler, no style attribute, no element the input could have made."""
    p = Page(page)
    csp = p.csp()
    assert "'unsafe-inline'" not in " ".join(sum(csp.values(), []))
    code = [s for a, s in p.scripts if a.get("type") != "application/json"]
    assert len(code) == 1 and len([t for t, _ in p.tags if t == "script"]) == len(p.scripts)
    assert csp["script-src"] == [csp_hash(code[0])]
    assert len(p.styles) == 1 and csp["style-src"] == [csp_hash(p.styles[0])]
    assert [(t, k) for t, a in p.tags for k in a if k.startswith("on") or k == "style"] == []
    assert "{{" not in p.styles[0] and "{{" not in code[0]
    return p


def test_report_page_keeps_hostile_node_workload_and_source_names_as_text():
    a = hostile_analysis()
    doc = a.as_json()
    p = assert_only_own_code(render_html(a, doc))
    assert p.data("gpulse-findings") == json.loads(json.dumps(doc))
    assert p.data("gpulse-heatmap")["rows"] == [f"{HOSTILE} GPU 0", f"{HOSTILE} GPU 1",
                                                 f"{HOSTILE}2 GPU 2", f"{HOSTILE}2 GPU 3"]
    text = "".join(p.text)
    assert f"gpulse report — {HOSTILE_FILE}" in text and f"{HOSTILE}2 GPU 3" in text
    [title] = [s for s in p.text if s.startswith("gpulse report")][:1]
    assert title == f"gpulse report — {HOSTILE_FILE}"
    assert [a_["title"] for t, a_ in p.tags if a_.get("class", "").startswith("ph-work")][0].endswith(
        f"({HOSTILE})")


def test_report_cli_on_a_log_with_a_hostile_file_name_and_hostname(tmp_path):
    log = tmp_path / HOSTILE_FILE
    log.write_text(dcgm_text(HOSTILE, HOSTILE))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "exporter")}
    p = subprocess.run([sys.executable, "-m", "gpulse", "report", "--input", str(log), "--out", str(out), "--quiet"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "findings.json").read_text())
    assert {g["node"] for g in doc["gpus"]} == {HOSTILE}
    page = assert_only_own_code((out / "report.html").read_text())
    assert page.data("gpulse-findings") == doc
    assert re.search(r"\\u2028", (out / "report.html").read_text())      # escaped, never raw in a script
    assert "\u2028" not in "".join(s for _, s in page.scripts)


def test_live_page_keeps_a_hostile_node_name_as_text():
    class App:
        cfg = test_config(source="sim", node_name=HOSTILE)
        extra_routes: dict = {}
    page = assert_only_own_code(LivePage(App()).index(None)[2].decode())
    assert page.data("gpulse-boot")["node"] == HOSTILE
    assert f"gpulse — {HOSTILE}" in "".join(page.text)


def test_lone_surrogates_in_a_replayed_dcgm_json_are_replaced_where_it_is_read(tmp_path, gpulse_proc):
    log = tmp_path / "saved.json"
    log.write_text(dcgm_api_json("host\ud800", "pod\udfff"))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "exporter")}
    p = subprocess.run([sys.executable, "-m", "gpulse", "report", "--input", str(log), "--out", str(tmp_path / "out"),
                        "--quiet"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    doc = json.loads((tmp_path / "out" / "findings.json").read_text(encoding="utf-8"))
    assert {g["node"] for g in doc["gpus"]} == {"host\ufffd"}
    assert_only_own_code((tmp_path / "out" / "report.html").read_text(encoding="utf-8"))
    e = subprocess.run([sys.executable, "-m", "gpulse", "export", "--input", str(log)], capture_output=True,
                       timeout=120, env=env)
    assert e.returncode == 0, e.stderr.decode()
    assert 'pod="pod\ufffd"' in e.stdout.decode("utf-8") and e.stdout.endswith(b"# EOF\n")
    g = gpulse_proc("--source", "replay", "--replay.file", str(log), "--replay.speed", "0")
    assert 'pod="pod\ufffd"' in g.wait_metrics(lambda text: 'pod="pod' in text, "the replayed pod")


def test_a_file_name_that_is_not_utf8_is_shown_with_the_replacement_character(tmp_path):
    log = os.fsencode(tmp_path) + b"/run\xff.csv"        # Python holds the byte as a lone surrogate
    with open(log, "w") as fh:
        fh.write(dcgm_text("n1"))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "exporter")}
    p = subprocess.run([sys.executable, "-m", "gpulse", "report", "--input", log, "--out", str(tmp_path / "out"),
                        "--quiet"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    page = assert_only_own_code((tmp_path / "out" / "report.html").read_text(encoding="utf-8"))
    assert "gpulse report — run\ufffd.csv (dcgm)" in "".join(page.text)


def test_an_undecodable_node_name_is_served_with_the_replacement_character(gpulse_proc):
    # NODE_NAME holding a byte that is no UTF-8 (os.fsencode writes the surrogate as that byte)
    g = gpulse_proc("--source", "sim", "--sim.gpus", "2", env={"NODE_NAME": "n\udcff"})
    assert 'node="n\ufffd"' in g.wait_metrics(lambda text: "gpulse_gpu_up{" in text, "GPU series")
    page = assert_only_own_code(requests.get(g.url + "/", timeout=10).text)
    assert page.data("gpulse-boot")["node"] == "n\ufffd"
