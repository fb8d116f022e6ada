"""The labelled cause cases (bench/lib/corpus/causes.py: the Alibaba PAI job's slow
worker with the health columns of each cause, its cold-rank variant, the real 8xH100
checkpoint logs, the seed case; one log format, the 1 s-averaged power the real logs
carry) as generated: every case is judged by one of the test_cause_corpus_<subject>.py
files, the generator writes the same bytes on every run and for a case built alone
as among others, and gpulse's log reader reads a case without complaint.
"""
from __future__ import annotations

import causecorpus

import bench.lib.corpus.causes as causes

from gpulse.sources.recorded import read_log

from conftest import CPU_BOUND

pytestmark = CPU_BOUND


def test_the_case_list_is_the_generated_one(tmp_path):
    assert causecorpus.generated_names(tmp_path) == causecorpus.NAMES
    judged = [n for names in causecorpus.SUBJECTS.values() for n in names]
    assert sorted(judged) == sorted(causecorpus.NAMES)


def test_cases_are_deterministic(cause_corpus, tmp_path):
    names = ("pai-throttled-thermal-avg", "h100/ckpt1+health", "seed-imbalance+health-avg")
    together = {c.name: c for c in causes.build(tmp_path, quick=True, only=names)}
    assert tuple(together) == names
    for name in names:
        assert together[name].path.read_bytes() == cause_corpus.case(name).path.read_bytes(), name


def test_a_case_reads_cleanly_with_its_injected_counter(cause_corpus):
    run = read_log(str(cause_corpus.case("pai-throttled-thermal-avg").path))
    assert run.format == "nvidia-smi-csv" and not run.errors
    rows = [r.reading for r in run.records if r.gpu == "6" and r.reading.counters.get("throttle_seconds_total")]
    # the injected reason counter climbs over the slow span, in seconds by reason
    thr = [r.counters["throttle_seconds_total"][("hw_thermal",)] for r in rows]
    assert thr[-1] - thr[0] > 100
    assert {r.gauges.get("sm_clock_hertz") for r in rows} >= {1.98e9}
