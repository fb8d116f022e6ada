"""sources/recorded/job.py on its own: which files a set of inputs names, what the
nodes are called, and the clock offset read off two nodes' stall edges."""
from __future__ import annotations

import random

import pytest

from gpulse.sources.recorded import LogFormatError, job


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
    for n, _ in enumerate(stream.records(), 1):
        if n % (total // 10) == 0:
            seen.append(stream.fraction)
    assert n == total and stream.fraction == 1.0
    assert seen == sorted(seen)
    # handed out as read: within a batch of rows per node of the records' share
    for k, f in enumerate(seen, 1):
        assert abs(f - k / 10) < 0.2, seen
