"""A minimal PNG writer (8-bit RGB, no interlace): a heatmap is only pixels, so the
report needs no imaging library. Format: PNG specification, ISO/IEC 15948."""
from __future__ import annotations

import struct
import zlib
from typing import Iterable


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
    """Read back what encode_png writes (filter 0 only) — for tests and checks."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos = 8
    width = height = 0
    idat = bytearray()
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        crc = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0]
        if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
            raise ValueError(f"bad CRC in {kind!r}")
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
            if (depth, ctype) != (8, 2):
                raise ValueError("only 8-bit RGB is supported")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(bytes(idat))
    stride = width * 3 + 1
    rows = []
    for y in range(height):
        line = raw[y * stride:(y + 1) * stride]
        if line[0] != 0:
            raise ValueError("only filter type 0 is supported")
        rows.append(bytes(line[1:]))
    return width, height, rows
