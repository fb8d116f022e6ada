"""How the report's sentences name a set of GPUs (Judgement.labels): by index runs on
one node, node by node on a few, and counted by node at fleet size, where a
straggler's peers are a thousand GPUs."""
from __future__ import annotations

from gpulse.report.judge import NODES_NAMED
from reportutil import bare_judgement as _judgement


def test_one_node_names_runs_of_indices():
    j = _judgement(1)
    assert j.labels(["node-00:0"]) == "GPU 0"
    assert j.labels([f"node-00:{g}" for g in (1, 2, 3, 5)]) == "GPUs 1–3 and 5"


def test_a_few_nodes_are_named_node_by_node():
    j = _judgement(NODES_NAMED)
    keys = [k for k in j.rec.gpus if k != "node-01:0"]
    assert j.labels(keys) == "node-00 GPUs 0–7; node-01 GPUs 1–7; node-02 GPUs 0–7; node-03 GPUs 0–7"


def test_a_fleets_peers_are_counted_by_node_not_listed():
    j = _judgement(64)
    peers = [k for k in j.rec.gpus if k != "node-03:0"]
    text = j.labels(peers)
    assert text == "GPUs 0–7 of 63 nodes from node-00 to node-63; node-03 GPUs 1–7"
    # a slow node's GPUs against the rest: the one node named, the others counted
    assert j.labels([k for k in j.rec.gpus if k.startswith("node-05:")]) == "node-05 GPUs 0–7"
    two = [k for k in j.rec.gpus if k.split(":")[0] in ("node-05", "node-09") and k.endswith((":0", ":1"))]
    assert j.labels(two) == "node-05 GPUs 0 and 1; node-09 GPUs 0 and 1"
