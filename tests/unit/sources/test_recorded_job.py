"""sources/recorded/job.py on its own: which files a set of inputs names, what the
nodes are called, and the clock offset read off two nodes' stall edges."""
from __future__ import annotations

import random

import pytest

from gpulse.sources.recorded import LogFormatError, Rows, job
from gpulse.sources.recorded.stream import LogStream


def _edges(starts: list[float], length: float, shift: float = 0.0, jitter: float = 0.0, seed: int = 1):
    rnd = random.Random(seed)
    s = [t + shift + rnd.uniform(-jitter, jitter) for t in starts]
    return s, [t + length + rnd.uniform(-jitter, jitter) for t in s]


def test_the_lag_is_the_median_of_the_agreeing_edges_finer_than_a_poll():
    """Stalls at irregular times; the other node's clock 2.37 s ahead, each edge off by
    up to a 100 ms poll: the offset lands within 0.03 s."""
    rnd = random.Random(4)
    starts, t = [], 100.0
    for _ in range(30):
        starts.append(t)
        t += rnd.uniform(30.0, 60.0)
    ref = _edges(starts, 3.0, jitter=0.05, seed=2)
    mine = _edges(starts, 3.0, shift=2.37, jitter=0.05, seed=3)
    offset, matched, why = job._offset(mine, ref)
    assert offset == pytest.approx(2.37, abs=0.03) and matched >= 50 and why == ""


def test_a_stall_rhythm_shorter_than_the_lag_range_is_ambiguous():
    """Stalls every 4 s, exactly: lags 4 s apart fit as well; no offset is guessed."""
    starts = [100.0 + 4.0 * k for k in range(40)]
    offset, _, why = job._offset(_edges(starts, 1.0, shift=1.0), _edges(starts, 1.0))
    assert offset is None and "about as well" in why


def test_too_few_edges_in_common_give_no_offset():
    """One stall (its start and end) is not enough to trust a lag on."""
    ref = _edges([100.0], 2.0)
    offset, matched, why = job._offset(_edges([100.0], 2.0, shift=0.5), ref)
    assert offset is None and matched == 2 and "too few" in why
    offset, _, why = job._offset(([], []), ref)
    assert offset is None and "no all-GPU stall edges in common" in why


def test_inputs_expand_in_order_and_bad_ones_are_one_line(tmp_path):
    for name in ("n2.csv", "n10.csv", "n1.csv", "run[1].csv"):
        (tmp_path / name).write_text("x\n")
    d = str(tmp_path)
    assert job.expand([f"{d}/n*.csv"]) == [f"{d}/n1.csv", f"{d}/n10.csv", f"{d}/n2.csv"]
    assert job.expand([f"{d}/run[1].csv"]) == [f"{d}/run[1].csv"]      # the file, not a pattern
    with pytest.raises(LogFormatError, match="no file matches"):
        job.expand([f"{d}/none-*.csv"])
    with pytest.raises(LogFormatError, match="n1.csv: given twice"):
        job.expand([f"{d}/n1.csv", f"{d}/n*.csv"])
    with pytest.raises(LogFormatError, match="gone.csv: no such file"):
        job.expand([f"{d}/gone.csv"])
    with pytest.raises(LogFormatError, match=r"^-: no such file \(a log is read by its path; a stream as a pipe"):
        job.expand(["-"])


def test_a_pipe_is_one_log_but_never_one_of_a_job(tmp_path):
    """A job's logs are read twice (their clocks aligned on a first read): a pipe among
    them would read empty the second time, and be reported as an empty file."""
    import os
    fifo = tmp_path / "n2.pipe"
    os.mkfifo(fifo)
    (tmp_path / "n1.csv").write_text("x\n")
    assert job.expand([str(fifo)]) == [str(fifo)]
    with pytest.raises(LogFormatError) as e:
        job.expand([str(tmp_path / "n1.csv"), str(fifo)])
    assert str(e.value) == (f"{fifo}: a pipe among a job's logs, which are read twice (their clocks are aligned "
                            "on a first read): give each node's log as a file")


def test_the_job_is_named_after_what_its_nodes_share():
    assert job.job_name(["train-n0", "train-n1"]) == "train"
    assert job.job_name(["node1", "node2"]) == "node"
    assert job.job_name(["a", "b"]) == "job"


def _node_log(path, seed: int, step: float, t0: float, polls: int, states: bool) -> str:
    """An nvidia-smi log of 8 GPUs, `polls` polls `step` apart from t0 (whole
    milliseconds, so two nodes' rows can share a time), the rows of a poll 1 ms apart
    now and then; with clock-event state columns (counted seconds) when `states`."""
    rnd = random.Random(seed)
    head = "timestamp, index, utilization.gpu [%], power.draw [W], memory.used [MiB]"
    if states:
        head += ", clocks_event_reasons.sw_power_cap, clocks_event_reasons.hw_slowdown"
    lines = [head]
    for p in range(polls):
        ms = round((t0 + p * step) * 1000)
        for g in range(8):
            if rnd.random() < 0.3:
                ms += 1
            s, frac = divmod(ms, 1000)
            stamp = f"2026/01/01 {s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{frac:03d}"
            row = f"{stamp}, {g}, {rnd.choice([0, 97, 100])} %, {rnd.uniform(80, 690):.2f} W, 70000 MiB"
            if states:
                row += f", {rnd.choice(['Active', 'Not Active'])}, Not Active"
            lines.append(row)
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_job_s_share_read_moves_as_its_rows_are_merged(tmp_path):
    """The report's progress (share done, ETA) reads the job's `fraction`: it follows
    the records handed out, also where a node's rows come as Rows (over a batch of
    rows, the vectorised reader's), not only at the end."""
    polls = 4200            # over a batch (smi_fast.BATCH rows)
    logs = [job.NodeLog(_node_log(tmp_path / "n0.csv", 1, 0.1, 3600.0, polls, states=False), "n0"),
            job.NodeLog(_node_log(tmp_path / "n1.csv", 2, 0.1, 3600.05, polls, states=True), "n1", offset=-0.73),
            job.NodeLog(_node_log(tmp_path / "n2.csv", 3, 0.1, 3600.0, polls, states=False), "n2")]
    stream = job.JobStream(logs, workload="job")
    total = 3 * polls * 8
    seen = []
    n = 0
    for item in stream.records():
        k = len(item) if type(item) is Rows else 1
        if (n + k) // (total // 10) > n // (total // 10):
            seen.append(stream.fraction)
        n += k
    assert n == total and stream.fraction == 1.0
    assert seen == sorted(seen)
    # handed out as read: within a batch of rows per node of the records' share
    for k, f in enumerate(seen, 1):
        assert abs(f - k / 10) < 0.2, seen


def _wide_log(path, seed: int) -> None:
    """A long log with every column a wide logger writes beside the samples: a power
    limit (sometimes [N/A]), clock-event states, the mask and counters, ECC (now and
    then [Unknown Error], which makes the row a GPU that could not be read), remapped
    rows (`.pending` sometimes [N/A]), the link."""
    from hostilelogs import smi_csv
    rng = random.Random(seed)
    lines = smi_csv(polls=2500, gpus=4).splitlines()
    out = [lines[0] + ", power.limit [W], clocks_event_reasons.hw_slowdown, clocks_event_reasons.active, "
                      "clocks_event_reasons_counters.hw_thermal_slowdown [us], "
                      "ecc.errors.uncorrected.volatile.total, remapped_rows.pending, pcie.link.gen.current, "
                      "pcie.link.width.current"]
    for k, ln in enumerate(lines[1:]):
        limit = rng.choice(("700.00 W", "700.00 W", "650.00 W", "[N/A]"))
        ecc = "[Unknown Error]" if rng.random() < 0.01 else rng.choice(("0", "1", "[N/A]"))
        out.append(f"{ln}, {limit}, {rng.choice(('Active', 'Not Active'))}, 0x{rng.choice((0, 4, 8)):016x}, "
                   f"{k * 1000} us, {ecc}, {rng.choice(('No', 'Yes', '[N/A]'))}, {rng.choice((4, 5))}, 16")
    path.write_text("\n".join(out) + "\n")


def test_the_alignment_scan_reads_the_samples_alone_and_the_same(tmp_path):
    """The clock-alignment scan asks the reader for samples only (RunFacts.samples_only):
    every row the full read takes yields the same sample and power limit, none of the
    columns the scan does not read (counters, states) is parsed, and a row lost only
    for a cell of those columns (an ECC count reading [Unknown Error]) is a sample to
    the scan, as its utilisation and power were read."""
    from gpulse.sources.recorded.stream import LogStream
    p = tmp_path / "wide.csv"
    _wide_log(p, 5)

    def read(samples_only: bool):
        s = LogStream(str(p), samples_only=samples_only)
        rows = [(t, g, smp, (gauges or {}).get("power_limit_watts")) for t, g, smp, gauges in job._readings(s.items())]
        assert s.done
        return rows

    full, only = read(False), read(True)
    lost = p.read_text().count("[Unknown Error]")
    assert 0 < lost < 200 and len(only) == 2500 * 4 and len(full) == len(only) - lost
    taken = set(map(repr, only))
    assert all(repr(r) in taken for r in full)
    assert any(limit is None for *_, limit in only) and any(limit == 650.0 for *_, limit in only)
    assert not [r for r in LogStream(str(p), samples_only=True).records() if r.reading.counters]
    assert [r for r in LogStream(str(p)).records() if r.reading.counters]


def test_the_logs_of_a_job_share_one_log_s_read_ahead(tmp_path):
    """Each log's reader reads rows ahead a batch at a time; a job's logs are read at
    once, so each holds its share of one log's batch (RunFacts.together). With a whole
    batch each, a report held ~16 MB per log: 626 MB for 32 logs, 1.15 GB for 64."""
    pytest.importorskip("pyarrow")
    from gpulse.sources.recorded import smi_fast
    polls, n = 3500, 16                  # 28,000 rows a log: over a whole batch
    path = _node_log(tmp_path / "n.csv", 1, 0.1, 3600.0, polls, states=False)
    share = smi_fast.batch_rows(5, n)    # 5 columns: the clock, index, utilisation, power, memory
    assert share * n <= smi_fast.batch_rows(5) < polls * 8

    def runs(stream) -> tuple[int, list[int]]:
        """(records, the lengths of its runs of Rows)."""
        total, lengths = 0, []
        for item in stream.items():
            k = len(item) if type(item) is Rows else 1
            total += k
            if type(item) is Rows:
                lengths.append(k)
        return total, lengths

    alone_total, alone = runs(LogStream(path))
    logs = [job.NodeLog(path if i == 0 else _copy(path, tmp_path / f"n{i}.csv"), f"n{i}") for i in range(n)]
    stream = job.JobStream(logs, workload="job")
    assert all(s.facts.together == n for s in stream.streams)
    shared_total, shared = runs(stream.streams[0])
    assert shared_total == alone_total == polls * 8
    assert max(shared) <= share < max(alone), (max(shared), share, max(alone))
    stream.close()


def _copy(src: str, dest) -> str:
    dest.write_text(open(src, encoding="utf-8").read())
    return str(dest)


def _rows_of(items) -> list[tuple]:
    """Every row of a stream's items, as the Record a row-by-row reader makes of it."""
    out = []
    for item in items:
        for r in (item.records() if type(item) is Rows else (item,)):
            x = r.reading
            out.append((r.line, x.gpu, x.samples, x.gauges, x.counters, x.up, x.error, x.attribution))
    return out


def test_a_job_s_rows_come_as_columns_in_the_order_a_merge_of_its_records_gives(tmp_path):
    """A job's rows reach the replay as runs of Rows (columns, as a single log's do, not
    a Record each) in exactly the order heapq.merge gives the nodes' Records by time,
    ties to the earlier log (the replay's polls then take the same rows): each row
    keyed by its node, moved by its clock's offset and attributed to the job. A log
    read alone (an export's) comes through in the reader's runs."""
    import heapq
    pytest.importorskip("pyarrow")     # Rows come from the vectorised reader
    polls = 2000
    logs = [job.NodeLog(_node_log(tmp_path / "n0.csv", 1, 0.1, 3600.0, polls, states=False), "n0"),
            job.NodeLog(_node_log(tmp_path / "n1.csv", 2, 0.1, 3600.05, polls, states=True), "n1", offset=-0.73),
            job.NodeLog(_node_log(tmp_path / "n2.csv", 3, 0.1, 3600.0, polls, states=False), "n2")]

    def node(lg):
        for r in LogStream(lg.path).records():
            r = r.moved(-lg.offset) if lg.offset else r
            x = r.reading
            yield type(r)(type(x)(f"{lg.node}:{x.gpu}", x.samples, x.gauges, x.counters, x.up, x.error,
                                  {"workload": "job"}), r.line)

    want = _rows_of(heapq.merge(*map(node, logs), key=lambda r: r.t))
    stream = job.JobStream(logs, workload="job")
    items = list(stream.records())
    assert _rows_of(items) == want and len(want) == 3 * polls * 8
    runs = [len(i) for i in items if type(i) is Rows]
    assert sum(runs) > 0.9 * len(want) and max(runs) > 1
    assert stream.start == want[0][2][0].t and stream.end == want[-1][2][0].t
    # an export's: one log (longer than a batch: read by the vectorised reader when
    # alone), unkeyed, no workload
    one = job.NodeLog(_node_log(tmp_path / "long.csv", 4, 0.1, 3600.0, 4000, states=False), "n3", offset=-0.73)
    alone = list(job.JobStream([one], keyed=False).records())
    own = [(ln, g, [s.moved(0.73) for s in smp], *more) for ln, g, smp, *more in
           _rows_of(LogStream(one.path).records())]
    assert _rows_of(alone) == own
    assert max(len(i) for i in alone if type(i) is Rows) >= 1000


def test_interleaved_rows_go_as_rows_of_several_logs_and_none_is_lost_to_a_failing_log(tmp_path):
    """Where the nodes' polls interleave row by row, the rows of several logs go on
    together as Rows (not a Record each), in the merge's order; a log that fails
    further on (a line no text log has) leaves every row merged before the failure
    handed on before its one-line error, as rows handed on one by one would be."""
    import heapq
    pytest.importorskip("pyarrow")
    from gpulse.sources.recorded.stream import MAX_LINE
    polls = 6000
    paths = [_node_log(tmp_path / f"n{i}.csv", 10 + i, 0.1, 3600.0 + 0.01 * i, polls, states=False)
             for i in range(2)]
    bad = tmp_path / "n1.csv"
    lines = bad.read_text().splitlines(keepends=True)
    cut = 1 + 8 * 5000                   # after 5,000 polls: several of the readers' batches in
    bad.write_text("".join(lines[:cut]) + "9" * (MAX_LINE + 10) + "\n" + "".join(lines[cut:]))
    logs = [job.NodeLog(p, f"n{i}") for i, p in enumerate(paths)]

    def node(lg):
        try:
            for r in LogStream(lg.path).records():
                x = r.reading
                yield type(r)(type(x)(f"{lg.node}:{x.gpu}", x.samples, x.gauges, x.counters, x.up, x.error,
                                      {"workload": "job"}), r.line)
        except LogFormatError:
            return

    want = _rows_of(heapq.merge(*map(node, logs), key=lambda r: r.t))
    items = []
    with pytest.raises(LogFormatError, match="longer than"):
        for item in job.JobStream(logs, workload="job").records():
            items.append(item)
    got = _rows_of(items)
    # the failing log's rows end at its bad line; the other log's go on until the merge
    # needs the failing log's next row
    assert 8 * 5000 <= sum(1 for r in got if r[1].startswith("n1:")) and got == want[:len(got)]
    assert len(got) >= 2 * 8 * 5000 - 8
    mixed = [i for i in items if type(i) is Rows and len({g.split(":")[0] for g in i.gpu}) == 2]
    assert mixed and sum(len(i) for i in items if type(i) is Rows) > 0.9 * len(got)


def _paused(path, seed: int, pause_after: int, pause_s: float, polls: int) -> str:
    """_node_log's log with every row after poll `pause_after` moved on by `pause_s`:
    the job paused (a rank restarted, the input stalled) with the logger stopped."""
    lines = open(_node_log(path, seed, 0.1, 3600.0, polls, states=False), encoding="utf-8").read().splitlines()
    out = lines[:1 + 8 * pause_after]
    for ln in lines[1 + 8 * pause_after:]:
        stamp, rest = ln.split(",", 1)
        h, m, s = stamp.split()[1].split(":")
        t = int(h) * 3600 + int(m) * 60 + float(s) + pause_s
        out.append(f"2026/01/01 {int(t) // 3600:02d}:{int(t) // 60 % 60:02d}:{t % 60:06.3f},{rest}")
    path.write_text("\n".join(out) + "\n")
    return str(path)


def test_a_pause_inside_a_run_of_rows_is_a_gap_and_logs_of_two_runs_are_refused(tmp_path):
    """The check for a stretch no node recorded runs on every row of a run of Rows: a
    job-wide pause in the middle of the nodes' batches is a gap kept (the rows on either
    side all there, in order), and a log whose first row comes after every other log
    had ended is refused in one line, as with rows read one by one."""
    import heapq
    pytest.importorskip("pyarrow")
    logs = [job.NodeLog(_paused(tmp_path / f"n{i}.csv", i + 1, 1000, 120.0, 2000), f"n{i}") for i in range(2)]
    items = list(job.JobStream(logs, workload="job").records())
    assert max(len(i) for i in items if type(i) is Rows) > 1
    want = heapq.merge(*(LogStream(lg.path).records() for lg in logs), key=lambda r: r.t)
    assert [(ln, smp[0].t) for ln, _, smp, *_ in _rows_of(items)] == [(r.line, r.t) for r in want]
    late = job.NodeLog(_paused(tmp_path / "late.csv", 3, 0, 600.0, 2000), "late")
    with pytest.raises(LogFormatError, match="after every log of the job that began before it had ended"):
        list(job.JobStream([logs[0], late], workload="job").records())
