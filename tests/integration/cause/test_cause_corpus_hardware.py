"""The straggler's cause on the labelled cause cases of bench/lib/corpus/causes.py whose
slow worker's hardware is degraded: hw_slowdown with no thermal or power reason,
uncorrectable ECC errors with a row remap pending, a PCIe link at x8 of x16 or at
gen 3 of gen 5.

Each case's log goes through `gpulse report` (tests/causecorpus.py); its findings.json
must name the labelled cause for the labelled GPU, with evidence, the cause's remedy,
and, for a case whose log lacks the deciding signals, "unknown" naming what is missing.
Replayed through the exporter's engine, the live `gpulse_gpu_straggler_cause` gauge
must say the same (the hw_slowdown case), and the shipped GpulseStragglerGPU alert
(promtool over the same run's scrapes) must page for that GPU alone naming that cause
(the link at x8 of x16).
"""
from __future__ import annotations

import pytest

import causecorpus

from conftest import CPU_BOUND

pytestmark = CPU_BOUND

CASES = causecorpus.SUBJECTS["hardware"]


@pytest.mark.parametrize("name", CASES)
def test_report_names_the_labelled_cause(cause_corpus, name):
    causecorpus.judge_report(*cause_corpus.reported(name))


@pytest.mark.parametrize("name", ["pai-hw-slowdown-avg"])
def test_live_gauge_says_what_the_report_says(cause_corpus, name):
    causecorpus.judge_live(*cause_corpus.reported(name), cause_corpus.live(name))


@pytest.mark.parametrize("name", [n for n in CASES if n in causecorpus.ALERTED])
def test_straggler_alert_names_the_cause_the_gauge_and_the_report_name(cause_corpus, name, tmp_path):
    # the shipped alert in promtool over the scrapes of the case's report run
    causecorpus.judge_alert(*cause_corpus.reported(name), cause_corpus.live(name), cause_corpus.scrapes(name),
                            tmp_path)
