"""report.html (self-contained), heatmap.png and findings.json from an Analysis.

report.html carries everything inline — CSS, the palette, the heatmap bytes, the
drawing code — and a Content-Security-Policy that forbids any fetch, so opening it
offline or from an archive shows the same picture. The policy allows the page's one
script and one stylesheet by hash and nothing else, and every name from the input is
escaped where it lands (pages.render_page, safetext), so a hostile node, file or
workload name is text. heatmap.png (report/figure.py)
draws from the same Picture, so both show the same rows, order and colours.
"""
from __future__ import annotations

import html
import math
import re
from typing import Any, Sequence

from .. import palette
from ..analysis import imbalance as imbalance_of
from ..analysis.cause import describe
from ..model import natural_key
from ..pages import b64, page_style, render_page, web_asset
from ..safetext import script_json
from . import heatmap
from .clock import Clock, clock_of, elapsed
from .collect import GpuTrack, Recording
from .findings import Analysis

MAX_COLUMNS = 4000           # heatmap columns in the HTML; more ticks are averaged into bins
MAX_CELLS = 4_000_000        # per mode: many rows get fewer columns, so the page stays a few MB
TIMELINE_POINTS = 1000
GROUP_AT = 256               # from this many GPUs (on several nodes) the heatmap shows one row per node
MIN_ROW = 9                  # px: the smallest row whose label is still legible


def row_height(rows: int) -> int:
    return max(MIN_ROW, min(18, 640 // max(rows, 1)))


def gpu_work_score(stats: dict[str, Any]) -> float | None:
    act, spin = stats.get("active_fraction"), stats.get("spin_wait_fraction")
    return None if act is None else palette.work_score(act, spin or 0.0)


def ordered(a: Analysis, order: str = "natural") -> list[GpuTrack]:
    """natural: node, then GPU index numerically. worst: stragglers first (largest gap
    first), then the lowest work score over the work time; nodes move as a block,
    worst node first, so a node's GPUs stay together."""
    gpus = sorted(a.rec.gpus.values(), key=lambda g: (natural_key(g.node), natural_key(g.gpu)))
    if order == "natural":
        return gpus
    gap = {s["key"]: s["gap"] for s in a.stragglers}

    def badness(g: GpuTrack) -> tuple:
        ws = gpu_work_score(a.gpu_stats.get(g.key, {}))
        return (0 if g.key in gap else 1, -gap.get(g.key, 0.0), 2.0 if ws is None else ws)
    node_key: dict[str, tuple] = {}
    for g in gpus:
        node_key[g.node] = min(node_key.get(g.node, (9,)), badness(g))
    return sorted(gpus, key=lambda g: (node_key[g.node], natural_key(g.node), badness(g)))


class Picture:
    """The binned matrices, row order and time marks every output draws from."""

    def __init__(self, a: Analysis, max_cols: int = MAX_COLUMNS, order: str = "natural", doc: dict | None = None):
        rec = a.rec
        self.a = a
        self.rec = rec
        self.clock: Clock = clock_of(rec)
        self.order = order
        self.gpus = ordered(a, order)
        self.cols = heatmap.columns_for(rec.ticks, max(100, min(max_cols, MAX_CELLS // max(1, len(self.gpus)))))
        self.t0 = a.t0
        self.t1 = rec.times[-1] if rec.ticks else a.t0
        self.dt = (self.t1 - self.t0) / self.cols if self.cols else rec.interval
        self._cells: dict[str, list[bytes]] = {}
        self.stall = self._stall_row()
        self.stragglers = {s["key"]: s for s in a.stragglers}
        self.nodes: list[tuple[str, int, int]] = []          # (node, first row, last row + 1)
        for i, g in enumerate(self.gpus):
            if self.nodes and self.nodes[-1][0] == g.node:
                self.nodes[-1] = (g.node, self.nodes[-1][1], i + 1)
            else:
                self.nodes.append((g.node, i, i + 1))
        self.grouped = len(self.gpus) >= GROUP_AT and len(self.nodes) > 1
        doc = doc if doc is not None else a.as_json()
        self.findings = doc["findings"]
        # finding number (1-based, as listed) -> its spans clipped to the run
        self.spans: list[tuple[int, list[tuple[float, float]]]] = []
        for n, f in enumerate(self.findings, 1):
            sp = [(max(self.t0, float(s["start"])), min(self.t1, float(s["end"]))) for s in f.get("spans") or ()]
            sp = [s for s in sp if s[1] > s[0]]
            if sp:
                self.spans.append((n, sp))

    def rows(self, mode: str) -> list[bytes]:
        """Every GPU's cells in one colouring (palette.MODES), binned on first use."""
        if mode not in self._cells:
            num = {"work": lambda g: heatmap.work_seconds(g.active, g.spin_wait), "busy": lambda g: g.busy,
                   "active": lambda g: g.active}[mode]
            self._cells[mode] = [heatmap.binned(num(g), g.sampled, self.cols) for g in self.gpus]
        return self._cells[mode]

    @property
    def cells(self) -> dict[str, list[bytes]]:
        return {m: self.rows(m) for m in palette.MODES}

    def node_rows(self, mode: str) -> list[bytes]:
        """One row per node: the mean of its GPUs' cells."""
        rows = self.rows(mode)
        return [heatmap.mean_rows(rows[a:b]) for _, a, b in self.nodes]

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

    def label(self, g: GpuTrack) -> str:
        return self.rec.name(g)

    def ticks(self, target: int = 8) -> list[float]:
        """Axis times at a round step (10 s, 1 min, 15 min, ...) from the start."""
        span = self.t1 - self.t0
        if span <= 0:
            return [self.t0]
        step = next((s for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
                                 43200, 86400) if span / s <= target), 86400 * math.ceil(span / 86400 / target))
        return [self.t0 + k * step for k in range(int(span // step) + 1)]

    def zone_line(self) -> str:
        if not self.clock.epoch:
            return "times: elapsed since the start of the recording (the log has no clock)"
        return f"times: {self.clock.zone_name(self.t0)}"


def elapsed_tick(seconds: float) -> str:
    """Axis label for time since the start: 0:00, 5:00, 1:05:00."""
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def straggler_badge(st: dict[str, Any]) -> tuple[str, str, str]:
    """(kind word, short badge, full explanation) for a straggler."""
    short, full = palette.STRAGGLER[st["direction"]]
    return ("cold" if st["direction"] == "idler" else "hot"), short, full


# ------------------------------------------------------------------ HTML pieces

def _esc(s: Any) -> str:
    return html.escape(str(s), quote=True)


_STYLE_ATTR = re.compile(r" style='([^'<>]*)'")


def _hoist_styles(body: str) -> tuple[str, str]:
    """(body, rules): the body's style attributes moved into stylesheet rules. The
    page's CSP allows its one stylesheet by hash and no inline style attribute, so
    each distinct declaration becomes `[data-s='n']{...}` once, `!important` as the
    attribute outranked the stylesheet. Only gpulse's own markup can match: every
    value from the input is escaped with its quotes."""
    rules: dict[str, int] = {}

    def attr(m: re.Match) -> str:
        return f" data-s='{rules.setdefault(m.group(1), len(rules))}'"
    body = _STYLE_ATTR.sub(attr, body)
    css = "".join(f"[data-s='{n}']{{" + ";".join(d + " !important" for d in decl.split(";") if d) + "}\n"
                  for decl, n in rules.items())
    return body, css


def _axis(p: Picture) -> str:
    """Two label lines under the heatmap: wall clock (in the report's zone) and time
    since the start of the recording."""
    if p.t1 <= p.t0:
        return ""
    wall, since = [], []
    ticks = p.ticks()
    for k, t in enumerate(ticks):
        last = k == len(ticks) - 1 and p.x(t) > 92
        cls = " class='first'" if k == 0 else ""
        style = f"left:{p.x(t):.3f}%" if not last else "right:0;transform:none"
        if p.clock.epoch:
            wall.append(f"<span{cls} style='{style}'>{_esc(p.clock.wall(t))}</span>")
        since.append(f"<span{cls} style='{style}'>{_esc(elapsed_tick(t - p.t0))}</span>")
    out = ""
    if wall:
        out += f"<div class='axis' data-axis='wall'>{''.join(wall)}</div>"
    out += f"<div class='axis' data-axis='elapsed'>{''.join(since)}</div>"
    return out


def _axis_labels(p: Picture) -> str:
    wall = "<div class='axis-label'>wall clock</div>" if p.clock.epoch else ""
    return wall + "<div class='axis-label'>elapsed</div>"


def _phase_strip(p: Picture) -> str:
    spans = []
    for s in p.a.spans:
        a, b = p.a.tick_start(s.a), p.a.tick_end(s.b)
        title = f"{s.kind.replace('_', ' ')}: {b - a:.0f} s" + (f" ({s.workload})" if s.workload else "")
        spans.append(f"<span class='ph-{s.kind}' style='left:{p.x(a):.3f}%;width:{max(p.x(b) - p.x(a), 0.05):.3f}%'"
                     f" title='{_esc(title)}'></span>")
    return "<div class='strip' id='phases'>" + "".join(spans) + "</div>"


def _finding_lanes(p: Picture) -> tuple[str, str]:
    """(labels, lanes): one lane per finding with time spans, its spans as numbered bars."""
    labels, lanes = [], []
    for n, spans in p.spans:
        f = p.findings[n - 1]
        labels.append(f"<div class='strip-label'>finding {n}</div>")
        bars = "".join(
            f"<span style='left:{p.x(a):.3f}%;width:{max(p.x(b) - p.x(a), 0.2):.3f}%' "
            f"title='finding {n}: {_esc(_span_text(p, a, b))}'>{n}</span>" for a, b in spans)
        lanes.append(f"<div class='strip fspans' data-finding='{n}' data-kind='{_esc(f['kind'])}'>{bars}</div>")
    return "".join(labels), "".join(lanes)


def _span_text(p: Picture, a: float, b: float) -> str:
    when = f"{p.clock.wall(a)}–{p.clock.wall(b)}, " if p.clock.epoch else ""
    return f"{when}{elapsed(a - p.t0)} to {elapsed(b - p.t0)} into the recording ({elapsed(b - a)})"


def _bands(p: Picture, limit: int = 300) -> str:
    """Long stall episodes as translucent bands; short ones show in the stall strip."""
    long_eps = sorted((e for e in p.a.episodes if e.duration >= 2 * p.dt), key=lambda e: -e.duration)[:limit]
    return "".join(f"<div class='band' style='left:{p.x(e.start):.3f}%;width:{max(p.x(e.end) - p.x(e.start), 0.1):.3f}%'"
                   f" title='sync stall {e.duration:.1f} s'></div>" for e in long_eps)


def _span_boxes(p: Picture) -> str:
    """Finding spans outlined over the heatmap, so the rows they concern can be read."""
    return "".join(f"<div class='fbox' data-finding='{n}' style='left:{p.x(a):.3f}%;"
                   f"width:{max(p.x(b) - p.x(a), 0.2):.3f}%'></div>" for n, spans in p.spans for a, b in spans)


def _label(p: Picture, g: GpuTrack, rh: int) -> str:
    st = p.stragglers.get(g.key)
    cls = "row-label straggler" if st else "row-label"
    badge = ""
    if st:
        kind, short, full = straggler_badge(st)
        badge = (f"<span class='badge {kind}' title='{_esc(full)} ({_esc(st['signal'])} z = {st['z']:.1f})'>"
                 f"{_esc(short)}</span>")
    return (f"<div class='{cls}' data-gpu='{_esc(g.key)}' style='height:{rh}px;font-size:{min(11, rh - 1)}px'>"
            f"{badge}{_esc(p.label(g))}</div>")


def _node_label(p: Picture, node: str, a: int, b: int, rh: int) -> str:
    flagged = [g for g in p.gpus[a:b] if g.key in p.stragglers]
    badge = (f"<span class='badge cold' title='{_esc(len(flagged))} straggler(s) on this node'>"
             f"{len(flagged)} waited for</span>") if flagged else ""
    cls = "row-label node-row straggler" if flagged else "row-label node-row"
    return (f"<div class='{cls}' data-node='{_esc(node)}' style='height:{rh}px;font-size:{min(11, rh - 1)}px'>"
            f"{badge}{_esc(node or 'node')} ({b - a} GPUs)</div>")


def _legend() -> str:
    L = palette.LEGEND
    return (f"<div class='legend'><span>idle</span><div class='bar'></div><span>working</span>"
            f"<span class='swatch stall'></span><span>sync stall</span>"
            f"<span class='swatch no-data'></span><span>no data</span></div>"
            f"<div class='legend-text muted'>{_esc(L['cells'])}; {_esc(L['stall'])}; {_esc(L['no_data'])}</div>")


def _mode_select() -> str:
    opts = "".join(f"<option value='{_esc(k)}'{' selected' if k == palette.DEFAULT_MODE else ''}>{_esc(v)}</option>"
                   for k, v in palette.MODES.items())
    return f"<label>colour = <select id='mode'>{opts}</select></label>"


def _order_note(p: Picture) -> str:
    if p.order == "worst":
        return "Rows worst first: stragglers, then the lowest work score over the work time (a node's GPUs together)."
    return "Rows in natural order: node, then GPU index."


def _timeline(p: Picture, title: str, series: list[tuple[str, str, list[float]]]) -> str:
    """Inline SVG: one polyline per series of per-tick values (NaN = no value); the
    colour is a CSS class (.line-<name>) so the stylesheet keeps the palette."""
    w, h, top, bottom = 1000, 130, 8, 112
    parts = [f"<svg class='timeline' viewBox='0 0 {w} {h}' preserveAspectRatio='none' role='img' aria-label='{_esc(title)}'>"]
    for frac in (0, 0.5, 1):
        y = bottom - (bottom - top) * frac
        parts.append(f"<line class='grid' x1='0' x2='{w}' y1='{y:.1f}' y2='{y:.1f}'/>"
                     f"<text x='2' y='{(y + 11) if frac == 1 else (y - 2):.1f}'>{frac:.1f}</text>")
    for name, cls, values in series:
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
            parts.append(f"<polyline class='line-{cls}' fill='none' stroke-width='1.5' vector-effect='non-scaling-stroke'"
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


def _findings_html(p: Picture) -> str:
    items = []
    for n, f in enumerate(p.findings, 1):
        remedy = f"<span class='remedy'>{_esc(f['remedy'])}</span>" if f["remedy"] else ""
        if "cause" in f:
            remedy = f"<span class='cause'>{_esc(describe(f['cause'], f['evidence'], f['missing']))}</span>" + remedy
        spans = next((sp for k, sp in p.spans if k == n), [])
        when = ("<span class='when'>when: " + "; ".join(_esc(_span_text(p, a, b)) for a, b in spans[:5])
                + (f"; and {len(spans) - 5} more" if len(spans) > 5 else "") + "</span>") if spans else ""
        items.append(f"<li class='{_esc(f['severity'])}' data-kind='{_esc(f['kind'])}' data-finding='{n}'>"
                     f"<span class='num'>{n}</span><span class='sev'>{_esc(f['severity'])}</span>{_esc(f['text'])}"
                     f"{when}{remedy}</li>")
    return "<ul class='findings'>" + "".join(items) + "</ul>"


def _pct(v: Any) -> str:
    return "–" if v is None else f"{100 * v:.1f} %"


def _gpu_table(p: Picture, doc: dict[str, Any]) -> str:
    rows = ["<tr><th>GPU</th><th>work score</th><th>busy</th><th>real work</th><th>spin-wait</th><th>idle</th>"
            "<th>sampled</th></tr>"]
    by_ref = {(g["node"], g["gpu"]): g for g in doc["gpus"]}
    for t in p.gpus:
        g = by_ref.get((t.node, t.gpu))
        if g is None:
            continue
        rows.append(f"<tr><td>{_esc(p.label(t))}</td><td>{_pct(gpu_work_score(g))}</td><td>{_pct(g['busy_fraction'])}</td>"
                    f"<td>{_pct(g['active_fraction'])}</td><td>{_pct(g['spin_wait_fraction'])}</td>"
                    f"<td>{_pct(g['idle_fraction'])}</td><td>{g['sampled_seconds']:.0f} s</td></tr>")
    return "<table>" + "".join(rows) + "</table>"


def cards(p: Picture, doc: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The summary cards: (key, title, value, what it measures). Every number says
    what it is taken over, so none contradicts a finding beside it."""
    run = doc["run"]
    imb = doc["imbalance"]
    period = doc["stall_period_seconds"]
    thr = run["idle_threshold"]
    busy = [g["busy_fraction"] for g in doc["gpus"] if g["busy_fraction"] is not None]
    busy_imb = imbalance_of(busy, thr) if busy else None
    stragglers = doc["stragglers"]
    real = imb["whole_run"]
    real_note = "(max − min) / max of each GPU's real work (active) over the work time; spin-waiting is not work"
    if real is not None and imb.get("explained"):
        real_note += (". The stragglers explain this spread (the exporter's gpulse_group_imbalance_explained and "
                      "the live page say the same): it is theirs, not imbalance; see their findings")
    elif stragglers and real is not None and busy_imb is not None and real < busy_imb / 2:
        real_note += (". Low here although a GPU is waited for: its peers spin-wait while it works off the GPU, "
                      "so none does much real work; see the utilisation imbalance")
    strag_value = ", ".join(f"{p.a.label(s['key'])} ({straggler_badge(s)[0]})"
                            for s in sorted(p.a.stragglers, key=lambda s: -s["gap"])) or "none"
    return [
        ("run", "run", f"{run['duration_seconds']:.0f} s", "from the first to the last sample"),
        ("work", "work time", f"{_work_span(doc):.0f} s",
         "time with sustained GPU work; start-up, exit and gaps left out. The shares below are of this time"),
        ("gpus", "GPUs", str(run["gpus"]), "GPUs in the report"),
        ("stall_fraction", "time lost to sync stalls", _pct(doc["stall_fraction"]),
         "share of the work time in which every GPU of a group was stalled at once"),
        ("stall_period", "stall rhythm", f"every ~{period:.0f} s" if period else "no steady rhythm",
         "period of the recurring stalls that cost the most time"),
        ("imbalance_real", "imbalance of real work",
         "–" if real is None else f"{real:.2f}" + (" (stragglers')" if imb.get("explained") else ""), real_note),
        ("imbalance_busy", "imbalance of utilisation", "–" if busy_imb is None else f"{busy_imb:.2f}",
         "(max − min) / max of each GPU's utilisation (busy) over the work time; spin-waiting counts as busy"),
        ("lost", "GPU time lost", _lost_value(doc),
         "GPU-hours the GPUs lost to sync stalls, waiting for stragglers and imbalance, of the GPU-hours of work "
         "(gpulse_group_lost_seconds_total, the exporter's and the rules' figure)"),
        ("stragglers", "waited-for GPUs (stragglers)", strag_value,
         "the GPUs everyone waits for: cold = its rank is busy off the GPU while the others spin-wait; "
         "hot = it computes longer than its peers"),
    ]


def _lost_value(doc: dict[str, Any]) -> str:
    lost = doc.get("lost") or {}
    work = lost.get("work_gpu_seconds") or 0.0
    if work <= 0:
        return "–"
    total = lost.get("gpu_seconds") or 0.0
    return f"{total / 3600:.2f} of {work / 3600:.2f} GPU-h ({_pct(total / work)})"


def _work_span(doc: dict[str, Any]) -> float:
    """Seconds in which some group was at work (the union of the work phases, so
    several groups working at once count once)."""
    spans = sorted((ph["start"], ph["start"] + ph["duration_seconds"]) for ph in doc["phases"] if ph["kind"] == "work")
    total, end = 0.0, -math.inf
    for a, b in spans:
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def _summary(p: Picture, doc: dict[str, Any]) -> str:
    return "<div class='kv'>" + "".join(
        f"<div class='card' data-card='{_esc(k)}' title='{_esc(note)}'>{_esc(title)}<b>{_esc(v)}</b>"
        f"<small>{_esc(note)}</small></div>" for k, title, v, note in cards(p, doc)) + "</div>"


def _heatmap_block(p: Picture, rows: list[str], rh: int, canvas_id: str, strips: bool) -> str:
    """Row labels beside one heatmap canvas, with the finding lanes, stall strip and
    axis on the same time scale."""
    lane_labels, lanes = _finding_lanes(p) if strips else ("", "")
    strip_labels = (lane_labels + "<div class='strip-label'>phase</div><div class='strip-label'>sync stalls</div>"
                    if strips else "")
    strip_html = (lanes + _phase_strip(p) + "<canvas id='stallstrip' class='heat' "
                  "title='share of each column in sync stalls'></canvas>") if strips else ""
    return (f"<div class='hm-grid'><div class='hm-labels'>{strip_labels}{''.join(rows)}{_axis_labels(p)}</div>"
            f"<div class='hm-plot'>{strip_html}<div class='canvas-wrap'><canvas id='{canvas_id}' class='heat'>"
            f"</canvas>{_bands(p)}{_span_boxes(p)}</div>{_axis(p)}</div></div>")


def render_html(a: Analysis, doc: dict[str, Any], max_cols: int = MAX_COLUMNS, order: str = "natural",
                picture: Picture | None = None) -> str:
    p = picture or Picture(a, max_cols, order, doc)
    run = doc["run"]
    c = p.clock
    when = (f"{c.wall(p.t0, True)} – {c.wall(p.t1, True)}" if c.epoch else f"{run['duration_seconds']:.0f} s")
    imb, stall = _group_series(p)
    busy_mean = [math.nan] * p.rec.ticks
    for i in range(p.rec.ticks):
        v = [g.busy[i] / g.sampled[i] for g in p.gpus if g.sampled[i] > 0]
        if v:
            busy_mean[i] = sum(v) / len(v)
    notes = "".join(f"<p class='muted note'>{_esc(n)}</p>" for n in doc.get("notes", []))
    if p.grouped:
        rh = row_height(len(p.nodes))
        drh = row_height(max(b - a_ for _, a_, b in p.nodes))
        worst = ordered(a, "worst")[0].node        # the drill-down opens on the worst node
        pick = next(k for k, nd in enumerate(p.nodes) if nd[0] == worst)
        first = p.nodes[pick]
        options = "".join(f"<option value='{k}'{' selected' if k == pick else ''}>{_esc(n or 'node')} "
                          f"({b - a_} GPUs)</option>" for k, (n, a_, b) in enumerate(p.nodes))
        heat = (f"<p class='muted'>{len(p.gpus)} GPUs on {len(p.nodes)} nodes: one row per node (the mean of its "
                f"GPUs); pick a node below, or click its row, for its GPUs.</p>"
                + _heatmap_block(p, [_node_label(p, n, a_, b, rh) for n, a_, b in p.nodes], rh, "heatmap", True)
                + f"<h3 id='drill-title'>GPUs of <select id='drill-node'>{options}</select></h3>"
                + _heatmap_block(p, [_label(p, g, drh) for g in p.gpus[first[1]:first[2]]], drh, "drill", False))
    else:
        rh = row_height(len(p.gpus))
        drh = rh
        heat = _heatmap_block(p, [_label(p, g, rh) for g in p.gpus], rh, "heatmap", True)
    body = f"""
<header><h1>gpulse report — {_esc(doc['source'])}</h1>
<div class='meta'>{_esc(when)} · {_esc(p.zone_line())} · {len(p.gpus)} GPUs · tick {p.rec.interval:g} s · real work measured as {_esc(run['activity'])}</div></header>
<main>
<section id='verdict'><h2>Findings</h2>{_findings_html(p)}{notes}</section>
<section id='summary'>{_summary(p, doc)}</section>
<section id='heatmap-section'>
 <div class='hm-head'><h2>Every GPU over the whole run</h2>{_mode_select()}{_legend()}</div>
 {heat}
 <p class='muted'>{_esc(_order_note(p))} Colour: the work score by default — real work counts fully, spin-waiting
 in a collective half, idle nothing — so a sync stall is a dark or mid-tone column across every row and a
 straggler an odd row; utilisation (busy) and real work (active) are selectable. Magenta: sync stalls (every GPU
 of the group stalled at once), as bands and as the share of each column in the stall strip. Numbered lanes: when
 each finding applies. Phase strip: green work, grey start-up/exit, hatched no job or no data.</p>
</section>
<section id='timelines'><h2>Imbalance and stall fraction</h2>
 <div class='muted'>imbalance (max − min) / max of real work over the analysis window <span class='key-imbalance'>━</span>,
 share of each tick in sync stalls <span class='key-stall'>━</span>, mean utilisation <span class='key-busy'>━</span></div>
 {_timeline(p, 'imbalance and stall fraction', [('mean utilisation', 'busy', busy_mean), ('imbalance', 'imbalance', imb), ('stall fraction', 'stall', stall)])}
 {_axis(p)}
</section>
<section id='gpus'><h2>Per GPU over the work time</h2>{_gpu_table(p, doc)}</section>
</main>"""
    data: dict[str, Any] = {
        "rows": [p.label(g) for g in p.gpus], "cols": p.cols, "t0": p.t0, "dt": p.dt,
        "clock": _clock_json(p), "row_height": rh, "drill_row_height": drh, "palette": palette.for_browser(),
        "cells": {m: b64(rows) for m, rows in p.cells.items()}, "stall": b64([p.stall]),
        "node_breaks": [a_ for _, a_, _ in p.nodes[1:]],     # rows where another node's GPUs begin
    }
    if p.grouped:
        data["nodes"] = [{"name": n or "node", "first": a_, "end": b} for n, a_, b in p.nodes]
        data["node_cells"] = {m: b64(p.node_rows(m)) for m in palette.MODES}
    body, rules = _hoist_styles(body)
    return render_page("report.html", web_asset("heatmap.js") + "\n" + web_asset("report.js"),
                       {"TITLE": _esc(f"gpulse report — {doc['source']}"), "BODY": body,
                        "DATA": script_json(data), "FINDINGS": script_json(doc)},
                       style=page_style() + "\n" + rules)


def _clock_json(p: Picture) -> dict[str, Any]:
    """What the page needs to write a time as the report does: one UTC offset (the
    one at the start of the run) and the zone's name."""
    from datetime import datetime
    off = datetime.fromtimestamp(p.t0, p.clock.zone).utcoffset() if p.clock.epoch else None
    return {"epoch": p.clock.epoch, "t0": p.t0, "offset": off.total_seconds() if off else 0,
            "zone": p.zone_line()}


# ------------------------------------------------------------------ outputs

def summary_lines(doc: dict[str, Any]) -> list[str]:
    """What the command prints: what the run lost, then the findings, most severe first."""
    head = doc.get("lost", {}).get("headline")
    return ([head] if head else []) + [f"[{f['severity']}] {f['text']}"
            + (" " + describe(f["cause"], f["evidence"], f["missing"]) if "cause" in f else "")
            + (f" Remedy: {f['remedy']}." if f["remedy"] else "")
            for f in doc["findings"]] + ([clocks_line(doc["clocks"])] if doc.get("clocks") else [])


def clocks_line(clocks: dict[str, Any]) -> str:
    """What a report of several nodes' logs did to their clocks (findings.json `clocks`)."""
    moved = [f"{n['node']} {n['offset_seconds']:+.2f} s" for n in clocks["nodes"]
             if n["aligned"] and n["node"] != clocks["reference"]]
    kept = [n["node"] for n in clocks["nodes"] if not n["aligned"]]
    if not moved:
        return "Node clocks taken as recorded: the logs share no all-GPU stall edges to align them on."
    return (f"Node clocks aligned on node {clocks['reference']}'s by their shared all-GPU stall edges: "
            f"{', '.join(moved)}" + (f"; taken as recorded (no shared edges): {', '.join(kept)}" if kept else "") + ".")


__all__ = ["render_html", "summary_lines", "Recording", "web_asset", "Picture"]
