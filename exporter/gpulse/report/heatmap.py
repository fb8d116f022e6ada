"""The report's heatmap rows (HTML and PNG); the cell encoding they share with
the live page is gpulse.pages."""
from __future__ import annotations

from typing import Sequence

from ..pages import cell
from ..palette import NO_DATA, work_amount

ORDERS = ("natural", "worst")     # row orders of every heatmap the report draws (see render.ordered)


def work_seconds(active: Sequence[float], spin: Sequence[float]) -> list[float]:
    """Per tick, the seconds the work score counts (binned over the sampled seconds,
    this is palette.work_score of each column)."""
    return [work_amount(a, s) for a, s in zip(active, spin)]


def binned(num: Sequence[float], den: Sequence[float], cols: int) -> bytes:
    """Σnum/Σden over `cols` equal bins of the ticks (ticks without data, den ≤ 0 or
    NaN, are left out of their bin; a bin with none is NO_DATA)."""
    n = len(num)
    top = NO_DATA - 1
    if cols >= n:                  # one tick per column: the common case, kept cheap
        out = bytearray([NO_DATA]) * cols
        for i in range(n):
            d = den[i]
            if d > 0:
                x = num[i] / d
                if x == x:                          # NaN stays NO_DATA
                    out[i] = 0 if x <= 0 else top if x >= 1 else round(x * top)
        return bytes(out)
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


def mean_rows(rows: Sequence[bytes]) -> bytes:
    """Column-wise mean of several rows (one row per node from its GPUs' rows);
    NO_DATA where none of them has data."""
    if not rows:
        return b""
    out = bytearray(len(rows[0]))
    for c in range(len(out)):
        vals = [r[c] for r in rows if r[c] != NO_DATA]
        out[c] = round(sum(vals) / len(vals)) if vals else NO_DATA
    return bytes(out)


def columns_for(ticks: int, max_cols: int) -> int:
    return max(1, min(ticks, max_cols))


