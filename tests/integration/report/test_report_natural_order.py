"""findings.json lists GPUs in the order of the heatmap: node in natural order, then
GPU (n2 before n10), in every per-GPU list and in the findings' words, whatever the
order of the logs given or of their names as text."""
from __future__ import annotations

import json
import re
import subprocess
import sys

from conftest import require_data

NODES = ("n10", "n1", "n2")        # as given: not the natural order, nor the text order
RANK = {"n1": 0, "n2": 1, "n10": 2}
_GPUS = r"n\d+ GPUs? [0-9–, and]+"
_LIST = re.compile(rf"{_GPUS}(?:; {_GPUS})+")


def _ordered(refs: list[dict]) -> bool:
    keys = [(RANK[r["node"]], int(r["gpu"])) for r in refs]
    return keys == sorted(keys)


def test_every_per_gpu_list_is_in_natural_order_of_node_then_gpu(tmp_path):
    # three nodes of the real checkpointing trace: stall episodes in which rank 0 works
    # off the GPU while the others spin-wait, on every node at once
    lines = require_data("traces/h100-8gpu/ckpt50.csv").read_text().splitlines()[:30001]
    paths = []
    for node in NODES:
        p = tmp_path / f"{node}.csv"
        p.write_text("\n".join(lines) + "\n")
        paths.append(str(p))
    out = tmp_path / "r"
    p = subprocess.run([sys.executable, "-m", "gpulse", "report", "--quiet", "--input", *paths, "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "findings.json").read_text())
    assert [(g["node"], g["gpu"]) for g in doc["gpus"]] == [(n, str(g)) for n in ("n1", "n2", "n10") for g in range(8)]
    assert doc["stall_episodes"] and doc["stall_patterns"]
    for e in doc["stall_episodes"]:
        for k in ("gpus", "waiting_gpus", "off_gpu"):
            assert _ordered(e[k]), (k, e[k])
    for pat in doc["stall_patterns"]:
        assert len(pat["off_gpu"]) == 3 and _ordered(pat["off_gpu"]), pat["off_gpu"]
    # GPUs of several nodes named in one breath: "n1 GPUs 0–7; n2 GPUs 1–7; n10 GPUs 0–7"
    lists = [m.group(0) for f in doc["findings"] for m in _LIST.finditer(f["text"])]
    assert lists
    for named in lists:
        nodes = re.findall(r"(n\d+) GPU", named)
        assert nodes == sorted(nodes, key=RANK.get), named
