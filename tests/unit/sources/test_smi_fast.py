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
from gpulse.sources.recorded import smi_csv as smi_rows_reader
from hostilelogs import smi_csv
from readalike import read_alike

if not smi_fast.available():
    if IN_CI:
        pytest.fail("pyarrow (the report extra) is not installed: .ci/run installs .[test]", pytrace=False)
    pytest.skip("pyarrow not installed", allow_module_level=True)


@pytest.fixture(autouse=True)
def small_batches(monkeypatch):
    """Batches of 1,000 rows: every log here spans several, and ends in a short one;
    their plain rows made Rows 300 at a time."""
    monkeypatch.setattr(smi_fast, "BATCH", 1000)
    monkeypatch.setattr(smi_rows_reader, "ROWS_PIECE", 300)


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
        lambda s: s.replace(" W", " Wh"),                       # a unit's letters and more
        lambda s: s.replace(" MiB", " x"),                      # letters of no unit
        lambda s: s.replace(" %", " 5"),                        # a second number
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


def test_a_row_short_of_a_field_and_one_with_a_field_too_many_in_one_batch(monkeypatch, tmp_path):
    """The batch's commas add up (one row a field short, another a field over), so only
    Arrow's count per row can tell: both rows are handed back and judged row by row,
    every other row of the batch is taken, and the problems are the row-by-row reader's."""
    lines = smi_csv(polls=800, gpus=4).splitlines()
    lines[700] = lines[700].rsplit(",", 1)[0]
    lines[705] = lines[705] + ", 5 W"
    p = tmp_path / "offset.csv"
    p.write_text("\n".join(lines) + "\n")
    run = read_alike(str(p), monkeypatch, 0.99)
    assert run[4] == 2


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


_REASONS = ("gpu_idle", "sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown")


def _state_log(path, seed: int, polls: int = 1500, broken: float = 0.0) -> None:
    """hostilelogs' 4-GPU CSV with clock-event reason columns as drivers >= 535 write them
    (`Active` / `Not Active`, as in the real capture, and the `.active` hex mask), and a
    power limit and ECC count (the rarer fields); `broken`: the share of rows with a state
    cell the strict reader hands back ([N/A], other words, another case, a mask without 0x)."""
    rng = random.Random(seed)
    lines = smi_csv(polls=polls, gpus=4).splitlines()
    head = lines[0] + ", " + ", ".join(f"clocks_event_reasons.{r}" for r in _REASONS) + \
        ", clocks_event_reasons.active, enforced.power.limit [W], ecc.errors.uncorrected.volatile.total"
    odd = ["[N/A]", "Maybe", "ACTIVE", "not active", "0004", "[Not Supported]"]
    out = [head]
    for k, ln in enumerate(lines[1:]):
        states = ["Active" if rng.random() < 0.2 else "Not Active" for _ in _REASONS]
        mask = f"0x{rng.choice((0, 1, 4, 0x20, 0x44)):016X}"
        if rng.random() < broken:
            states[rng.randrange(len(states))] = rng.choice(odd)
        out.append(f"{ln}, {', '.join(states)}, {mask}, 700.00 W, {k // 3000}")
    path.write_text("\n".join(out) + "\n")


def test_clock_event_states_take_the_fast_path(monkeypatch, tmp_path):
    """Reason states are read in Arrow as text: such a log is read by batches, to the
    same records (throttle seconds counted from the states) as row by row."""
    p = tmp_path / "states.csv"
    _state_log(p, 5)
    run = read_alike(str(p), monkeypatch, 0.9)
    counters = [reading.counters for _, reading in run[2]]
    assert any(c.get("throttle_seconds_total", {}).get(("sw_power_cap",), 0) > 0 for c in counters)


@pytest.mark.parametrize("seed", [6, 7])
def test_odd_state_cells_are_judged_row_by_row(seed, monkeypatch, tmp_path):
    p = tmp_path / "states.csv"
    _state_log(p, seed, broken=0.1)
    run = read_alike(str(p), monkeypatch, 0.7)
    assert run[4] > 50                                          # the odd words are problems, found alike


def _counter_log(path, seed: int) -> None:
    """A long log with a power limit and clock-event counters (microseconds, as
    nvidia-smi writes them), one GPU throttled, a counter reset (the driver reloaded)
    and a few [N/A] cells."""
    rng = random.Random(seed)
    lines = smi_csv(polls=3000, gpus=4).splitlines()
    out = [lines[0] + ", power.limit [W], clocks_event_reasons_counters.sw_power_cap [us], "
                      "clocks_event_reasons_counters.hw_thermal_slowdown [us]"]
    thermal = [0] * 4
    for k, ln in enumerate(lines[1:]):
        gpu = k % 4
        if k == 7000:
            thermal = [0] * 4                                   # reset: counted on from the new value
        thermal[gpu] += 90_000 if gpu == 2 else rng.randrange(0, 3) * 1000
        cells = ["700.00 W", f"{k // 4 * 10} us", f"{thermal[gpu]} us"]
        if rng.random() < 0.002:
            cells[rng.randrange(3)] = "[N/A]"
        out.append(f"{ln}, {', '.join(cells)}")
    path.write_text("\n".join(out) + "\n")


def _rows_made(path, monkeypatch) -> int:
    """How many rows of the log travel as Rows (columns still), not a Record each."""
    from gpulse.sources.recorded import read_log
    from gpulse.sources.recorded.records import Rows
    made = [0]
    real = Rows.__init__

    def counted(self, t, *rest):
        made[0] += len(t)
        real(self, t, *rest)

    with monkeypatch.context() as m:
        m.setattr(Rows, "__init__", counted)
        read_log(str(path))
    return made[0]


def test_clock_event_counters_and_the_power_limit_take_the_fast_path(monkeypatch, tmp_path):
    """The counters and the limit are plain numbers: such rows are Rows, to the same
    records (throttle seconds, the limit as a gauge) as row by row."""
    p = tmp_path / "counters.csv"
    _counter_log(p, 3)
    run = read_alike(str(p), monkeypatch, 0.9)
    readings = [reading for _, reading in run[2]]
    assert any(r.counters.get("throttle_seconds_total", {}).get(("hw_thermal",), 0) > 0 for r in readings)
    limits = [r.gauges.get("power_limit_watts") for r in readings if r.up]
    assert limits.count(700.0) > 0.99 * len(limits), set(limits)
    # and they travel as Rows, columns still, not a Record each
    made = _rows_made(p, monkeypatch)
    assert made > 0.9 * len(readings), (made, len(readings))


def _clock_trouble_log(path) -> None:
    """A long log with what LogStream takes apart: a clock stepped back a minute, a row
    repeated, a row of one GPU a second out of order, a clock jumping two days ahead,
    and a GPU first seen late."""
    lines = smi_csv(polls=3000, gpus=4).splitlines()
    head, rows = lines[0], lines[1:]
    rows.insert(5003, rows[5002])                               # a repeat
    rows[6001], rows[6005] = rows[6005], rows[6001]             # out of order within the window

    def shift(ln: str, seconds: int) -> str:
        stamp, rest = ln.split(",", 1)
        day, clock = stamp.split(" ")
        hh, mm, ss = clock.split(":")
        total = int(hh) * 3600 + int(mm) * 60 + int(ss.split(".")[0]) + seconds
        days, total = divmod(total, 86400)
        y, mo, d = day.split("/")
        return f"{y}/{mo}/{int(d) + days:02d} {total // 3600:02d}:{total // 60 % 60:02d}:{total % 60:02d}." \
               f"{ss.split('.')[1]},{rest}"

    rows[7000:9000] = [shift(ln, -60) for ln in rows[7000:9000]]
    rows[9000:] = [shift(ln, 2 * 86400) for ln in rows[9000:]]
    rows[10_000:10_000] = [ln.replace(", 3, ", ", 7, ", 1) for ln in rows[10_000:10_004] if ", 3, " in ln]
    path.write_text("\n".join([head] + rows) + "\n")


def _polls(path: str, fast: bool, monkeypatch: pytest.MonkeyPatch, speed: float) -> list:
    from gpulse.sources.replay import ReplaySource
    from testing.config import test_config
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(smi_fast, "available", lambda: False)
        src = ReplaySource(test_config(**{"source": "replay", "replay.file": path, "replay.speed": speed}))
        out: list = [src.open()]
        now = 0.0
        while not src.finished:
            out.append(src.poll(now))
            now += 1.0
        out.append((src.run.warnings(), src.run.errors, src.run.start, src.run.end))
    return out


@pytest.mark.parametrize("speed", [0, 400])
@pytest.mark.parametrize("log", ["ckpt50", "hostile", "clock", "states", "counters"])
def test_replay_polls_alike(log, speed, monkeypatch, tmp_path):
    """The replay hands the engine the same polls whether the log's plain rows came as
    Rows (whole, from the vectorised reader) or as a Record each: same readings, same
    samples and instants, same device lists, at the same polls, at any speed."""
    if log == "ckpt50":
        path = str(require_data("traces/h100-8gpu/ckpt50.csv"))
    else:
        p = tmp_path / f"{log}.csv"
        if log == "hostile":
            p.write_text(_hostile_log(4), newline="")
        elif log == "clock":
            _clock_trouble_log(p)
        elif log == "counters":
            _counter_log(p, 9)
        else:
            _state_log(p, 8, broken=0.02)
        path = str(p)
    fast = _polls(path, True, monkeypatch, speed)
    slow = _polls(path, False, monkeypatch, speed)
    assert len(fast) == len(slow)
    for k, (a, b) in enumerate(zip(fast, slow)):
        assert a == b, k
    assert len(fast) > 3


def _rare_log(path, seed: int) -> None:
    """A long log with every rarer column at once: the reasons' own states before the
    `.active` mask (a reason's own column wins), ECC counts that grow, remapped rows
    with `.pending` sometimes [N/A] (a text cell: the row stays plain), the link's
    maximum generation from the GPU's and the root port's, and clock-event counters."""
    rng = random.Random(seed)
    lines = smi_csv(polls=2500, gpus=4).splitlines()
    out = [lines[0] + ", clocks_event_reasons.hw_slowdown, clocks_event_reasons.active, "
                      "ecc.errors.corrected.volatile.total, ecc.errors.uncorrected.volatile.total, "
                      "remapped_rows.correctable, remapped_rows.uncorrectable, remapped_rows.pending, "
                      "pcie.link.gen.gpumax, pcie.link.gen.hostmax, "
                      "clocks_event_reasons_counters.sw_thermal_slowdown [us]"]
    ecc = [0] * 4
    for k, ln in enumerate(lines[1:]):
        gpu = k % 4
        ecc[gpu] += rng.random() < 0.01
        pending = rng.choice(("No", "No", "Yes", "[N/A]"))
        mask = f"0x{rng.choice((0, 4, 8, 0x24)):016x}"
        out.append(f"{ln}, {rng.choice(('Active', 'Not Active'))}, {mask}, {ecc[gpu] * 3}, {ecc[gpu]}, "
                   f"{gpu}, 0, {pending}, 5, {rng.choice((4, 5))}, {k * 1000} us")
    path.write_text("\n".join(out) + "\n")


def test_rows_with_rarer_fields_are_rows_read_alike(monkeypatch, tmp_path):
    """Clock-event states (integrated per GPU in row order), ECC, remapped rows and a
    derived link generation are made a column at a time (smi.plain_parts): the same
    records as row by row, and they travel as Rows, not a Record each."""
    p = tmp_path / "rare.csv"
    _rare_log(p, 4)
    run = read_alike(str(p), monkeypatch, 0.9)
    readings = [reading for _, reading in run[2]]
    assert any(r.counters.get("throttle_seconds_total", {}).get(("hw_slowdown",), 0) > 0 for r in readings)
    assert any(r.counters.get("ecc_errors_total", {}).get(("uncorrected",), 0) > 0 for r in readings)
    assert {r.gauges.get("remapping_pending") for r in readings} == {None, 0.0, 1.0}
    assert {r.gauges.get("pcie_link_max_generation") for r in readings} == {4.0, 5.0}
    made = _rows_made(p, monkeypatch)
    assert made > 0.9 * len(readings), (made, len(readings))


def test_a_log_of_utilisation_alone_reads_and_replays(monkeypatch, tmp_path):
    """timestamp, index and utilization.gpu only: rows with no gauge at all. Its Rows
    once had no gauges list (the replay failed on an index past its end)."""
    p = tmp_path / "util.csv"
    lines = smi_csv(polls=2500, gpus=4).splitlines()
    p.write_text("\n".join(",".join(ln.split(",")[:3]) for ln in lines) + "\n")
    run = read_alike(str(p), monkeypatch, 0.9)
    assert all(not reading.gauges for _, reading in run[2])
    polls = _polls(str(p), True, monkeypatch, 0)
    assert polls[1:-1] == _polls(str(p), False, monkeypatch, 0)[1:-1]
    assert sum(len(r.samples) for poll in polls[1:-1] if poll for r in poll.readings) == 10_000


def test_arrow_kernels_search_for_no_module_at_each_call():
    """pyarrow's numeric kernels try `import dateutil` at every call; where it is not
    installed, each try searched sys.path again (a failed import is not remembered),
    and reading a job's logs in small batches spent a fifth of its time there."""
    import sys
    assert smi_fast.available()
    searched: list[str] = []

    class Spy:
        def find_spec(self, name, path=None, target=None):
            searched.append(name)

    pa, pc = smi_fast.pa, smi_fast.pc
    a = pa.array([1.0, 250.0])

    def kernels():
        pc.greater_equal(pc.divide(pc.cast(a, pa.float64()), 100.0), 1.0)

    kernels()          # what pyarrow looks for once (pandas) it remembers
    sys.meta_path.insert(0, Spy())
    try:
        for _ in range(3):
            kernels()
    finally:
        sys.meta_path.pop(0)
    assert searched == []


def _skewed_log(path, every: int) -> None:
    """A long log in which, every `every` polls, a poll's first row is stamped 3 ms after
    the rows that follow it (a logger that writes a poll's rows a few ms out of order)."""
    lines = smi_csv(polls=3000, gpus=4).splitlines()
    head, rows = lines[0], lines[1:]
    for k in range(0, len(rows), 4 * every):
        stamp, rest = rows[k].split(",", 1)
        rows[k] = f"{stamp[:-3]}{int(stamp[-3:]) + 3:03d},{rest}"
    path.write_text("\n".join([head] + rows) + "\n")


def test_rows_out_of_order_now_and_then_leave_the_rest_as_rows(monkeypatch, tmp_path):
    """A record out of order turns the stream's reorder window into a heap; once the
    rows are in order again the window is a queue again, so the plain rows after it go
    on as Rows (they used to be a Record each to the end of the log: here 176 of the
    12,000 rows were Rows) and only the reorder window's rows around a row out of order
    are a Record each; the replay's polls are those of the row-by-row read."""
    from gpulse.sources.recorded.records import Rows
    from gpulse.sources.recorded.stream import LogStream
    p = tmp_path / "skewed.csv"
    _skewed_log(p, 40)
    rows = total = 0
    for item in LogStream(str(p)).items():
        k = len(item) if type(item) is Rows else 1
        total += k
        rows += k if type(item) is Rows else 0
    assert total == 3000 * 4 and rows > 0.7 * total, (rows, total)
    for speed in (0, 400):
        assert _polls(str(p), True, monkeypatch, speed) == _polls(str(p), False, monkeypatch, speed)
