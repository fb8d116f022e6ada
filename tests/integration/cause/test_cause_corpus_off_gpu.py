"""The straggler's cause on the labelled cause cases of bench/lib/corpus/causes.py whose
slow rank is off the GPU: the Alibaba PAI job's worker 6 idle with its memory held
while its peers spin-wait, with and without health columns, and the real 8xH100 ckpt1
and ckpt50 logs (rank 0 leaves the GPU to write checkpoints), as recorded and with
the health columns appended.

Each case's log goes through `gpulse report` (tests/causecorpus.py); its findings.json
must name the labelled cause for the labelled GPU, with evidence, the cause's remedy,
and, for a case whose log lacks the deciding signals, "unknown" naming what is missing.
Replayed through the exporter's engine, the live `gpulse_gpu_straggler_cause` gauge
must say the same (the real ckpt50 log).
"""
from __future__ import annotations

import pytest

import causecorpus

from conftest import CPU_BOUND

pytestmark = CPU_BOUND

CASES = causecorpus.SUBJECTS["off_gpu"]


@pytest.mark.parametrize("name", CASES)
def test_report_names_the_labelled_cause(cause_corpus, name):
    causecorpus.judge_report(*cause_corpus.reported(name))


@pytest.mark.parametrize("name", ["h100/ckpt50"])
def test_live_gauge_says_what_the_report_says(cause_corpus, name):
    causecorpus.judge_live(*cause_corpus.reported(name), cause_corpus.live(name))
