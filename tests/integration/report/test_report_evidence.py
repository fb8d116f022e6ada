"""A finding's figures are over the span and the state its sentence names: on the real
ckpt50 trace, rank 0 checkpoints while GPUs 1–7 spin-wait, and the sentence says they
wait "at idle-level power". Over the whole span GPU 0 and its peers draw the same mean
power (work and waiting mixed), which reads as a contradiction; the figures the
sentence means are the peers' power during GPU 0's idle polls, read here from the CSV
itself."""
import calendar
import re
import statistics
import time

import pytest

from conftest import require_data

from gpulse.analysis.thresholds import value
from gpulse.report.findings import analyse
from gpulse.report.inputs import from_log

GPUS = 8


def _polls(path):
    """(t, [(power W, utilisation 0..1) per GPU]) per poll of an nvidia-smi CSV whose
    polls are GPUS consecutive rows."""
    rows = []
    for line in path.read_text().splitlines()[1:]:
        c = [x.strip() for x in line.split(",")]
        stamp, frac = c[0].split(".")
        t = calendar.timegm(time.strptime(stamp, "%Y/%m/%d %H:%M:%S")) + float("0." + frac)
        rows.append((t, float(c[1].split()[0]), float(c[2].split()[0]) / 100))
    return [(rows[i][0], [(w, u) for _, w, u in rows[i:i + GPUS]]) for i in range(0, len(rows) - GPUS + 1, GPUS)]


@pytest.fixture(scope="module")
def ckpt50():
    path = require_data("traces/h100-8gpu/ckpt50.csv")
    a = analyse(from_log(str(path)))
    [f] = [f for f in a.findings if f.kind == "straggler"]
    return a, f, _polls(path)


def test_power_evidence_is_over_the_ticks_the_straggler_was_idle(ckpt50):
    a, f, polls = ckpt50
    assert f.cause.cause == "off_gpu" and "at idle-level power" in f.text
    [(start, end)] = f.spans
    idle = [p for t, p in polls if start <= t < end and p[0][1] < value("idle_ratio")]
    working = [p for t, p in polls if start <= t < end and p[0][1] >= value("idle_ratio")]
    assert len(idle) > 1000 and len(working) > 1000
    own_truth = statistics.mean(p[0][0] for p in idle)
    peers_truth = statistics.mean(w for p in idle for w, _ in p[1:])
    working_truth = statistics.mean(w for p in working for w, _ in p[1:])
    # the recording's own figures: peers near 160 W while GPU 0 is idle, 530 W while it works
    assert peers_truth < 0.5 * working_truth

    [power] = [e for e in f.cause.evidence if e.startswith("power")]
    m = re.fullmatch(r"power while it was idle (\d+) W vs peers (\d+) W \(peers (\d+) W while it worked\)", power)
    assert m, power
    own, peers, work = map(float, m.groups())
    # 1 s ticks against 0.1 s polls: a tick is idle when most of it is, so the edges blur a little
    assert abs(own - own_truth) <= 0.05 * own_truth
    assert abs(peers - peers_truth) <= 0.05 * peers_truth
    assert abs(work - working_truth) <= 0.05 * working_truth
    # the sentence gives the same figures as its evidence
    assert f"({peers:.0f} W while it was idle, against {work:.0f} W while it worked;" in f.text
    # and no evidence item is a mean over the whole span, work and waiting mixed
    assert not any(re.fullmatch(r"power \d+ W vs peers \d+ W", e) for e in f.cause.evidence)


def test_overlapping_rhythms_are_told_apart(ckpt50):
    a, f, _ = ckpt50
    pats = [p for p in a.patterns if p["off_gpu"] == ["0"]]
    assert len(pats) == 2
    ranges = sorted((p["spans"][0][0], p["spans"][-1][1]) for p in pats)
    assert ranges[1][0] < ranges[0][1]          # they overlap in the recording
    assert "in 2 separate rhythms that overlap in time: (a) ~15 s every ~28 s (" in f.text
    assert "; (b) ~99 s every ~328 s (" in f.text
