"""heatmap.png: the report's picture on its own, readable in a post-mortem without
the HTML. From the top: title, run and time zone, what the colour means; one lane
per finding with its time spans; the sync-stall strip; one row per GPU (per node
from GROUP_AT GPUs, then the worst node's GPUs); the time axis in wall clock and
elapsed time; the legend and the numbered findings.

Drawn from the same Picture as report.html (same rows, order and colours) with the
stdlib PNG writer and bitmap font (png.py, font.py). Text is drawn at twice the
font's size (10 x 14 px letters) and wrapped, never cut, at the picture's width; the
plot is at least MIN_PLOT px wide and a row at least one line of text high, so the
picture reads in a chat preview at 8 GPUs and at a thousand (one row per node).
"""
from __future__ import annotations

import math
from typing import Any

from .. import palette
from ..model import natural_key
from .clock import elapsed
from .findings import Analysis
from .font import ADVANCE, HEIGHT, ascii_text, text_width
from .png import Canvas
from .render import Picture, elapsed_tick, ordered, row_height, straggler_badge

PNG_MAX_WIDTH = 2000          # heatmap columns in the PNG
MIN_PLOT = 1200               # px: short runs get wider columns, so the picture is never a thumbnail
S = 2                         # text scale: the 5 x 7 font drawn at 10 x 14 px
M = 16                        # margin
TEXT_H = HEIGHT * S           # height of a line of text's letters
LINE = TEXT_H + 6             # one line of text
LANE = TEXT_H + 4             # a finding lane: its number fits inside its bar
STRIP = 16                    # the stall strip
MIN_ROW_PX = TEXT_H + 2       # a row holds its label
MAX_FINDINGS = 8              # listed under the legend


def _cells_line(cells: bytes, table: list[bytes]) -> bytes:
    return b"".join(table[v] for v in cells)


def wrap(s: str, chars: int) -> list[str]:
    """s in lines of at most `chars` characters, broken at spaces (a longer word is
    split): nothing is cut off."""
    lines: list[str] = []
    line = ""
    for word in ascii_text(s).split():     # as drawn: a stand-in may be longer than its symbol
        while len(word) > chars:
            if line:
                lines.append(line)
                line = ""
            lines.append(word[:chars])
            word = word[chars:]
        if not line:
            line = word
        elif len(line) + 1 + len(word) <= chars:
            line += " " + word
        else:
            lines.append(line)
            line = word
    if line:
        lines.append(line)
    return lines or [""]


def render_png(a: Analysis, max_width: int = PNG_MAX_WIDTH, order: str = "natural",
               doc: dict[str, Any] | None = None, picture: Picture | None = None) -> bytes:
    p = picture or Picture(a, max_width, order, doc)
    col_px = max(1, math.ceil(MIN_PLOT / p.cols))
    plot_w = p.cols * col_px
    lut = [bytes(c) * col_px for c in palette.lut()]
    stall_lut = [bytes(c) * col_px for c in palette.stall_lut()]
    ink, muted, paper = palette.INK_RGB, palette.MUTED_RGB, palette.PAPER_RGB
    mode = palette.DEFAULT_MODE

    # rows: (label, cells) in drawing order; a second block drills into one node
    def gpu_rows(first: int, end: int) -> list[tuple[str, bytes]]:
        out = []
        for g, cells in zip(p.gpus[first:end], p.rows(mode)[first:end]):
            st = p.stragglers.get(g.key)
            out.append((p.label(g) + (f" ({straggler_badge(st)[0]} straggler)" if st else ""), cells))
        return out
    if p.grouped:
        blocks = [("", [(f"{n or 'node'} ({b - a_} GPUs)", cells)
                        for (n, a_, b), cells in zip(p.nodes, p.node_rows(mode))])]
        worst = ordered(a, "worst")[0].node
        k = next(i for i, nd in enumerate(p.nodes) if nd[0] == worst)
        n, first, end = p.nodes[k]
        blocks.append((f"GPUs of {n or 'node'}, the worst node (stragglers first, then the lowest work score):",
                       gpu_rows(first, end)))
    else:
        blocks = [("", gpu_rows(0, len(p.gpus)))]
    # rows where another node's GPUs begin (a line in the gap above them)
    breaks = set() if p.grouped else {a_ for _, a_, _ in p.nodes[1:]}
    heights = [max(MIN_ROW_PX, row_height(len(rows))) for _, rows in blocks]
    labels = [lab for _, rows in blocks for lab, _ in rows] + ["sync stalls", "wall clock", "elapsed"] + \
        [f"finding {n}" for n, _ in p.spans]
    label_w = max(text_width(s, S) for s in labels) + 8 * S
    x0 = M + label_w
    width = max(x0 + plot_w + M, 1280)
    chars = (width - 2 * M) // (ADVANCE * S)

    # every line of text below the title, wrapped to the width before anything is
    # drawn, so the height is known and nothing runs off the edge
    nodes = sorted({g.node for g in p.gpus if g.node}, key=natural_key)
    when = (f"{p.clock.wall(p.t0, True)} to {p.clock.wall(p.t1, True)} ({elapsed(p.t1 - p.t0)})"
            if p.clock.epoch else f"{elapsed(p.t1 - p.t0)}")
    where = (f"node {nodes[0]}" if len(nodes) == 1 else f"{len(nodes)} nodes ({', '.join(nodes[:4])}"
             f"{', ...' if len(nodes) > 4 else ''})" if nodes else "node not named in the log")
    head = [f"{when} - {p.zone_line()}",
            f"{len(p.gpus)} GPUs on {where} - one row per {'node' if p.grouped else 'GPU'}, "
            f"{'worst first' if p.order == 'worst' else 'natural order (node, then GPU index)'}",
            f"colour = {palette.MODES[mode]}, over {elapsed(p.dt) if p.dt >= 1 else f'{p.dt:.1f} s'} per column"]
    head_lines = [ln for s in head for ln in wrap(s, chars)]
    titles = {title: wrap(title, chars) for title, _ in blocks if title}
    stragglers = sorted(p.a.stragglers, key=lambda s: -s["gap"])
    legend = [palette.LEGEND["cells"], palette.LEGEND["stall"],
              "stall strip: share of each column in which every GPU of a group was stalled (paper = none, "
              "magenta = the whole column)"]
    if stragglers:
        kinds = sorted({straggler_badge(s)[0] for s in stragglers})
        legend.append("; ".join(palette.STRAGGLER['idler' if k == 'cold' else 'busier'][1].split(". ")[0]
                                for k in kinds))
    legend_lines = [ln for s in legend for ln in wrap(s, chars)]
    n_findings = min(len(p.findings), MAX_FINDINGS)
    finding_lines = [(ln, f["severity"]) for n, f in enumerate(p.findings[:n_findings], 1)
                     for ln in wrap(f"{n} [{f['severity']}] {f['text']}", chars)]
    if len(p.findings) > n_findings:
        finding_lines += [(ln, "") for ln in wrap(f"... and {len(p.findings) - n_findings} more in report.html "
                                                  f"and findings.json", chars)]
    title_lines = wrap(f"gpulse heatmap: {p.rec.source}", (width - 2 * M) // (ADVANCE * 2 * S))
    axis_h = 5 + LINE * (2 if p.clock.epoch else 1)
    height = (M + len(title_lines) * (2 * TEXT_H + 6) + 4 + LINE * len(head_lines) + 4 + LANE * len(p.spans)
              + STRIP + 3
              + sum(len(rows) * h + (4 + LINE * len(titles[title]) if title else 0)
                    for (title, rows), h in zip(blocks, heights))
              + axis_h + 8 + TEXT_H + 6 + LINE * len(legend_lines) + 6 + LINE * len(finding_lines) + M)
    cv = Canvas(width, height, paper)

    def text(x: int, y: int, s: str, rgb=ink, scale: int = S) -> int:
        return cv.text(x, y, s, rgb, scale)

    def right(x: int, y: int, s: str, rgb=ink) -> None:
        cv.text(x - text_width(s, S), y, s, rgb, S)

    def xpos(t: float) -> int:
        return x0 + round((t - p.t0) / (p.t1 - p.t0) * plot_w) if p.t1 > p.t0 else x0

    # title and what is shown
    y = M
    for ln in title_lines:
        text(M, y, ln, ink, 2 * S)
        y += 2 * TEXT_H + 6
    y += 4
    for ln in head_lines:
        text(M, y, ln, muted)
        y += LINE
    y += 4
    top = y

    # finding lanes (the number inside its bar when the bar is wide enough) and the stall strip
    for n, spans in p.spans:
        right(x0 - 6 * S, y + 1, f"finding {n}", muted)
        for t_a, t_b in spans:
            xa, xb = xpos(t_a), max(xpos(t_b), xpos(t_a) + 2)
            cv.fill(xa, y, xb - xa, LANE - 2, ink)
            if xb - xa >= text_width(str(n), S) + 4:
                cv.text(xa + 2, y + (LANE - 2 - TEXT_H) // 2, str(n), paper, S)
        y += LANE
    right(x0 - 6 * S, y + (STRIP - TEXT_H) // 2, "sync stalls", muted)
    cv.pixels(x0, y, _cells_line(p.stall, stall_lut), STRIP)
    y += STRIP + 3

    # the rows
    for (title, rows), rh in zip(blocks, heights):
        if title:
            y += 4
            for ln in titles[title]:
                text(M, y, ln)
                y += LINE
        for k, (lab, cells) in enumerate(rows):
            if k in breaks:
                cv.fill(x0 - 4 * S, y - 1, plot_w + 4 * S, 1, ink)
            cv.pixels(x0, y, _cells_line(cells, lut), rh - 1)
            right(x0 - 6 * S, y + (rh - 1 - TEXT_H) // 2, lab, ink if lab.endswith("straggler)") else muted)
            y += rh
    bottom = y
    # finding spans as thin ink edges over the rows, so the rows they concern can be read
    for _, spans in p.spans:
        for t_a, t_b in spans:
            for xx in (xpos(t_a), xpos(t_b)):
                cv.fill(xx, top, 1, bottom - top, ink)

    # time axis
    cv.fill(x0, y, plot_w, 1, ink)
    for t in p.ticks():
        xx = xpos(t)
        cv.fill(xx, y, 1, 4, ink)
        lines = ([p.clock.wall(t)] if p.clock.epoch else []) + [elapsed_tick(t - p.t0)]
        for k, s in enumerate(lines):
            w = text_width(s, S)
            cv.text(min(max(x0, xx - w // 2), x0 + plot_w - w), y + 5 + k * LINE, s, ink if k == 0 else muted, S)
    for k, s in enumerate(["wall clock", "elapsed"] if p.clock.epoch else ["elapsed"]):
        right(x0 - 6 * S, y + 5 + k * LINE, s, muted)
    y += axis_h + 8

    # legend: swatches on one line, then the wrapped explanations
    bar, sw = 160 * S // 2, TEXT_H
    text(M, y, "idle")
    bx = M + text_width("idle", S) + 6
    ramp = palette.lut()[:palette.NO_DATA]
    for i in range(bar):
        cv.fill(bx + i, y, 1, sw, ramp[round(i / (bar - 1) * (len(ramp) - 1))])
    x = text(bx + bar + 6, y, "working") + 16
    cv.fill(x, y, sw, sw, palette.STALL_RGB)
    x = text(x + sw + 4, y, "sync stall") + 16
    cv.fill(x, y, sw, sw, palette.NO_DATA_RGB)
    text(x + sw + 4, y, "no data")
    y += TEXT_H + 6
    for ln in legend_lines:
        text(M, y, ln, muted)
        y += LINE
    y += 6

    # numbered findings, each wrapped whole
    for ln, severity in finding_lines:
        text(M, y, ln, ink if severity == "high" else muted)
        y += LINE
    return cv.encode()
