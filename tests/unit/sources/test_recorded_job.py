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
