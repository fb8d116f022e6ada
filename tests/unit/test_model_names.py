"""The one natural order of node and GPU names (model.natural_key, gpu_sort_key),
whatever a log or an exporter names them."""
from __future__ import annotations

import sys

from gpulse.model import gpu_sort_key, natural_key


def test_numbers_in_names_sort_as_numbers():
    names = ["node-10", "node-2", "node-1", "n", "node-02"]
    assert sorted(names, key=natural_key) == ["n", "node-1", "node-2", "node-02", "node-10"]
    gpus = ["n10:0", "1", "n2:1", "0/1", "0", "n2:0", "10", "2"]
    assert sorted(gpus, key=gpu_sort_key) == ["0", "0/1", "1", "2", "10", "n2:0", "n2:1", "n10:0"]


def test_a_digit_run_longer_than_python_converts_sorts_last():
    """A dcgm-exporter Hostname of 5,000 digits (found by the replay fuzz test) raised
    ValueError from int() and took the log's replay with it."""
    huge = "9" * (sys.get_int_max_str_digits() + 700)
    names = [f"n{huge}", "n10", f"n{huge}x", "n2"]
    assert sorted(names, key=natural_key) == ["n2", "n10", f"n{huge}", f"n{huge}x"]
    gpus = [f"n1:{huge}", "n1:3", f"{huge}:0", "n1:0"]
    assert sorted(gpus, key=gpu_sort_key) == [f"{huge}:0", "n1:0", "n1:3", f"n1:{huge}"]
