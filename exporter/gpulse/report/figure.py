"""heatmap.png: the report's picture on its own, readable in a post-mortem without
the HTML. From the top: title, run and time zone, what the colour means; one lane
per finding with its time spans; the sync-stall strip; one row per GPU (per node
from GROUP_AT GPUs, then the worst node's GPUs); the time axis in wall clock and
elapsed time; the legend and the numbered findings.

Drawn from the same Picture as report.html (same rows, order and colours) with the
stdlib PNG writer and bitmap font (png.py, font.py).
"""
from __future__ import annotations

from typing import Any

from .. import palette
from .clock import elapsed
from .findings import Analysis
from .font import ADVANCE, HEIGHT, text_width
from .png import Canvas
from .render import Picture, elapsed_tick, natural_key, ordered, row_height, straggler_badge

PNG_MAX_WIDTH = 2000          # heatmap columns in the PNG
MIN_PLOT = 800                # px: short runs get wider columns so the text fits
M = 12                        # margin
LINE = HEIGHT + 4             # one line of text
LANE = 9                      # a finding lane
STRIP = 10                    # the stall strip
MAX_FINDINGS = 8              # listed under the legend


def _cells_line(cells: bytes, table: list[bytes]) -> bytes:
    return b"".join(table[v] for v in cells)


def render_png(a: Analysis, max_width: int = PNG_MAX_WIDTH, order: str = "natural",
               doc: dict[str, Any] | None = None, picture: Picture | None = None) -> bytes:
    p = picture or Picture(a, max_width, order, doc)
    col_px = max(1, MIN_PLOT // p.cols)
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
    heights = [row_height(len(rows)) for _, rows in blocks]
    labels = [lab for _, rows in blocks for lab, _ in rows] + ["sync stalls", "wall clock", "elapsed"] + \
        [f"finding {n}" for n, _ in p.spans]
    label_w = max(text_width(s) for s in labels) + 8
    x0 = M + label_w
    width = max(x0 + plot_w + M, 640)
    chars = (width - 2 * M) // ADVANCE

    stragglers = sorted(p.a.stragglers, key=lambda s: -s["gap"])
    legend_lines = 3 + (1 if stragglers else 0)
    n_findings = min(len(p.findings), MAX_FINDINGS)
    axis_h = 5 + LINE * (2 if p.clock.epoch else 1)
    height = (M + 14 + 4 + 3 * LINE + 4 + LANE * len(p.spans) + STRIP + 3
              + sum(len(rows) * h + (LINE + 4 if title else 0) for (title, rows), h in zip(blocks, heights))
              + axis_h + 8 + 12 + LINE * legend_lines + 6 + LINE * (n_findings + (1 if len(p.findings) > n_findings else 0))
              + M)
    cv = Canvas(width, height, paper)

    def text(x: int, y: int, s: str, rgb=ink, scale: int = 1) -> int:
        room = (width - M - x) // (ADVANCE * scale)
        return cv.text(x, y, s if len(s) <= room else s[:max(0, room - 3)] + "...", rgb, scale)

    def right(x: int, y: int, s: str, rgb=ink) -> None:
        cv.text(x - text_width(s), y, s, rgb)

    def xpos(t: float) -> int:
        return x0 + round((t - p.t0) / (p.t1 - p.t0) * plot_w) if p.t1 > p.t0 else x0

    # title and what is shown
    y = M
    nodes = sorted({g.node for g in p.gpus if g.node}, key=natural_key)
    text(M, y, f"gpulse heatmap: {p.rec.source}", ink, 2)
    y += 18
    when = (f"{p.clock.wall(p.t0, True)} to {p.clock.wall(p.t1, True)} ({elapsed(p.t1 - p.t0)})"
            if p.clock.epoch else f"{elapsed(p.t1 - p.t0)}")
    text(M, y, f"{when} - {p.zone_line()}", muted)
    y += LINE
    where = (f"node {nodes[0]}" if len(nodes) == 1 else f"{len(nodes)} nodes ({', '.join(nodes[:4])}"
             f"{', ...' if len(nodes) > 4 else ''})" if nodes else "node not named in the log")
    text(M, y, f"{len(p.gpus)} GPUs on {where} - one row per {'node' if p.grouped else 'GPU'}, "
               f"{'worst first' if p.order == 'worst' else 'natural order (node, then GPU index)'}", muted)
    y += LINE
    text(M, y, f"colour = {palette.MODES[mode]}, over {elapsed(p.dt) if p.dt >= 1 else f'{p.dt:.1f} s'} per column",
         muted)
    y += LINE + 4
    top = y

    # finding lanes and the stall strip
    for n, spans in p.spans:
        right(x0 - 6, y + 1, f"finding {n}", muted)
        for t_a, t_b in spans:
            xa, xb = xpos(t_a), max(xpos(t_b), xpos(t_a) + 2)
            cv.fill(xa, y, xb - xa, LANE - 2, ink)
            if xb - xa >= text_width(str(n)) + 4:
                cv.text(xa + 2, y, str(n), paper)
        y += LANE
    right(x0 - 6, y + 2, "sync stalls", muted)
    cv.pixels(x0, y, _cells_line(p.stall, stall_lut), STRIP)
    y += STRIP + 3

    # the rows
    for (title, rows), rh in zip(blocks, heights):
        if title:
            y += 4
            text(M, y, title)
            y += LINE
        for lab, cells in rows:
            cv.pixels(x0, y, _cells_line(cells, lut), rh - 1)
            right(x0 - 6, y + (rh - 1 - HEIGHT) // 2, lab, ink if lab.endswith("straggler)") else muted)
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
            w = text_width(s)
            cv.text(min(max(x0, xx - w // 2), x0 + plot_w - w), y + 5 + k * LINE, s, ink if k == 0 else muted)
    for k, s in enumerate(["wall clock", "elapsed"] if p.clock.epoch else ["elapsed"]):
        right(x0 - 6, y + 5 + k * LINE, s, muted)
    y += axis_h + 8

    # legend
    bar = 160
    text(M, y + 2, "idle")
    bx = M + text_width("idle") + 6
    ramp = palette.lut()[:palette.NO_DATA]
    for i in range(bar):
        cv.fill(bx + i, y, 1, 10, ramp[round(i / (bar - 1) * (len(ramp) - 1))])
    x = text(bx + bar + 6, y + 2, "working") + 16
    cv.fill(x, y, 10, 10, palette.STALL_RGB)
    x = text(x + 14, y + 2, "sync stall") + 16
    cv.fill(x, y, 10, 10, palette.NO_DATA_RGB)
    text(x + 14, y + 2, "no data")
    y += 14
    for s in (palette.LEGEND["cells"], palette.LEGEND["stall"], "stall strip: share of each column in which "
              "every GPU of a group was stalled (paper = none, magenta = the whole column)"):
        text(M, y, s, muted)
        y += LINE
    if stragglers:
        kinds = sorted({straggler_badge(s)[0] for s in stragglers})
        text(M, y, "; ".join(palette.STRAGGLER['idler' if k == 'cold' else 'busier'][1].split(". ")[0]
                             for k in kinds), muted)
        y += LINE
    y += 6

    # numbered findings
    for n, f in enumerate(p.findings[:n_findings], 1):
        text(M, y, f"{n} [{f['severity']}] {f['text']}"[:chars], ink if f["severity"] == "high" else muted)
        y += LINE
    if len(p.findings) > n_findings:
        text(M, y, f"... and {len(p.findings) - n_findings} more in report.html and findings.json", muted)
    return cv.encode()
