"""gpulse's one colour language, shared by the Grafana dashboards, the report
(HTML and PNG) and the live page. Nothing else may define a heatmap colour: the
report's Python takes its tables from here, the pages get them shipped inside the
page (`for_browser()`, `css()`), and a test greps the code and web assets for
colours defined anywhere else.

- Cells: viridis, dark = idle, bright = working. Sequential, readable in
  greyscale and by the colour-blind, and Grafana's heatmap panel ships the same
  scheme by name ("Viridis"), so the dashboards need no custom colour steps.
- The default cell value is the *work score*: real work counts 1, time reported
  busy but spent spin-waiting in a collective counts SPIN_WEIGHT, idle counts 0.
  A sync stall is then a dark (idle) or mid-tone (spin-waiting) column across
  every row, a hot straggler is one bright row among mid-tone peers that wait
  for it, a cold straggler one dark row among spin-waiting peers.
- Stalls: one colour, outside the palette, used only for "all GPUs of a group
  stalled" (the stall strip and marked stall bands).
- No data: light grey, never a palette colour.
- Chrome (paper, ink, muted text, finding marks) is neutral so it never reads as
  a value.
"""
from __future__ import annotations

from typing import Any

# viridis sampled at nine points (matplotlib's table), dark → bright
STOPS = ((0x44, 0x01, 0x54), (0x48, 0x28, 0x78), (0x3E, 0x4A, 0x89), (0x31, 0x68, 0x8E), (0x26, 0x82, 0x8E),
         (0x1F, 0x9E, 0x89), (0x35, 0xB7, 0x79), (0x6E, 0xCE, 0x58), (0xFD, 0xE7, 0x25))
GRAFANA_SCHEME = "Viridis"          # the same palette by its name in Grafana's heatmap panel
NO_DATA_RGB = (0xDD, 0xDD, 0xDD)
STALL_RGB = (0xE0, 0x1E, 0x84)      # magenta: not in viridis, distinct in greyscale from both ends
SPIN_WEIGHT = 0.5                    # a spin-waiting second is half-way between idle and working
PAPER_RGB = (0xFF, 0xFF, 0xFF)       # picture background; the "no stall" end of the stall strip
INK_RGB = (0x1D, 0x1D, 0x1F)         # text, axes, finding-span marks
MUTED_RGB = (0x6B, 0x6B, 0x70)       # secondary text, ticks
ROW_GAP = "rgba(255,255,255,0.6)"    # thin line between heatmap rows (pages only)

NO_DATA = 255                        # the cell byte for "no data"; 0..254 is a value 0..1

LEGEND = {
    "cells": "dark = idle · mid-tone = spin-waiting in a collective · bright = working",
    "stall": "magenta = every GPU of the group stalled at once (sync stall)",
    "no_data": "grey = no data",
}

# What a heatmap cell can show, the default first. Every view offers the same three.
MODES = {
    "work": "work score (real work + ½ spin-wait)",
    "busy": "utilisation (busy)",
    "active": "real work (active)",
}
DEFAULT_MODE = "work"

# A straggler is the GPU everyone waits for; which kind says where its rank's time goes.
# direction as the analysis names it -> (short badge, full explanation)
STRAGGLER = {
    "idler": ("waited for · busy off the GPU",
              "cold straggler: the GPU everyone waits for. Its rank is busy off the GPU (checkpointing, data "
              "loading, host-side work) while its peers spin-wait in a collective."),
    "busier": ("waited for · most GPU work",
               "hot straggler: the GPU everyone waits for. It computes longer than its peers, which wait for it "
               "at every synchronisation point."),
}


def hex_rgb(rgb: tuple[int, int, int]) -> str:
    return "#%02x%02x%02x" % rgb


STALL_HEX = hex_rgb(STALL_RGB)
NO_DATA_HEX = hex_rgb(NO_DATA_RGB)


def work_amount(active: float, spin: float) -> float:
    """What the work score counts, in the unit of its inputs (seconds or shares)."""
    return active + SPIN_WEIGHT * spin


def work_score(active: float, spin: float) -> float:
    """The default cell value from the share of time working and spin-waiting (0..1 each)."""
    return min(1.0, max(0.0, work_amount(active, spin)))


def _blend(a: tuple[int, int, int], b: tuple[int, int, int], f: float) -> tuple[int, int, int]:
    return (round(a[0] + (b[0] - a[0]) * f), round(a[1] + (b[1] - a[1]) * f), round(a[2] + (b[2] - a[2]) * f))


def lut() -> list[tuple[int, int, int]]:
    """Cell byte -> colour: 0..254 along viridis, NO_DATA grey."""
    out = []
    for v in range(NO_DATA):
        x = v / (NO_DATA - 1) * (len(STOPS) - 1)
        i = min(int(x), len(STOPS) - 2)
        out.append(_blend(STOPS[i], STOPS[i + 1], x - i))
    out.append(NO_DATA_RGB)
    return out


def stall_lut() -> list[tuple[int, int, int]]:
    """Stall-strip byte -> colour: paper (no stall) to the stall colour (stalled the
    whole column); NO_DATA grey where no group held a job."""
    return [_blend(PAPER_RGB, STALL_RGB, v / (NO_DATA - 1)) for v in range(NO_DATA)] + [NO_DATA_RGB]


def lut_hex() -> list[str]:
    return [hex_rgb(c) for c in lut()]


def stall_lut_hex() -> list[str]:
    return [hex_rgb(c) for c in stall_lut()]


def gradient_css() -> str:
    return "linear-gradient(90deg, " + ", ".join(hex_rgb(c) for c in STOPS) + ")"


def css() -> str:
    """CSS custom properties the pages' stylesheet uses for every palette colour."""
    return (":root{" + f"--gpulse-stall:{STALL_HEX};--gpulse-stall-wash:rgba({STALL_RGB[0]},{STALL_RGB[1]},"
            f"{STALL_RGB[2]},.14);--gpulse-no-data:{NO_DATA_HEX};--gpulse-cells:{gradient_css()};"
            f"--gpulse-ink:{hex_rgb(INK_RGB)};--gpulse-muted:{hex_rgb(MUTED_RGB)}" + "}")


def for_browser() -> dict[str, Any]:
    """Everything a page's script needs to colour and explain a heatmap."""
    return {"lut": lut_hex(), "stall_lut": stall_lut_hex(), "stall": STALL_HEX, "no_data": NO_DATA_HEX,
            "row_gap": ROW_GAP, "node_gap": hex_rgb(INK_RGB), "legend": LEGEND, "modes": MODES, "default_mode": DEFAULT_MODE,
            "straggler": {k: {"badge": v[0], "title": v[1]} for k, v in STRAGGLER.items()}}
