"""Compressed (and UTF-16) logs read as they are: a 100 ms nvidia-smi log of a long run is often
kept gzipped (or piped through a compressor as it is written), and a user hands the
report the file as it lies. The kind is known by the file's first bytes, never its
name; what the log holds must read the same, row for row, as the log uncompressed.

A logger killed mid-write (`nvidia-smi ... | gzip > node.csv.gz`) leaves a stream
without its end: its rows up to the cut are the log, with a warning, never an error
that loses them all. Damage at the very start, or a zstd log (no reader in Python's
standard library), is one line naming the problem.
"""
from __future__ import annotations

import bz2
import gzip
import lzma

import pytest

from conftest import require_data
from gpulse.sources.recorded import LogFormatError, LogStream, read_log

TRACE = "traces/h100-8gpu/ckpt1.csv"
LINES = 6000                    # 750 polls of 8 GPUs: enough for batches and marks


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The first LINES lines of the real trace, as a plain log."""
    with open(require_data(TRACE), encoding="utf-8", newline="") as f:
        text = "".join(f.readline() for _ in range(LINES))
    path = tmp_path_factory.mktemp("plain") / "node.csv"
    path.write_text(text, newline="")
    return path


def _same(a, b) -> None:
    assert a.format == b.format and a.devices == b.devices and a.nodes == b.nodes
    assert [(r.t, r.line, r.reading) for r in a.records] == [(r.t, r.line, r.reading) for r in b.records]
    assert [str(e) for e in a.errors] == [str(e) for e in b.errors]


@pytest.mark.parametrize("kind, compress", [("gzip", gzip.compress), ("bzip2", bz2.compress),
                                            ("xz", lzma.compress)])
def test_a_compressed_log_reads_as_the_log(plain, tmp_path, kind, compress):
    packed = tmp_path / "node.log"          # no telling extension: the bytes say
    packed.write_bytes(compress(plain.read_bytes()))
    want, got = read_log(str(plain)), read_log(str(packed))
    assert len(want.records) > 5000
    _same(want, got)
    assert got.warnings == want.warnings == []


def test_gzip_members_appended_read_as_one_log(plain, tmp_path):
    """`... | gzip >> node.csv.gz` over two runs of the logger: two gzip members, one
    after the other, read as the two halves of the text."""
    lines = plain.read_text().splitlines(keepends=True)
    half = len(lines) // 2
    packed = tmp_path / "node.csv.gz"
    packed.write_bytes(gzip.compress("".join(lines[:half]).encode()) + gzip.compress("".join(lines[half:]).encode()))
    _same(read_log(str(plain)), read_log(str(packed)))


def test_progress_of_a_compressed_log_counts_its_compressed_bytes(plain, tmp_path):
    packed = tmp_path / "node.csv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    stream = LogStream(str(packed))
    assert stream.compression == "gzip" and stream.size == packed.stat().st_size
    seen = []
    for rec in stream.records():
        if rec.line % 500 == 0:
            seen.append(stream.fraction)
    stream.close()
    assert seen == sorted(seen) and 0 < seen[0] < 0.5 < seen[-1] <= 1.0, seen
    assert stream.fraction == 1.0


@pytest.mark.parametrize("cut", [0.3, 0.9])
def test_a_gzip_stream_cut_short_keeps_its_rows_and_says_so(plain, tmp_path, cut):
    whole = gzip.compress(plain.read_bytes())
    packed = tmp_path / "node.csv.gz"
    packed.write_bytes(whole[:int(len(whole) * cut)])
    want, got = read_log(str(plain)), read_log(str(packed))
    n = len(got.records)
    assert 0.2 * len(want.records) < n < len(want.records)
    # every row read is the log's own; at most the cut line's poll is short
    assert [(r.t, r.line, r.reading) for r in got.records] == [(r.t, r.line, r.reading) for r in want.records[:n]]
    [warning] = got.warnings
    assert warning.startswith(f"{packed}: its gzip stream ends before its end (cut short) after line ")
    assert warning.endswith("the lines before it are read")


def test_a_gzip_stream_damaged_midway_keeps_the_rows_before(plain, tmp_path):
    """Damaged deflate data may decode to garbage before gzip finds it out (its CRC, at
    the end): the garbage lines are the reader's skipped lines as in any damaged text,
    the rows before the damage are the log's, and the damage is said."""
    whole = bytearray(gzip.compress(plain.read_bytes()))
    at = len(whole) // 2
    whole[at:at + 64] = bytes(64)           # a run of zeros where compressed data was
    packed = tmp_path / "node.csv.gz"
    packed.write_bytes(bytes(whole))
    want, got = read_log(str(plain)), read_log(str(packed))
    first_bad = min(e.line for e in got.errors)
    kept = [r for r in got.records if r.line < first_bad]
    assert len(kept) > 1000
    assert [(r.t, r.reading) for r in kept] == [(r.t, r.reading) for r in want.records[:len(kept)]]
    assert [w for w in got.warnings if w.startswith(f"{packed}: its gzip stream is damaged (")
            and w.endswith("the lines before it are read")], got.warnings


# ids of their own: a test's id must not hold its bytes (pytest-xdist's workers must
# collect the same ids, and a gzip header holds the time it was written)
@pytest.mark.parametrize("name, data, says", [
    pytest.param("cut.csv.gz", gzip.compress(b"x" * 10, mtime=0)[:12],
                 "its gzip stream ends before its end (cut short): nothing to read", id="gzip-cut-at-start"),
    pytest.param("bad.csv.gz", b"\x1f\x8b\x08\x00" + bytes(range(200)), "its gzip stream is damaged",
                 id="gzip-damaged-at-start"),
    pytest.param("node.csv.zst", b"\x28\xb5\x2f\xfd" + bytes(40), "zstd-compressed: decompress it first (zstdcat)",
                 id="zstd"),
    pytest.param("junk.csv", bytes(range(256)) * 4, "binary data, not a text log", id="binary"),
])
def test_what_cannot_be_read_is_one_line(tmp_path, name, data, says):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(LogFormatError) as e:
        read_log(str(path))
    [line] = str(e.value).splitlines()
    assert line.startswith(f"{path}:1: ") and says in line, line


def test_a_compressed_log_counts_as_the_text_it_holds(plain, tmp_path):
    """Whether a log is worth reading in a process of its own goes by what reading it
    costs, its text: a gzipped 200 MB log is ~15 MB of file."""
    from gpulse.sources.recorded import COMPRESSED_TEXT
    from gpulse.sources.replay import file_size
    packed = tmp_path / "node.csv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert file_size(str(plain)) == plain.stat().st_size
    assert file_size(str(packed)) == COMPRESSED_TEXT * packed.stat().st_size
    # the factor stays below what the real trace compresses to: never more text than it holds
    assert file_size(str(packed)) < plain.stat().st_size
    assert file_size(str(tmp_path)) == 0 and file_size(str(tmp_path / "absent.csv")) == 0


def test_a_compressed_log_through_a_pipe_reads_as_the_log(plain, tmp_path):
    """`gpulse report --input <(ssh node cat node.csv.gz)`: no size, no place to tell."""
    import os
    import threading
    fifo = tmp_path / "node.pipe"
    os.mkfifo(fifo)
    data = gzip.compress(plain.read_bytes())

    def write():
        with open(fifo, "wb") as f:
            f.write(data)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        got = read_log(str(fifo))
    finally:
        writer.join(timeout=30)
    _same(read_log(str(plain)), got)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_a_utf16_log_reads_as_the_log(plain, tmp_path, encoding):
    """nvidia-smi redirected by Windows PowerShell (`nvidia-smi ... > node.csv`) is
    UTF-16 with a byte-order mark; read as the text it holds, progress over its bytes."""
    wide = tmp_path / "node.csv"
    bom = "\ufeff" if encoding == "utf-16-be" else ""       # Python's utf-16 writes its own
    wide.write_bytes((bom + plain.read_text()).encode(encoding))
    _same(read_log(str(plain)), read_log(str(wide)))
    stream = LogStream(str(wide))
    seen = [stream.fraction for rec in stream.records() if rec.line % 500 == 0]
    stream.close()
    assert seen == sorted(seen) and 0 < seen[0] < 0.5 < seen[-1] <= 1.0, seen
