"""The vectorised nvidia-smi CSV reader (smi_fast, pyarrow) and the row-by-row one read
every log alike: the same records, devices, problems (same lines, same words, same
order) and clock warnings, on real captures of ../shared/data and on logs full of
what real logs get wrong (tests/readalike.py; the whole real traces are read alike in
tests/integration/replay/test_smi_fast_traces.py). Each test also checks the
vectorised reader took most rows, so a reader that handed everything back could not
pass it."""
from __future__ import annotations

import random

import pytest

from conftest import IN_CI, SHARED_DATA, require_data
from gpulse.sources.recorded import LogFormatError, smi_fast
from hostilelogs import smi_csv
from readalike import read_alike

if not smi_fast.available():
    if IN_CI:
        pytest.fail("pyarrow (the report extra) is not installed: .ci/run installs .[test]", pytrace=False)
    pytest.skip("pyarrow not installed", allow_module_level=True)


@pytest.fixture(autouse=True)
def small_batches(monkeypatch):
    """Batches of 1,000 rows: every log here spans several, and ends in a short one."""
    monkeypatch.setattr(smi_fast, "BATCH", 1000)


@pytest.mark.parametrize("name", ["h100-80gb-hbm3-query-gpu.csv", "h100-mig-query-gpu.csv",
                                  "geforce-rtx-4080-super-query-gpu.csv"])
def test_real_captures_read_alike(name, monkeypatch, tmp_path):
    """One real poll each ([N/A] cells, deprecated fields, MIG): repeated into a log long
    enough for batches, each copy a second later."""
    lines = (SHARED_DATA / "captures" / "nvidia-smi" / name).read_text().splitlines() if (
        SHARED_DATA / "captures" / "nvidia-smi" / name).exists() else require_data(f"captures/nvidia-smi/{name}")
    head, rows = lines[0], [ln for ln in lines[1:] if ln.strip()]
    out = [head]
    for k in range(600):
        out += [ln.replace(":53.", f":{53 + k % 7:02d}.", 1).replace("08:12:", f"08:{12 + k // 7 % 40:02d}:", 1)
                for ln in rows]
    p = tmp_path / name
    p.write_text("\n".join(out) + "\n")
    read_alike(str(p), monkeypatch, 0.0)


def _hostile_log(seed: int) -> str:
    """hostilelogs' 4-GPU CSV with one row in twenty broken the ways logs break."""
    rng = random.Random(seed)
    lines = smi_csv(polls=800, gpus=4).splitlines()
    breaks = [
        lambda s: s.replace("%", "[N/A]", 1).replace("99 [N/A]", "[N/A]").replace("10 [N/A]", "[N/A]"),
        lambda s: s.rsplit(",", 1)[0] + ", [GPU is lost]",
        lambda s: s.rsplit(",", 1)[0],                          # truncated
        lambda s: s + ", 5 W",                                  # too many fields
        lambda s: s.replace(" W", " kW"),                       # another unit
        lambda s: s.replace(" W", " MiB"),                      # another dimension
        lambda s: s.replace("40000 MiB", "1e3 MiB"),            # exponent: valid, row by row
        lambda s: s.replace("40000 MiB", "-5 MiB"),             # out of range
        lambda s: s.replace("2026/", "2026/13/", 1).replace("/07/", "/", 1),   # month 13
        lambda s: s.replace("2026/07/25", "2026-07-25"),        # no nvidia-smi timestamp
        lambda s: s.replace(".", ".", 1) + "\r",                # a carriage return inside a row
        lambda s: s.replace(", 0,", ", ١,").replace(", 1,", ", ١,"),   # non-ASCII index
        lambda s: s.replace("%", " %  "),                       # spaces
        lambda s: s.replace("99 %", "99.000001 %").replace("10 %", "100.5 %"),
        lambda s: s.replace("W", "W\t"),                        # a tab
        lambda s: s.replace("40000", "4_0000"),                 # Python's float would take it
        lambda s: "",                                           # a blank line
        lambda s: s.replace(".", "", 1),                        # no fraction
        lambda s: s.replace(" %", "%"),
        lambda s: s + "\u00a0",                                 # a non-ASCII space
    ]
    out = [lines[0]]
    for k, ln in enumerate(lines[1:]):
        if k == 1500:
            out.append(lines[0])                                # the logger restarted
        out.append(rng.choice(breaks)(ln) if rng.random() < 0.05 else ln)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_hostile_logs_read_alike(seed, monkeypatch, tmp_path):
    p = tmp_path / "hostile.csv"
    p.write_text(_hostile_log(seed), newline="")
    run = read_alike(str(p), monkeypatch, 0.8)
    assert run[4] > 20                                          # problems were found, and alike


def test_a_line_no_log_has_ends_the_read_after_the_rows_before_it(monkeypatch, tmp_path):
    from gpulse.sources.recorded import stream
    monkeypatch.setattr(stream, "MAX_LINE", 4096)
    p = tmp_path / "run.csv"
    p.write_text(smi_csv(polls=2500, gpus=4) + "1" * 5000 + "\n" + smi_csv(polls=2, gpus=4).split("\n", 1)[1])
    for fast in (True, False):
        got = []
        with monkeypatch.context() as m:
            if not fast:
                m.setattr(smi_fast, "available", lambda: False)
            s = stream.LogStream(str(p))
            with pytest.raises(LogFormatError, match=r":10002: a line longer than"):
                for r in s.records():
                    got.append(r.line)
        assert len(got) == 10_000, fast
