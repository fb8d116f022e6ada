"""Recorded logs under fuzzed input: real files mutated, hostile text, every format (see tests/fuzzing.py)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fuzzing import FUZZ, SEED_NAMES, hostile_text, mutated, read_log_property, scratch, seed  # noqa: F401 - scratch is a fixture


@FUZZ
@given(data=st.data())
def test_fuzz_replay_logs(scratch, data):
    name = data.draw(st.sampled_from(SEED_NAMES))
    text = data.draw(st.one_of(mutated(seed(name)), hostile_text))
    fmt = data.draw(st.sampled_from(["auto", "auto", "nvidia-smi-csv", "dmon", "nvidia-smi-q", "dcgm"]))
    read_log_property(scratch, text, fmt)
