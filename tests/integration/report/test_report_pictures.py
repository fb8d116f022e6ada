"""The report's pictures and cards: one colour language (palette.py) in every view,
a heatmap.png that stands on its own, cards that agree with the findings, finding
spans, the time zone, large reports grouped by node, worst-first order."""
import json
import re
import subprocess
import sys
import os

import pytest

from conftest import ROOT, require_data

from gpulse import palette
from gpulse.report.clock import parse_zone, settle
from gpulse.report.errors import UsageError
from gpulse.report.figure import LANE, LINE, M, MIN_ROW_PX, STRIP, TEXT_H, render_png, wrap
from gpulse.report.findings import analyse
from gpulse.report.inputs import from_log
from gpulse.report.png import decode_png_rgb
from gpulse.report.render import Picture, ordered, render_html
from reportutil import NODES, fleet, sim_rec

TRACES = "traces/h100-8gpu/"
PKG = ROOT / "exporter" / "gpulse"
_cache = {}


def trace(name, zone=None):
    """(Analysis, findings.json) of a real trace, read once per session."""
    if (name, zone) not in _cache:
        rec = from_log(str(require_data(TRACES + name)))
        settle(rec, "nvidia-smi-csv", zone)
        a = analyse(rec)
        _cache[name, zone] = (a, a.as_json())
    return _cache[name, zone]


def rgb_at(rows, x, y):
    return tuple(rows[y][3 * x:3 * x + 3])


def near(a, b, tol=40):
    return sum(abs(p - q) for p, q in zip(a, b)) <= tol


def nearest_value(rgb):
    table = palette.lut()[:palette.NO_DATA]
    return min(range(len(table)), key=lambda i: sum((p - q) ** 2 for p, q in zip(table[i], rgb))) / (len(table) - 1)


# ------------------------------------------------------------------ one colour language


def test_pages_ship_the_palette_from_python():
    a, doc = trace("ckpt1000.csv")
    page = render_html(a, doc)
    data = json.loads(re.search(r'id="gpulse-heatmap">(.*?)</script>', page, re.S).group(1))
    assert data["palette"]["lut"] == palette.lut_hex()
    assert data["palette"]["stall_lut"][-2] == palette.STALL_HEX
    assert data["palette"]["default_mode"] == "work" and list(data["cells"]) == ["work", "busy", "active"]
    assert palette.css() in page
    assert palette.LEGEND["cells"] in page and palette.LEGEND["stall"] in page


def test_work_score_shows_the_stall_and_the_straggler():
    """ckpt50: during a checkpoint GPU 0 (off the GPU) is dark and GPUs 1–7 (spin-
    waiting) mid-tone; while all compute every row is bright: in one colouring."""
    a, doc = trace("ckpt50.csv")
    p = Picture(a, doc=doc)
    ep = max(a.episodes, key=lambda e: e.duration)
    col = int((ep.start + ep.duration / 2 - p.t0) / p.dt)
    work = p.cells["work"]
    assert work[0][col] / 254 < 0.2
    assert all(0.35 < work[r][col] / 254 < 0.65 for r in range(1, 8))
    busy = p.cells["busy"]
    assert all(busy[r][col] / 254 > 0.9 for r in range(1, 8))      # busy hides the stall
    computing = [c for c in range(p.cols) if all(work[r][c] / 254 > 0.9 for r in range(8))]
    assert len(computing) > 30


# ------------------------------------------------------------------ heatmap.png


def png_layout(png):
    """(width, height, rows, x of the plot's first column, [(y0, y1) of every row band])
    found from the pixels: bands are runs of palette-coloured pixels in the plot's
    middle column below the stall strip."""
    w, h, rows = decode_png_rgb(png)
    cells = set(palette.lut()[:palette.NO_DATA])
    y_mid = next(y for y in range(h) if sum(rgb_at(rows, x, y) in cells for x in range(w)) > w / 3)
    x0 = next(x for x in range(w) if rgb_at(rows, x, y_mid) in cells)
    xm = (x0 + w) // 2
    bands, start = [], None
    for y in range(h):
        inside = rgb_at(rows, xm, y) in cells
        if inside and start is None:
            start = y
        elif not inside and start is not None:
            bands.append((start, y))
            start = None
    return w, h, rows, x0, bands


def test_heatmap_png_stands_on_its_own():
    a, doc = trace("ckpt50.csv")
    png = render_png(a, doc=doc)
    w, h, rows, x0, bands = png_layout(png)
    assert w >= 800 and len(bands) == 8 and all(b - a_ >= 8 for a_, b in bands)   # one legible band per GPU
    ink, muted = palette.INK_RGB, palette.MUTED_RGB
    # a title across the top, a label left of every row
    assert sum(rgb_at(rows, x, y) == ink for y in range(12, 26) for x in range(12, 300)) > 300
    for y0, y1 in bands:
        assert any(rgb_at(rows, x, y) in (ink, muted) for y in range(y0, y1) for x in range(x0 - 60, x0 - 4))
    # the stall strip above the rows: stall colour over the longest stall, paper where all work
    strip_y = bands[0][0] - 3 - STRIP // 2
    plot_w = next(x for x in range(w - 1, 0, -1) if rgb_at(rows, x, bands[0][0]) in set(palette.lut())) - x0 + 1
    p = Picture(a, 2000, doc=doc)

    def x_of(t):
        return x0 + int((t - p.t0) / (p.t1 - p.t0) * plot_w)
    ep = max(a.episodes, key=lambda e: e.duration)
    assert near(rgb_at(rows, x_of(ep.start + ep.duration / 2), strip_y), palette.STALL_RGB)
    work_col = next(c for c in range(p.cols) if p.stall[c] == 0 and all(p.cells["work"][r][c] > 200 for r in range(8)))
    assert rgb_at(rows, x0 + int((work_col + 0.5) * plot_w / p.cols), strip_y) == palette.PAPER_RGB
    # GPU 0 dark and GPUs 1–7 mid-tone during the stall, in the default colouring
    xs = x_of(ep.start + ep.duration / 2)
    vals = [nearest_value(rgb_at(rows, xs, (y0 + y1) // 2)) for y0, y1 in bands]
    assert vals[0] < 0.2 and all(0.35 < v < 0.65 for v in vals[1:]), vals
    # an axis of ticks below the rows, the legend's stall swatch and gradient below that
    below = range(bands[-1][1] + 1, h)
    assert sum(rgb_at(rows, x, bands[-1][1] + 1) == ink for x in range(x0, x0 + plot_w)) > plot_w * 0.9
    assert any(rgb_at(rows, x, y) == palette.STALL_RGB for y in below for x in range(12, w))
    assert any(rgb_at(rows, x, y) == palette.STOPS[-1] for y in below for x in range(12, 400))


def text_pixels(rows, x0, x1, y0, y1):
    ink = (palette.INK_RGB, palette.MUTED_RGB)
    return sum(rgb_at(rows, x, y) in ink for y in range(y0, y1) for x in range(x0, x1))


@pytest.mark.parametrize("gpus", [8, 256, 1024])
def test_heatmap_png_is_readable_at_any_gpu_count_and_cuts_no_text(gpus):
    """8 GPUs: a real trace (ckpt50: long findings, three finding lanes); 256 and
    1,024: a fleet of 8-GPU nodes, one row per node and the worst node's GPUs."""
    if gpus == 8:
        a, doc = trace("ckpt50.csv")
    else:
        a = analyse(fleet([f"node-{i}" for i in range(gpus // 8)], "node-7"))
        doc = a.as_json()
    png = render_png(a, doc=doc)
    w, h, rows, x0, bands = png_layout(png)
    # a picture a chat preview shows legibly: at least 1280 px wide, 14 px letters
    assert w >= 1280 and TEXT_H >= 14
    assert len(bands) == (8 if gpus == 8 else gpus // 8 + 8) and all(b - a_ >= MIN_ROW_PX - 1 for a_, b in bands)
    assert h < 4000
    for y0, y1 in bands:                        # a label beside every row
        assert text_pixels(rows, M, x0 - 4, y0, y1) > 0
    # nothing runs into the right margin: text is wrapped, never drawn off the edge
    assert text_pixels(rows, w - M + 2, w, 0, h) == 0
    # every finding is in the picture whole: as many lines of text below the rows as
    # its wrapped lines, the last above the bottom margin
    p = Picture(a, 2000, doc=doc)
    chars = (w - 2 * M) // (6 * 2)
    lines = [ln for n, f in enumerate(p.findings[:8], 1) for ln in wrap(f"{n} [{f['severity']}] {f['text']}", chars)]
    assert all(len(ln) <= chars for ln in lines)
    text_rows = [y for y in range(bands[-1][1], h) if text_pixels(rows, M, w - M, y, y + 1) > 0]
    runs = sum(1 for a_, b in zip([None] + text_rows, text_rows) if a_ is None or b - a_ > 1)
    assert runs >= len(lines) and h - text_rows[-1] <= M + (LINE - TEXT_H) + 2
    if gpus == 8:
        # the finding lanes: each number inside its bar with a rim of ink above and
        # below it, and the gap to the next lane clear
        lane_top = bands[0][0] - 3 - STRIP - LANE * len(p.spans)
        for k in range(len(p.spans)):
            y = lane_top + k * LANE
            bar = [x for x in range(x0, w - M) if rgb_at(rows, x, y) == palette.INK_RGB]
            number = [x for x in bar if any(rgb_at(rows, x, yy) == palette.PAPER_RGB for yy in range(y, y + LANE - 2))]
            assert bar and number, k
            assert all(rgb_at(rows, x, y) == rgb_at(rows, x, y + LANE - 3) == palette.INK_RGB for x in number)
            assert all(rgb_at(rows, x, yy) == palette.PAPER_RGB for x in number for yy in (y + LANE - 2, y + LANE - 1))


def spans_doc(a, spans_by_kind):
    """findings.json with time spans on the findings of the given kinds, as the
    findings module writes them ("spans": [{"start": unix s, "end": unix s}])."""
    doc = a.as_json()
    for f in doc["findings"]:
        # only the given spans: the findings' own spans are cleared, so the picture
        # shows exactly what the test put there
        f["spans"] = [{"start": s, "end": e} for s, e in spans_by_kind.get(f["kind"], ())]
    return doc


def test_finding_spans_are_marked_in_the_png_and_the_page():
    a, _ = trace("ckpt50.csv")
    t0 = a.t0
    doc = spans_doc(a, {"straggler": [(t0 + 200, t0 + 320), (t0 + 500, t0 + 560)]})
    n = next(i for i, f in enumerate(doc["findings"], 1) if f["kind"] == "straggler")
    w, h, rows, x0, bands = png_layout(render_png(a, doc=doc))
    plain = png_layout(render_png(a, doc=spans_doc(a, {})))
    assert bands[0][0] - plain[4][0][0] == LANE               # one finding lane above the stall strip
    lane_y = bands[0][0] - 3 - STRIP - LANE + 1
    plot_w = plain[0] - M - x0
    p = Picture(a, 2000, doc=doc)

    def x_of(t):
        return x0 + int((t - p.t0) / (p.t1 - p.t0) * plot_w)
    inked = [x for x in range(x0, x0 + plot_w) if rgb_at(rows, x, lane_y + 4) in (palette.INK_RGB, palette.PAPER_RGB)
             and rgb_at(rows, x, lane_y + 6) == palette.INK_RGB]
    assert inked and x_of(t0 + 200) - 2 <= min(inked) <= x_of(t0 + 200) + 2
    assert not any(x_of(t0 + 330) < x < x_of(t0 + 490) for x in inked)
    assert max(inked) <= x_of(t0 + 560) + 2
    page = render_html(a, doc)
    assert page.count(f"class='strip fspans' data-finding='{n}'") == 1
    assert page.count(f"class='fbox' data-finding='{n}'") == 2
    item = re.search(rf"<li [^>]*data-finding='{n}'>(.*?)</li>", page).group(1)
    assert "when: " in item and "3 min 20 s to 5 min 20 s into the recording (2 min 00 s)" in item


def test_spans_outside_the_run_or_empty_are_ignored():
    a, _ = trace("ckpt50.csv")
    doc = spans_doc(a, {"straggler": [(a.t0 - 500, a.t0 - 100), (a.t0 + 50, a.t0 + 50)]})
    assert Picture(a, doc=doc).spans == []
    assert "class='strip fspans'" not in render_html(a, doc)


# ------------------------------------------------------------------ cards

def card_map(page):
    return {k: (v, note) for k, note, v in
            re.findall(r"<div class='card' data-card='([^']+)' title='([^']*)'>[^<]*<b>([^<]*)</b>", page)}


@pytest.mark.parametrize("name, idle", [("ckpt1.csv", "99 %"), ("ckpt50.csv", "71 %")])
def test_cards_agree_with_the_findings(name, idle):
    a, doc = trace(name)
    page = render_html(a, doc)
    c = card_map(page)
    [st] = doc["stragglers"]
    f = next(f for f in doc["findings"] if f["kind"] == "straggler")
    assert f"GPU 0 was idle {idle}" in f["text"]
    # the straggler card names the GPU the finding names, as the GPU the others wait for
    assert c["stragglers"][0] == "GPU 0 (cold)" and "everyone waits for" in c["stragglers"][1]
    # imbalance is split by what it is measured on: real work is ~0 (everybody spin-
    # waits or works off the GPU), utilisation shows GPU 0 apart, as the finding does
    # the real-work figure may carry "(stragglers')" where the straggler explains it
    real = float(re.match(r"[0-9.]+", c["imbalance_real"][0]).group())
    busy = float(c["imbalance_busy"][0])
    assert real < 0.1 and "real work (active)" in c["imbalance_real"][1]
    # the note says why it is low: the peers spin-wait, and either the straggler explains
    # the spread (its value says "stragglers'") or the utilisation imbalance shows it
    note = c["imbalance_real"][1]
    explained = "(stragglers" in c["imbalance_real"][0]
    assert "spin-wait" in note
    assert ("The stragglers explain this spread" in note) if explained else ("utilisation imbalance" in note)
    assert busy == pytest.approx(st["gap"] / st["peer_median"], abs=0.02) and busy > 0.6
    assert "utilisation (busy)" in c["imbalance_busy"][1]
    # the badge says what the GPU is, not that it is unused; times say what they mean
    assert "▼" not in page and "idler" not in re.sub(r"<script.*?</script>", "", page, flags=re.S)
    assert re.search(r"\(\+\d", page) is None
    assert "waited for · busy off the GPU" in page
    assert all(note for _, note in c.values())                 # every card says what it measures


def test_hot_straggler_card_and_badge():
    rec = sim_rec("straggler", "n1")
    a = analyse(rec)
    page = render_html(a, a.as_json())
    assert card_map(page)["stragglers"][0] == "GPU 1 (hot)"
    assert "waited for · most GPU work" in page and "hot straggler: the GPU everyone waits for" in page


# ------------------------------------------------------------------ time zone

def run_cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "exporter")}
    return subprocess.run([sys.executable, "-m", "gpulse", "report", *args], capture_output=True, text=True,
                          timeout=300, env=env)


def test_timezone_moves_a_zoneless_log_onto_unix_time(tmp_path):
    src = require_data(TRACES + "ckpt1000.csv")
    p = run_cli("--input", str(src), "--out", str(tmp_path / "utc"), "--quiet")
    q = run_cli("--input", str(src), "--out", str(tmp_path / "berlin"), "--quiet", "--timezone", "Europe/Berlin")
    assert p.returncode == 0 and q.returncode == 0, p.stderr + q.stderr
    plain = json.loads((tmp_path / "utc" / "findings.json").read_text())
    berlin = json.loads((tmp_path / "berlin" / "findings.json").read_text())
    # nvidia-smi wrote 00:47 local time; in Berlin in July that is 22:47 UTC the day before
    assert plain["run"]["start_time"].startswith("2025-07-27T00:47")
    assert berlin["run"]["start_time"].startswith("2025-07-26T22:47")
    assert any("carry no time zone" in n and "--timezone" in n for n in plain["notes"])
    assert not any("time zone" in n for n in berlin["notes"])
    # shown in the given zone, the wall clock reads as in the log, and says so
    page_utc = (tmp_path / "utc" / "report.html").read_text()
    page = (tmp_path / "berlin" / "report.html").read_text()
    assert "times: Europe/Berlin (UTC+02:00)" in page
    assert "zone unknown" in page_utc
    axis = re.compile(r"data-axis='wall'>(.*?)</div>")
    assert axis.findall(page) == axis.findall(page_utc) and "00:4" in axis.findall(page)[0]
    assert [f["text"] for f in berlin["findings"]] == [f["text"] for f in plain["findings"]]
    # spans are on the input's own timeline, which --timezone moves onto Unix time:
    # two hours earlier in Berlin's summer, and nothing else changes
    def spans(doc):
        return [[(round(x["start"], 3), round(x["end"], 3)) for x in f.get("spans", [])] for f in doc["findings"]]
    assert any(spans(plain))
    assert spans(berlin) == [[(a - 7200, b - 7200) for a, b in fs] for fs in spans(plain)]
    for d in (plain, berlin):
        for f in d["findings"]:
            f.pop("spans", None)
    assert berlin["findings"] == plain["findings"]


@pytest.mark.parametrize("bad, message", [
    ("Mars/Olympus", "gpulse: --timezone: unknown time zone 'Mars/Olympus': give an IANA name such as "
                     "Europe/Berlin or an offset such as +02:00"),
    ("+25:00", "gpulse: --timezone: offset '+25:00' is out of range (-14:00 to +14:00)"),
])
def test_bad_timezone_is_one_line(tmp_path, bad, message):
    p = run_cli("--input", str(ROOT / "README.md"), "--out", str(tmp_path), "--timezone", bad)
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [message]
    with pytest.raises(UsageError):
        parse_zone(bad)


# ------------------------------------------------------------------ many GPUs, order


def test_natural_order_is_node_then_gpu_index_numerically():
    rec = fleet(["node-10", "node-2", "node-1"], "node-2", gpus=12)
    a = analyse(rec)
    keys = [g.key for g in ordered(a, "natural")]
    assert keys[:3] == ["node-1:0", "node-1:1", "node-1:2"] and keys[9:12] == ["node-1:9", "node-1:10", "node-1:11"]
    assert [k.split(":")[0] for k in keys[::12]] == ["node-1", "node-2", "node-10"]
    worst = [g.key for g in ordered(a, "worst")]
    assert worst[0] == "node-2:1"                     # the straggler first, its node's GPUs after it
    assert {k.split(":")[0] for k in worst[:12]} == {"node-2"}


def test_a_large_report_shows_one_row_per_node_with_a_drill_down():
    a = analyse(fleet(NODES, "node-17"))
    doc = a.as_json()
    p = Picture(a, doc=doc)
    assert p.grouped and len(p.nodes) == 33 and [n for n, _, _ in p.nodes[:3]] == ["node-1", "node-2", "node-3"]
    page = render_html(a, doc)
    data = json.loads(re.search(r'id="gpulse-heatmap">(.*?)</script>', page, re.S).group(1))
    assert len(data["nodes"]) == 33 and data["row_height"] >= 9 and data["drill_row_height"] >= 9
    assert page.count("class='row-label node-row") == 33 and "id='drill'" in page
    flagged = re.findall(r"class='row-label node-row straggler' data-node='([^']+)'", page)
    assert flagged == ["node-17"]
    # the PNG: one legible row per node, then the worst node's eight GPUs, its straggler first
    w, h, rows, x0, bands = png_layout(render_png(a, doc=doc))
    assert len(bands) == 33 + 8 and all(b - a_ >= 8 for a_, b in bands)
    # rows a line of text high; above and below them the header, axis, legend and the
    # findings, wrapped whole at 14 px letters
    assert h < (33 + 8) * (MIN_ROW_PX + 2) + 700
    worst_page = render_html(a, doc, order="worst")
    first_node = re.search(r"data-node='([^']+)'", worst_page).group(1)
    assert first_node == "node-17"


def test_cli_order_flag(tmp_path):
    src = require_data(TRACES + "ckpt1.csv")
    p = run_cli("--input", str(src), "--out", str(tmp_path), "--quiet", "--order", "worst")
    assert p.returncode == 0, p.stderr
    labels = re.findall(r"class='row-label[^']*' data-gpu='([^']+)'", (tmp_path / "report.html").read_text())
    assert labels[0] == "0" and sorted(labels) == [str(i) for i in range(8)]     # the straggler first
    bad = run_cli("--input", str(src), "--out", str(tmp_path), "--order", "random")
    assert bad.returncode == 2 and "invalid choice: 'random'" in bad.stderr


def test_work_time_card_counts_parallel_groups_once():
    a = analyse(fleet(["node-1", "node-2", "node-3"], "node-2"))
    doc = a.as_json()
    span = a.rec.times[-1] - a.t0
    assert 60 < float(card_map(render_html(a, doc))["work"][0].rstrip(" s")) <= span


def test_binning_one_tick_per_column_matches_the_general_path():
    from gpulse.report import heatmap
    num = [0.0, 0.5, 1.2, float("nan"), 0.25, -0.1, 0.7]
    den = [1.0, 1.0, 1.0, 1.0, float("nan"), 1.0, 0.0]
    fast = heatmap.binned(num, den, len(num))
    assert list(fast) == [heatmap.cell(n / d) if d > 0 else palette.NO_DATA for n, d in zip(num, den)]
    assert list(fast) == [0, 127, 254, 255, 255, 0, 255]
    assert heatmap.binned(num[:2], den[:2], 1) == bytes([heatmap.cell(0.25)])
