"""Shared pieces of the property-based fuzzing of every parser that reads outside
input (tests/unit/*/test_fuzz_*.py, tests/integration/faults/test_fuzz_parsers.py).

Each parser gets two kinds of input from hypothesis: text built from its own
grammar with hostile values, and real recorded files (../shared/data) mutated at
random (bytes deleted, inserted, replaced, lines duplicated, cut short). The
property is the same everywhere: the parser returns, or raises its one documented
error with a one-line message. Nothing else escapes, and nothing takes long (the
hypothesis deadline flags a slow example, a subprocess timeout a hang).
"""
from __future__ import annotations

import math
import socket
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from conftest import require_data

FUZZ = settings(max_examples=100, deadline=5000, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])

# text a hostile or broken file is made of: control characters, quotes, YAML and CSV
# syntax, huge and odd numbers, non-ASCII digits, surrogate-free unicode
HOSTILE_TOKENS = ["", " ", "\t", "\n", "\r\n", "\x00", "\x1b[2J", "'", '"', "\\", "{", "}", "[", "]", ":", ",",
                  "#", "&a", "*a", "!!python/object:os.system", "<<: *a", "---", "...", "|", ">", "%YAML 1.1",
                  "NaN", "nan", "-Inf", "+Inf", "1e309", "-0", "9" * 5000, "0x1F", "١٢", "²", "½", "N/A",
                  "[N/A]", "[Not Supported]", "[GPU is lost]", "%", " W", " MiB", "ü", "😀", "\u2028", "\ufeff"]
hostile_text = st.lists(st.one_of(st.sampled_from(HOSTILE_TOKENS), st.text(max_size=12)), max_size=60).map("".join)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """One file rewritten by every example (a new directory each would cost more than the parse)."""
    return tmp_path_factory.mktemp("fuzz") / "input"


def one_line(e: BaseException) -> str:
    msg = str(e)
    assert msg and "\n" not in msg and "Traceback" not in msg, repr(msg)
    return msg


@st.composite
def mutated(draw, seed: str, max_edits: int = 8) -> str:
    """`seed` with a few random edits: a fuzzer's mutations over a real file."""
    text = seed
    for _ in range(draw(st.integers(1, max_edits))):
        if not text:
            text = draw(hostile_text)
            continue
        i = draw(st.integers(0, len(text) - 1))
        op = draw(st.sampled_from(["delete", "insert", "replace", "dup-line", "truncate", "swap-lines"]))
        if op == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 200)):]
        elif op == "insert":
            text = text[:i] + draw(hostile_text) + text[i:]
        elif op == "replace":
            text = text[:i] + draw(st.sampled_from(HOSTILE_TOKENS)) + text[i + 1:]
        elif op == "truncate":
            text = text[:i]
        else:
            lines = text.split("\n")
            j = draw(st.integers(0, len(lines) - 1))
            if op == "dup-line":
                lines[j:j] = [lines[j]] * draw(st.integers(1, 50))
            else:
                k = draw(st.integers(0, len(lines) - 1))
                lines[j], lines[k] = lines[k], lines[j]
            text = "\n".join(lines)
    return text


def head(path, max_lines: int) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return "".join(line for _, line in zip(range(max_lines), fh))


PATHOLOGICAL_YAML = ["[" * 100_000, "{a: " * 50_000, "".join(" " * i + f"k{i}:\n" for i in range(1200)),
                     "a: &a [" + ", ".join(["*a"] * 3) + "]\n",
                     "sample_interval: " + "9" * 5000 + "\n",       # over Python's int digit limit
                     "source: 2001-13-01\n"]                         # a timestamp YAML cannot build


def read_log_property(path, text: str, fmt: str) -> None:
    from gpulse.sources.recorded import LogFormatError, read_log
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        run = read_log(str(path), fmt)
    except LogFormatError as e:
        one_line(e)
        return
    for e in run.errors:
        assert "\n" not in str(e)
    for r in run.records:
        assert isinstance(r.t, float) and math.isfinite(r.t)


_SEEDS: dict[str, str] = {}


def seed(name: str) -> str:
    """A real recorded file (its head), read once; passed by name so a failing
    example prints the name, not 40 kB of text."""
    if not _SEEDS:
        _SEEDS.update({
        "smi": head(require_data("traces/h100-8gpu/ckpt10.csv"), 120),
        "query": head(require_data("captures/nvidia-smi/h100-mig-query-gpu.csv"), 40),
        "q": head(require_data("captures/nvidia-smi/h100-80gb-hbm3-q.txt"), 200),
        "dcgm": require_data("captures/dcgm-exporter/l4-gpu-operator.prom").read_text(),
        "dcgm8": require_data("captures/dcgm-exporter/h100x8-eks-aicr-sampled.prom").read_text(),
        })
    return _SEEDS[name]


SEED_NAMES = ["smi", "query", "q", "dcgm", "dcgm8"]


def exchange(port: int, data: bytes, wait: float = 5.0, half_close: bool = True) -> bytes:
    """Send raw bytes, read until the server closes (or `wait` passes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        try:
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:          # the server may close first on hostile input: fine
            pass
        out = b""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            out += chunk
        return out
