"""The report's bitmap font and its time zone names, in the test process."""
from __future__ import annotations

import pytest

from gpulse.report import font
from gpulse.report.clock import parse_zone
from gpulse.report.png import Canvas, decode_png_rgb


def test_font_draws_every_character():
    assert len(font.GLYPHS) == 96 and all(len(g) == font.HEIGHT for g in font.GLYPHS.values())
    assert font.ascii_text("GPUs 1–7 × ½") == "GPUs 1-7 x 1/2"
    cv = Canvas(40, 9, (255, 255, 255))
    end = cv.text(1, 1, "GPU", (0, 0, 0))
    assert end == 1 + 3 * font.ADVANCE
    w, h, rows = decode_png_rgb(cv.encode())
    inked = {(x, y) for y in range(h) for x in range(w) if tuple(rows[y][3 * x:3 * x + 3]) == (0, 0, 0)}
    # 'G', 'P' and 'U' as the table draws them, nothing outside their cells
    expect = {(1 + k * font.ADVANCE + c, 1 + r) for k, ch in enumerate("GPU")
              for r, cols in enumerate(font.GLYPHS[ch]) for c in cols}
    assert inked == expect


@pytest.mark.parametrize("text, offset", [("+05:30", 19800), ("UTC-5", -18000), ("utc", 0), ("Asia/Tokyo", 32400)])
def test_timezone_names_and_offsets(text, offset):
    from datetime import datetime
    assert datetime(2025, 7, 27, tzinfo=parse_zone(text)).utcoffset().total_seconds() == offset
