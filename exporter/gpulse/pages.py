"""What the report's HTML and the live page share: the heatmap cell bytes, the
stylesheet and the web assets (gpulse/web/).

A heatmap is rows × columns of one byte: 0..254 is a fraction 0..1 (work score,
utilisation or real work), 255 is "no data". Both pages ship the bytes
base64-encoded together with the colour table of gpulse.palette, so the browser,
the PNG and the legend can never disagree about what a colour means. It lives
beside palette.py, not in report/, because the live page (http/) draws the same
cells and must not depend on the report.
"""
from __future__ import annotations

import base64
import math
from importlib import resources
from typing import Sequence

from . import palette
from .palette import NO_DATA
from .safetext import csp_hash, fill


def cell(x: float | None) -> int:
    """A fraction as a heatmap byte (NO_DATA for a missing one)."""
    if x is None or math.isnan(x):
        return NO_DATA
    return round(min(1.0, max(0.0, x)) * (NO_DATA - 1))


def b64(rows: Sequence[bytes]) -> str:
    return base64.b64encode(b"".join(rows)).decode("ascii")


def web_asset(name: str) -> str:
    return resources.files("gpulse").joinpath("web", name).read_text(encoding="utf-8")


def page_style() -> str:
    """The pages' stylesheet with the palette's colours defined in front of it."""
    return palette.css() + "\n" + web_asset("gpulse.css")


def render_page(template: str, script: str, values: dict[str, str], style: str = "") -> str:
    """A page from a web/ template: its slots filled in one pass (safetext.fill; every
    value already escaped for where its slot sits), with the stylesheet and script
    inline and a Content-Security-Policy that allows exactly those two by their
    sha256 hashes: no other script or style runs, whatever a value holds."""
    style = style or page_style()
    return fill(web_asset(template), {**values, "STYLE": style, "SCRIPT": script,
                                      "STYLE_CSP": csp_hash(style), "SCRIPT_CSP": csp_hash(script)})
