"""Stragglers that straggle alike across a job's nodes (the same GPU of every node,
the same way, the same cause: local rank 0 checkpointing on each) are one finding
beyond NODES_NAMED of them, as a fleet report needs; a few are still a finding each.
The machine-readable list keeps every straggler."""
from __future__ import annotations

import copy

import pytest

from gpulse.report.collect import Recording
from gpulse.report.findings import analyse
from gpulse.report.judge import NODES_NAMED
from reportutil import sim_rec, validate


def _one_job(nodes: int, bad: set[int]) -> Recording:
    """nodes × 8 simulated GPUs of one workload; the nodes in `bad` a copy of a node
    whose GPU 1 straggles (hot), the others of a balanced one."""
    good, slow = sim_rec("balanced", "x"), sim_rec("straggler", "x")
    rec = Recording(source="job", interval=good.interval, idle_threshold=good.idle_threshold,
                    activity=good.activity, window=good.window, times=copy.copy(good.times), epoch=False)
    grp = copy.deepcopy(good.groups[""])
    grp.workload, grp.gpus = "job", []
    for n in range(nodes):
        src = slow if n in bad else good
        for k, g in src.gpus.items():
            t = copy.deepcopy(g)
            t.key, t.node, t.workload = f"n{n:02d}:{k}", f"n{n:02d}", "job"
            rec.gpus[t.key] = t
            grp.gpus.append(t.key)
    rec.groups["job"] = grp
    return rec


@pytest.mark.parametrize("slow", [NODES_NAMED, NODES_NAMED + 2])
def test_alike_stragglers_beyond_the_named_are_one_finding(slow):
    a = analyse(_one_job(8, set(range(slow))))
    doc = a.as_json()
    validate(doc)
    assert len(doc["stragglers"]) == slow                 # every one kept where machines read them
    assert {(s["node"], s["gpu"]) for s in doc["stragglers"]} == {(f"n{n:02d}", "1") for n in range(slow)}
    found = [f for f in doc["findings"] if f["kind"] == "straggler"]
    if slow <= NODES_NAMED:
        assert len(found) == slow and not any("straggle alike" in f["text"] for f in found)
        return
    assert len(found) == 1, [f["text"][:80] for f in found]
    f = found[0]
    # all of them named (counted: more nodes than NODES_NAMED), the costliest in its own words
    assert f["text"].startswith(f"GPU 1 of {slow} nodes from n00 to n{slow - 1:02d} straggle alike, "
                                "each with the same cause")
    costliest = max(a.stragglers, key=lambda s: s["cost"])
    assert f". The costliest: {a.label(costliest['key'])} " in f["text"]
    assert f["cause"] == costliest["cause"] and f["remedy"] == costliest["verdict"].remedy
    # its spans cover every member's
    spans = [(s["start"], s["end"]) for s in f["spans"]]
    for st in doc["stragglers"]:
        for sp in st["spans"]:
            assert any(s <= sp["start"] and sp["end"] <= e for s, e in spans)
