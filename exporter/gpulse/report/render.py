"""report.html (self-contained), heatmap.png and findings.json from an Analysis.

report.html carries everything inline — CSS, the heatmap bytes, the drawing code —
and a Content-Security-Policy that forbids any fetch, so opening it offline or from
an archive shows the same picture.
"""
from __future__ import annotations

import html
import json
import math
import os
import time
from importlib import resources
from typing import Any, Sequence

from . import heatmap
from .collect import Recording
from .findings import Analysis
from .png import encode_png

MAX_COLUMNS = 4000           # heatmap columns in the HTML; more ticks are averaged into bins
PNG_MAX_WIDTH = 2000
TIMELINE_POINTS = 1000


def web_asset(name: str) -> str:
    return resources.files("gpulse").joinpath("web", name).read_text(encoding="utf-8")


def _script_json(doc: Any) -> str:
    """JSON safe inside <script>: no '</' can end the element early."""
    return json.dumps(doc, separators=(",", ":")).replace("</", "<\\/")


def row_height(rows: int) -> int:
    return max(3, min(18, 640 // max(rows, 1)))


class Picture:
    """The binned matrices every output draws from."""

    def __init__(self, a: Analysis, max_cols: int = MAX_COLUMNS):
        rec = a.rec
        self.a = a
        self.rec = rec
        self.gpus = rec.ordered_gpus()
        self.cols = heatmap.columns_for(rec.ticks, max_cols)
        self.t0 = a.t0
        self.t1 = rec.times[-1] if rec.ticks else a.t0
        self.dt = (self.t1 - self.t0) / self.cols if self.cols else rec.interval
        self.busy = [heatmap.binned(g.busy, g.sampled, self.cols) for g in self.gpus]
        self.active = [heatmap.binned(g.active, g.sampled, self.cols) for g in self.gpus]
        self.stall = self._stall_row()

    def _stall_row(self) -> bytes:
        """Share of each column the peer groups spent in sync stalls (mean over groups)."""
        groups = list(self.rec.groups.values())
        n = self.rec.ticks
        num = [0.0] * n
        den = [0.0] * n
        for gr in groups:
            for i in range(n):
                s = gr.stall[i]
                if gr.holding[i] and not math.isnan(s):
                    num[i] += s
                    den[i] += self.rec.interval
        return heatmap.binned(num, den, self.cols)

    def x(self, t: float) -> float:
        """Position of time t as a percentage of the heatmap width."""
        span = self.t1 - self.t0
        return 100.0 * (t - self.t0) / span if span > 0 else 0.0


# ------------------------------------------------------------------ HTML pieces

def _esc(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _axis(p: Picture, n: int = 8) -> str:
    span = p.t1 - p.t0
    if span <= 0:
        return ""
    out = []
    for k in range(n + 1):
        t = p.t0 + span * k / n
        if p.rec.epoch:
            label = time.strftime("%H:%M:%S" if span < 86400 else "%m-%d %H:%M", time.gmtime(t))
        else:
            label = f"+{t - p.t0:.0f} s"
        cls = " class='first'" if k == 0 else ""
        style = f"left:{p.x(t):.3f}%" if k < n else "right:0;transform:none"
        out.append(f"<span{cls} style='{style}'>{_esc(label)}</span>")
    return "<div class='axis'>" + "".join(out) + "</div>"


def _phase_strip(p: Picture) -> str:
    spans = []
    for s in p.a.spans:
        a, b = p.a.tick_start(s.a), p.a.tick_end(s.b)
        title = f"{s.kind.replace('_', ' ')}: {b - a:.0f} s" + (f" ({s.workload})" if s.workload else "")
        spans.append(f"<span class='ph-{s.kind}' style='left:{p.x(a):.3f}%;width:{max(p.x(b) - p.x(a), 0.05):.3f}%'"
                     f" title='{_esc(title)}'></span>")
    return "<div class='strip' id='phases'>" + "".join(spans) + "</div>"


def _bands(p: Picture, limit: int = 300) -> str:
    """Long stall episodes as translucent bands; short ones show in the stall strip."""
    long_eps = sorted((e for e in p.a.episodes if e.duration >= 2 * p.dt), key=lambda e: -e.duration)[:limit]
    return "".join(f"<div class='band' style='left:{p.x(e.start):.3f}%;width:{max(p.x(e.end) - p.x(e.start), 0.1):.3f}%'"
                   f" title='sync stall {e.duration:.1f} s'></div>" for e in long_eps)


def _labels(p: Picture, rh: int) -> str:
    marks = {s["key"]: s for s in p.a.stragglers}
    out = []
    for g in p.gpus:
        st = marks.get(g.key)
        cls = "row-label straggler" if st else "row-label"
        badge = ""
        if st:
            arrow = "▲ busier" if st["direction"] == "busier" else "▼ idler"
            badge = f"<span class='badge' title='straggler: {_esc(st['signal'])} z={st['z']:.1f}'>{arrow}</span>"
        out.append(f"<div class='{cls}' data-gpu='{_esc(g.key)}' style='height:{rh}px;font-size:{min(11, max(7, rh - 1))}px'>"
                   f"{badge}{_esc(p.rec.name(g))}</div>")
    return "".join(out)


def _legend() -> str:
    stops = ", ".join("#%02x%02x%02x" % c for c in heatmap.STOPS)
    return (f"<div class='legend'>0 %<div class='bar' style='background:linear-gradient(90deg, {stops})'></div>100 %"
            f"<span style='display:inline-block;width:12px;height:10px;background:#dddddd;border:1px solid #ccc'>"
            f"</span>no data <span class='band' style='position:static;display:inline-block;width:14px;height:10px'>"
            f"</span>sync stall</div>")


def _timeline(p: Picture, title: str, series: list[tuple[str, str, list[float]]]) -> str:
    """Inline SVG: one polyline per series of per-tick values (NaN = no value)."""
    w, h, top, bottom = 1000, 130, 8, 112
    parts = [f"<svg class='timeline' viewBox='0 0 {w} {h}' preserveAspectRatio='none' role='img' aria-label='{_esc(title)}'>"]
    for frac in (0, 0.5, 1):
        y = bottom - (bottom - top) * frac
        parts.append(f"<line class='grid' x1='0' x2='{w}' y1='{y:.1f}' y2='{y:.1f}'/>"
                     f"<text x='2' y='{(y + 11) if frac == 1 else (y - 2):.1f}'>{frac:.1f}</text>")
    for name, colour, values in series:
        pts = _downsample(values, TIMELINE_POINTS)
        seg: list[str] = []
        paths = []
        for k, v in enumerate(pts):
            if math.isnan(v):
                if seg:
                    paths.append(seg)
                seg = []
                continue
            x = w * (k + 0.5) / max(len(pts), 1)
            seg.append(f"{x:.1f},{bottom - (bottom - top) * min(1.0, max(0.0, v)):.1f}")
        if seg:
            paths.append(seg)
        for s in paths:
            parts.append(f"<polyline fill='none' stroke='{colour}' stroke-width='1.5' vector-effect='non-scaling-stroke'"
                         f" points='{' '.join(s)}'><title>{_esc(name)}</title></polyline>")
    parts.append("</svg>")
    return "".join(parts)


def _downsample(values: Sequence[float], n: int) -> list[float]:
    m = len(values)
    if m <= n:
        return list(values)
    out = []
    for c in range(n):
        seg = [v for v in values[c * m // n:(c + 1) * m // n] if not math.isnan(v)]
        out.append(sum(seg) / len(seg) if seg else math.nan)
    return out


def _group_series(p: Picture) -> tuple[list[float], list[float]]:
    """Per tick: mean imbalance over groups at work, and stall share of the tick."""
    n = p.rec.ticks
    imb = [math.nan] * n
    stall = [math.nan] * n
    groups = list(p.rec.groups.values())
    for i in range(n):
        vi = [g.imbalance[i] for g in groups if g.holding[i] and not math.isnan(g.imbalance[i])]
        vs = [g.stall[i] / p.rec.interval for g in groups if g.holding[i] and not math.isnan(g.stall[i])]
        if vi:
            imb[i] = sum(vi) / len(vi)
        if vs:
            stall[i] = sum(vs) / len(vs)
    return imb, stall


def _findings_html(doc: dict[str, Any]) -> str:
    items = []
    for f in doc["findings"]:
        remedy = f"<span class='remedy'>{_esc(f['remedy'])}</span>" if f["remedy"] else ""
        items.append(f"<li class='{_esc(f['severity'])}' data-kind='{_esc(f['kind'])}'>"
                     f"<span class='sev'>{_esc(f['severity'])}</span>{_esc(f['text'])}{remedy}</li>")
    return "<ul class='findings'>" + "".join(items) + "</ul>"


def _pct(v: Any) -> str:
    return "–" if v is None else f"{100 * v:.1f} %"


def _gpu_table(doc: dict[str, Any]) -> str:
    rows = ["<tr><th>GPU</th><th>busy</th><th>real work</th><th>spin-wait</th><th>idle</th><th>sampled</th></tr>"]
    for g in doc["gpus"]:
        name = f"{g['node']} GPU {g['gpu']}" if g["node"] else f"GPU {g['gpu']}"
        rows.append(f"<tr><td>{_esc(name)}</td><td>{_pct(g['busy_fraction'])}</td><td>{_pct(g['active_fraction'])}</td>"
                    f"<td>{_pct(g['spin_wait_fraction'])}</td><td>{_pct(g['idle_fraction'])}</td>"
                    f"<td>{g['sampled_seconds']:.0f} s</td></tr>")
    return "<table>" + "".join(rows) + "</table>"


def _summary(doc: dict[str, Any]) -> str:
    run = doc["run"]
    imb = doc["imbalance"]
    period = doc["stall_period_seconds"]
    cells = [
        ("run", f"{run['duration_seconds']:.0f} s"),
        ("work", f"{run['work_seconds']:.0f} s"),
        ("GPUs", str(run["gpus"])),
        ("stall fraction", _pct(doc["stall_fraction"])),
        ("stall period", f"{period:.0f} s" if period else "none"),
        ("imbalance (run)", "–" if imb["whole_run"] is None else f"{imb['whole_run']:.2f}"),
        ("stragglers", str(len(doc["stragglers"]))),
    ]
    return "<div class='kv'>" + "".join(f"<div>{_esc(k)}<b>{_esc(v)}</b></div>" for k, v in cells) + "</div>"


def render_html(a: Analysis, doc: dict[str, Any], max_cols: int = MAX_COLUMNS) -> str:
    p = Picture(a, max_cols)
    rh = row_height(len(p.gpus))
    run = doc["run"]
    when = f"{run['start_time']} – {run['end_time']}" if run["start_time"] else f"{run['duration_seconds']:.0f} s"
    imb, stall = _group_series(p)
    busy_mean = [math.nan] * p.rec.ticks
    for i in range(p.rec.ticks):
        v = [g.busy[i] / g.sampled[i] for g in p.gpus if g.sampled[i] > 0]
        if v:
            busy_mean[i] = sum(v) / len(v)
    notes = "".join(f"<p class='muted'>{_esc(n)}</p>" for n in doc.get("notes", []))
    body = f"""
<header><h1>gpulse report — {_esc(doc['source'])}</h1>
<div class='meta'>{_esc(when)} · {len(p.gpus)} GPUs · tick {p.rec.interval:g} s · real work measured as {_esc(run['activity'])}</div></header>
<main>
<section id='verdict'><h2>Findings</h2>{_findings_html(doc)}{notes}</section>
<section id='summary'>{_summary(doc)}</section>
<section id='heatmap-section'>
 <div class='hm-head'><h2>Every GPU over the whole run</h2>
  <label>colour = <select id='mode'><option value='busy'>utilisation (busy)</option><option value='active'>real work (active)</option></select></label>
  {_legend()}</div>
 <div class='hm-grid'>
  <div class='hm-labels'><div class='strip-label'>phase</div><div class='strip-label'>stalls</div>{_labels(p, rh)}</div>
  <div class='hm-plot'>
   {_phase_strip(p)}
   <canvas id='stallstrip' class='heat' title='share of each column in sync stalls'></canvas>
   <div class='canvas-wrap'><canvas id='heatmap' class='heat'></canvas>{_bands(p)}</div>
   {_axis(p)}
  </div>
 </div>
 <p class='muted'>Rows: one per GPU. Colour: utilisation as the driver reports it, or real work (spin-waiting in a
 collective reads busy but is not work). Red bands: sync stalls (every GPU of the group idle at once). Phase strip:
 green work, grey start-up/exit, hatched no job or no data.</p>
</section>
<section id='timelines'><h2>Imbalance and stall fraction</h2>
 <div class='muted'>imbalance (max − min) / max of real work over the analysis window <span style='color:#3949ab'>━</span>,
 share of each tick in sync stalls <span style='color:#d32f2f'>━</span>, mean utilisation <span style='color:#9e9e9e'>━</span></div>
 {_timeline(p, 'imbalance and stall fraction', [('mean utilisation', '#9e9e9e', busy_mean), ('imbalance', '#3949ab', imb), ('stall fraction', '#d32f2f', stall)])}
 {_axis(p)}
</section>
<section id='gpus'><h2>Per GPU over the work time</h2>{_gpu_table(doc)}</section>
</main>"""
    data = {
        "rows": [p.rec.name(g) for g in p.gpus], "cols": p.cols, "t0": p.t0, "dt": p.dt, "epoch": p.rec.epoch,
        "row_height": rh, "lut": heatmap.lut_hex(), "stall_lut": _stall_lut(),
        "busy": heatmap.b64(p.busy), "active": heatmap.b64(p.active), "stall": heatmap.b64([p.stall]),
    }
    page = web_asset("report.html")
    title = f"gpulse report — {doc['source']}"
    for key, value in (("{{TITLE}}", _esc(title)), ("{{STYLE}}", web_asset("gpulse.css")),
                       ("{{DATA}}", _script_json(data)), ("{{FINDINGS}}", _script_json(doc)),
                       ("{{SCRIPT}}", web_asset("heatmap.js") + "\n" + web_asset("report.js")),
                       ("{{BODY}}", body)):
        page = page.replace(key, value, 1)
    return page


def _stall_lut() -> list[str]:
    """White (no stall) to red (stalled the whole column); grey = no job."""
    out = []
    for v in range(255):
        f = v / 254
        out.append("#%02x%02x%02x" % (255, round(255 - 210 * f), round(255 - 210 * f)))
    out.append("#eeeeee")
    return out


# ------------------------------------------------------------------ PNG

def render_png(a: Analysis, max_width: int = PNG_MAX_WIDTH) -> bytes:
    """The heatmap alone: a stall strip on top, then one band per GPU."""
    p = Picture(a, max_width)
    lut = heatmap.lut()
    stall_lut = [tuple(int(h[i:i + 2], 16) for i in (1, 3, 5)) for h in _stall_lut()]
    rh = row_height(len(p.gpus))
    width = p.cols
    rows: list[bytes] = []
    strip = bytes(c for v in p.stall for c in stall_lut[v])
    rows += [strip] * 8
    rows.append(bytes([255, 255, 255]) * width)
    for k, cells in enumerate(p.busy):
        line = bytes(c for v in cells for c in lut[v])
        sep = bytes([255, 255, 255]) * width
        rows += [line] * (rh - 1 if rh >= 6 else rh)
        if rh >= 6:
            rows.append(sep)
    return encode_png(width, len(rows), rows)


def write_outputs(a: Analysis, out_dir: str, max_cols: int = MAX_COLUMNS) -> dict[str, str]:
    os.makedirs(out_dir, exist_ok=True)
    doc = a.as_json()
    paths = {name: os.path.join(out_dir, name) for name in ("report.html", "heatmap.png", "findings.json")}
    with open(paths["findings.json"], "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2)
        fh.write("\n")
    with open(paths["report.html"], "w", encoding="utf-8") as fh:
        fh.write(render_html(a, doc, max_cols))
    with open(paths["heatmap.png"], "wb") as fh:
        fh.write(render_png(a))
    return paths


def summary_lines(doc: dict[str, Any]) -> list[str]:
    """What the command prints: the findings, most severe first."""
    return [f"[{f['severity']}] {f['text']}" + (f" Remedy: {f['remedy']}." if f["remedy"] else "")
            for f in doc["findings"]]


__all__ = ["render_html", "render_png", "write_outputs", "summary_lines", "Recording", "web_asset"]
