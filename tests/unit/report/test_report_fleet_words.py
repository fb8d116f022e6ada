"""A fleet's report in few words. The headline of what a run lost
(words.lost_headline): the worst culprits named, the rest counted in one part, and
shares under 1 % not rounded away, so it is one readable line and still adds up. A
sentence's time spans (words.when_spans): listed up to SPANS_NAMED, counted beyond."""
from __future__ import annotations

import re

from gpulse.report.judge import Judgement
from gpulse.report.words import HEADLINE_NAMED, SPANS_NAMED, lost_headline, share, when_spans
from reportutil import bare_judgement

HOUR = 3600.0


def _lost(j: Judgement, work_h: float, straggler_h: float, stall_h: float = 0.0, imbalance_h: float = 0.0) -> None:
    j.lost = {"gpu_seconds": (straggler_h + stall_h + imbalance_h) * HOUR, "work_gpu_seconds": work_h * HOUR,
              # as judge._lost has them: reasons that lost time, most first
              "by_reason": sorted(({"reason": r, "cause": "", "gpu_seconds": h * HOUR}
                                   for r, h in (("straggler", straggler_h), ("sync_stall", stall_h),
                                                ("imbalance", imbalance_h)) if h > 0),
                                  key=lambda i: -i["gpu_seconds"])}


def _shares(headline: str) -> list[float]:
    return [float(x) for x in re.findall(r"([0-9.]+) % (?:waiting|to)", headline)]


def test_a_few_culprits_are_each_named_worst_first():
    j = bare_judgement(4, digits=3)
    j.stragglers = [{"key": "node-001:3", "lost_gpu_seconds": 2 * HOUR, "cause": "throttling"}]
    j.straggler_nodes = [{"node": "node-002", "lost_gpu_seconds": 5 * HOUR, "cause": "off_gpu"}]
    _lost(j, 100, 7, stall_h=3)
    text = lost_headline(j)
    assert text == ("This run lost 10.00 of 100.00 GPU-hours (10 %): 5 % waiting for node node-002 (off_gpu), "
                    "2 % waiting for node-001 GPU 3 (throttling), 3 % to sync stalls.")


def test_a_fleets_culprits_beyond_the_named_are_counted_and_their_shares_kept():
    j = bare_judgement(128, digits=3)
    # 128 slow nodes of 0.18 % each and one slow GPU: a 1,024-GPU report once listed
    # every one of them at "0 %", a paragraph of a headline
    j.straggler_nodes = [{"node": f"node-{n:03d}", "lost_gpu_seconds": (1.75 + n / 1000) * HOUR,
                          "cause": "off_gpu"} for n in range(128)]
    j.stragglers = [{"key": "node-005:0", "lost_gpu_seconds": 0.5 * HOUR, "cause": "throttling"}]
    straggler_h = sum(nd["lost_gpu_seconds"] for nd in j.straggler_nodes) / HOUR + 0.5
    _lost(j, 1000, straggler_h, imbalance_h=380)
    text = lost_headline(j)
    assert text.count("waiting for") == HEADLINE_NAMED + 1
    # the worst three by name, each at its own share, not "0 %"
    assert "0.2 % waiting for node node-127 (off_gpu), 0.2 % waiting for node node-126 (off_gpu), " \
           "0.2 % waiting for node node-125 (off_gpu), " in text
    # the rest in one part, with every cause among them
    rest = straggler_h * HOUR - sum((1.75 + n / 1000) * HOUR for n in (125, 126, 127))
    assert f"{100 * rest / (1000 * HOUR):.0f} % waiting for 126 more stragglers (off_gpu, throttling)" in text
    assert text.endswith("38 % to imbalance.")
    # the parts still add up to the total the headline opens with (to rounding)
    assert abs(sum(_shares(text)) - 100 * (straggler_h + 380) / 1000) < 1.5


def test_one_more_culprit_is_singular():
    j = bare_judgement(4, digits=3)
    j.straggler_nodes = [{"node": f"node-{n:03d}", "lost_gpu_seconds": (4 - n) * HOUR, "cause": ""}
                         for n in range(HEADLINE_NAMED + 1)]
    _lost(j, 100, sum(4 - n for n in range(HEADLINE_NAMED + 1)))
    text = lost_headline(j)
    assert text.endswith(", 1 % waiting for 1 more straggler.")


def test_shares_are_whole_percent_with_a_decimal_under_one():
    assert [share(x) for x in (0.0, 0.0004, 0.0005, 0.0052, 0.0094, 0.0095, 0.68)] == \
        ["0 %", "<0.1 %", "0.1 %", "0.5 %", "0.9 %", "1 %", "68 %"]


def test_a_sentence_counts_its_spans_beyond_the_named():
    j = bare_judgement(1)
    few = [(100.0 + 600 * n, 295.0 + 600 * n) for n in range(SPANS_NAMED)]
    assert when_spans(j, few).count("; ") == SPANS_NAMED - 1 and when_spans(j, few).count(" for 195 s") == SPANS_NAMED
    many = [(100.0 + 555 * n, 295.0 + 555 * n) for n in range(25)]
    text = when_spans(j, many)
    assert text.startswith("25 times from ") and text.endswith(", 195 s each, 81 min in all")
    assert "; " not in text
    mixed = many[:-1] + [(many[-1][0], many[-1][0] + 30.0)]
    assert ", 30 s to 195 s each, " in when_spans(j, mixed)
