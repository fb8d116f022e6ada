"""Heatmap cells, shared by the report (HTML and PNG) and the live page.

A heatmap is rows × columns of one byte: 0..254 is a fraction 0..1 (utilisation or
real work), 255 is "no data". Both pages ship the bytes base64-encoded together with
the 256-entry colour table built here, so the browser, the PNG and the legend can
never disagree about what a colour means.
"""
from __future__ import annotations

import base64
import math
from typing import Sequence

NO_DATA = 255
# viridis, sampled at nine points: dark = idle, yellow = fully busy; readable in
# greyscale and by the colour-blind
STOPS = ((0x44, 0x01, 0x54), (0x48, 0x28, 0x78), (0x3E, 0x4A, 0x89), (0x31, 0x68, 0x8E), (0x26, 0x82, 0x8E),
         (0x1F, 0x9E, 0x89), (0x35, 0xB7, 0x79), (0x6E, 0xCE, 0x58), (0xFD, 0xE7, 0x25))
NO_DATA_RGB = (0xDD, 0xDD, 0xDD)


def lut() -> list[tuple[int, int, int]]:
    out = []
    for v in range(255):
        x = v / 254 * (len(STOPS) - 1)
        i = min(int(x), len(STOPS) - 2)
        f = x - i
        a, b = STOPS[i], STOPS[i + 1]
        out.append(tuple(round(a[c] + (b[c] - a[c]) * f) for c in range(3)))   # type: ignore[misc]
    out.append(NO_DATA_RGB)
    return out


def lut_hex() -> list[str]:
    return ["#%02x%02x%02x" % c for c in lut()]


def cell(x: float) -> int:
    if x is None or math.isnan(x):
        return NO_DATA
    return round(min(1.0, max(0.0, x)) * 254)


def binned(num: Sequence[float], den: Sequence[float], cols: int) -> bytes:
    """Σnum/Σden over `cols` equal bins of the ticks (ticks without data, den ≤ 0 or
    NaN, are left out of their bin; a bin with none is NO_DATA)."""
    n = len(num)
    out = bytearray(cols)
    for c in range(cols):
        a = c * n // cols
        b = max(a + 1, (c + 1) * n // cols)
        sn = sd = 0.0
        for i in range(a, min(b, n)):
            d = den[i]
            if d > 0:
                sn += num[i]
                sd += d
        out[c] = cell(sn / sd) if sd > 0 else NO_DATA
    return bytes(out)


def columns_for(ticks: int, max_cols: int) -> int:
    return max(1, min(ticks, max_cols))


def b64(rows: Sequence[bytes]) -> str:
    return base64.b64encode(b"".join(rows)).decode("ascii")
