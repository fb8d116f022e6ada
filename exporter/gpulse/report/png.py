"""A minimal PNG writer (8-bit RGB, no interlace) and a canvas to draw on: a heatmap
is pixels, boxes and a little text (report/font.py), so the report needs no imaging
library. Format: PNG specification, ISO/IEC 15948."""
from __future__ import annotations

import struct
import zlib
from typing import Iterable

from . import font

RGB = tuple[int, int, int]


class Canvas:
    """An RGB pixel buffer: filled boxes, pre-coloured pixel rows and bitmap text.
    Everything is clipped to the canvas."""

    def __init__(self, width: int, height: int, background: RGB):
        self.width, self.height = width, height
        self.px = bytearray(bytes(background) * (width * height))

    def fill(self, x: int, y: int, w: int, h: int, rgb: RGB) -> None:
        x0, x1 = max(0, x), min(self.width, x + w)
        y0, y1 = max(0, y), min(self.height, y + h)
        if x1 <= x0 or y1 <= y0:
            return
        if y1 - y0 > 3 * (x1 - x0):
            # tall and narrow (a span edge across a thousand rows): one strided copy
            # per byte column instead of a slice per row
            stride, n = self.width * 3, y1 - y0
            for xx in range(x0, x1):
                for c in range(3):
                    off = (y0 * self.width + xx) * 3 + c
                    self.px[off:off + (n - 1) * stride + 1:stride] = bytes((rgb[c],)) * n
            return
        line = bytes(rgb) * (x1 - x0)
        for yy in range(y0, y1):
            off = (yy * self.width + x0) * 3
            self.px[off:off + len(line)] = line

    def pixels(self, x: int, y: int, line: bytes, h: int = 1) -> None:
        """Copy one row of RGB bytes to (x, y) and the h - 1 rows below."""
        if x < 0 or x >= self.width:
            return
        line = line[:(self.width - x) * 3]
        for yy in range(max(0, y), min(self.height, y + h)):
            off = (yy * self.width + x) * 3
            self.px[off:off + len(line)] = line

    def text(self, x: int, y: int, s: str, rgb: RGB, scale: int = 1) -> int:
        """Draw s with its top-left at (x, y); returns the x after the last character."""
        for ch in font.ascii_text(s):
            for row, cols in enumerate(font.GLYPHS[ch]):
                for c in cols:
                    self.fill(x + c * scale, y + row * scale, scale, scale, rgb)
            x += font.ADVANCE * scale
        return x

    def encode(self) -> bytes:
        stride = self.width * 3
        return encode_png(self.width, self.height,
                          (bytes(self.px[y * stride:(y + 1) * stride]) for y in range(self.height)))


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(width: int, height: int, rows: Iterable[bytes]) -> bytes:
    """rows: `height` byte strings of width*3 RGB bytes each, top to bottom."""
    if width <= 0 or height <= 0:
        raise ValueError("a PNG needs at least one pixel")
    raw = bytearray()
    n = 0
    for row in rows:
        if len(row) != width * 3:
            raise ValueError(f"row {n} has {len(row)} bytes, expected {width * 3}")
        raw.append(0)          # filter type 0 (none) for every scanline
        raw += row
        n += 1
    if n != height:
        raise ValueError(f"got {n} rows, expected {height}")
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)   # 8-bit, truecolour
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(bytes(raw), 6))
            + _chunk(b"IEND", b""))


def decode_png_rgb(data: bytes) -> tuple[int, int, list[bytes]]:
    """Any 8-bit RGB or RGBA, non-interlaced PNG (ours, or a browser's screenshot) ->
    (width, height, RGB rows). For tests and checks of what a page shows."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos = 8
    width = height = channels = 0
    idat = bytearray()
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        crc = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0]
        if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
            raise ValueError(f"bad CRC in {kind!r}")
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body[:13])
            if depth != 8 or ctype not in (2, 6) or interlace:
                raise ValueError("only 8-bit, non-interlaced RGB or RGBA is supported")
            channels = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(bytes(idat))
    stride = width * channels
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        off = y * (stride + 1)
        ftype = raw[off]
        line = bytearray(raw[off + 1:off + 1 + stride])
        _unfilter(ftype, line, prev, channels)
        rows.append(bytes(line) if channels == 3 else bytes(b for i, b in enumerate(line) if i % 4 != 3))
        prev = line
    return width, height, rows


def _unfilter(ftype: int, line: bytearray, prev: bytearray, bpp: int) -> None:
    """Undo one scanline's filter in place (PNG spec, section 9)."""
    if ftype == 0:
        return
    for i in range(len(line)):
        a = line[i - bpp] if i >= bpp else 0
        b = prev[i]
        if ftype == 1:
            line[i] = (line[i] + a) & 0xFF
        elif ftype == 2:
            line[i] = (line[i] + b) & 0xFF
        elif ftype == 3:
            line[i] = (line[i] + ((a + b) >> 1)) & 0xFF
        elif ftype == 4:
            c = prev[i - bpp] if i >= bpp else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        else:
            raise ValueError(f"unknown filter type {ftype}")
