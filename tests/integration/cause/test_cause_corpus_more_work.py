"""The straggler's cause on the labelled cause cases of bench/lib/corpus/causes.py whose
slow worker has more to compute: the Alibaba PAI job's worker 6 with clocks, power
and health as its peers', the same activity logged without clocks or throttle reasons
(more work or throttled: "unknown" is the right answer), and the seed imbalance case
with and without health columns.

Each case's log goes through `gpulse report` (tests/causecorpus.py); its findings.json
must name the labelled cause for the labelled GPU, with evidence, the cause's remedy,
and, for a case whose log lacks the deciding signals, "unknown" naming what is missing.
Replayed through the exporter's engine, the live `gpulse_gpu_straggler_cause` gauge
must say the same (the PAI cases; the 4-GPU seed case has no straggler to carry it).
"""
from __future__ import annotations

import pytest

import causecorpus

from conftest import CPU_BOUND

pytestmark = CPU_BOUND

CASES = causecorpus.SUBJECTS["more_work"]


@pytest.mark.parametrize("name", CASES)
def test_report_names_the_labelled_cause(cause_corpus, name):
    causecorpus.judge_report(*cause_corpus.reported(name))


@pytest.mark.parametrize("name", ["pai-more-work-avg", "pai-hot-plain-avg"])
def test_live_gauge_says_what_the_report_says(cause_corpus, name):
    causecorpus.judge_live(*cause_corpus.reported(name), cause_corpus.live(name))
