"""gpulse's one colour language, shared by the Grafana dashboards, the report
(HTML and PNG) and the live page. Nothing else may define a heatmap colour.

- Cells: viridis, dark = idle, bright = working. Sequential, readable in
  greyscale and by the colour-blind, and Grafana's heatmap panel ships the same
  scheme by name ("Viridis"), so the dashboards need no custom colour steps.
- The default cell value is the *work score*: real work counts 1, time reported
  busy but spent spin-waiting in a collective counts SPIN_WEIGHT, idle counts 0.
  A sync stall is then a dark (idle) or mid-tone (spin-waiting) column across
  every row, a hot straggler is one bright row among mid-tone peers that wait
  for it, a cold straggler one dark row among spin-waiting peers.
- Stalls: one colour, outside the palette, used only for "all GPUs of a group
  stalled" (the stall strip and marked spans).
- No data: light grey, never a palette colour.
"""
from __future__ import annotations

# viridis sampled at nine points (matplotlib's table), dark → bright
STOPS = ((0x44, 0x01, 0x54), (0x48, 0x28, 0x78), (0x3E, 0x4A, 0x89), (0x31, 0x68, 0x8E), (0x26, 0x82, 0x8E),
         (0x1F, 0x9E, 0x89), (0x35, 0xB7, 0x79), (0x6E, 0xCE, 0x58), (0xFD, 0xE7, 0x25))
GRAFANA_SCHEME = "Viridis"          # the same palette by its name in Grafana's heatmap panel
NO_DATA_RGB = (0xDD, 0xDD, 0xDD)
STALL_RGB = (0xE0, 0x1E, 0x84)      # magenta: not in viridis, distinct in greyscale from both ends
SPIN_WEIGHT = 0.5                    # a spin-waiting second is half-way between idle and working

LEGEND = {
    "cells": "dark = idle · mid-tone = spin-waiting in a collective · bright = working",
    "stall": "magenta = every GPU of the group stalled at once (sync stall)",
    "no_data": "grey = no data",
}


def hex_rgb(rgb: tuple[int, int, int]) -> str:
    return "#%02x%02x%02x" % rgb


STALL_HEX = hex_rgb(STALL_RGB)
NO_DATA_HEX = hex_rgb(NO_DATA_RGB)


def work_score(active: float, spin: float) -> float:
    """The default cell value from the share of time working and spin-waiting (0..1 each)."""
    return min(1.0, max(0.0, active + SPIN_WEIGHT * spin))
