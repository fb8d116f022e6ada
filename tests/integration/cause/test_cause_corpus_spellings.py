"""The straggler's cause on the labelled cause cases of bench/lib/corpus/causes.py that
log the clocks-event reasons without the driver's counters, in each spelling
nvidia-smi has printed: `clocks_event_reasons.<reason>` Active / Not Active, the
pre-535 `clocks_throttle_reasons.<reason>`, and the `.active` bit mask alone.

Each case's log goes through `gpulse report` (tests/causecorpus.py); its findings.json
must name the labelled cause for the labelled GPU, with evidence and the cause's
remedy (the live gauge is judged on the counter cases, test_cause_corpus_throttling.py
and test_cause_corpus_hardware.py).
"""
from __future__ import annotations

import pytest

import causecorpus

from conftest import CPU_BOUND

pytestmark = CPU_BOUND

CASES = causecorpus.SUBJECTS["spellings"]


@pytest.mark.parametrize("name", CASES)
def test_report_names_the_labelled_cause(cause_corpus, name):
    causecorpus.judge_report(*cause_corpus.reported(name))

