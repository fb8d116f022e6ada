"""The labelled cause cases of bench/lib/corpus/causes.py as the cause-corpus tests
judge them (tests/integration/cause/test_cause_corpus_*.py, a file per subject so the
workers share the twenty cases): each case built alone, when a test first asks for it,
and its findings.json from `gpulse report`, once per case; what the report must say of
a case, and what the live gauge must say beside it.

A case's report is the CLI's own (`gpulse.cli.main`: argument parsing, the log's
clock, all three files written), and the live gauge is read from the snapshots of the
engine run that report reads (`reportutil.watching`); a few cheap cases (PROCESS) go
through a `python -m gpulse report` process, so the module entry point and the exit
code of a real process stay judged on this corpus too, and their live gauge through a
replay of its own.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, require_data

import bench.lib.corpus.causes as causes
from bench.cause_matrix import LiveCause, live_cause
from reportutil import watching

from gpulse.analysis.cause import REMEDIES
from gpulse.cli import main as gpulse_main

# every case the generator writes (quick: the 1 s-averaged power only), in its order
NAMES = ("pai-more-work-avg", "pai-throttled-thermal-avg", "pai-throttled-power-avg", "pai-hw-slowdown-avg",
         "pai-ecc-avg", "pai-cold-rank-avg", "pai-throttled-power-event-states-avg",
         "pai-throttled-thermal-throttle-states-avg", "pai-throttled-thermal-mask-avg", "pai-hw-slowdown-mask-avg",
         "pai-link-width-avg", "pai-link-gen-avg", "pai-hot-plain-avg", "pai-cold-rank-plain-avg",
         "h100/ckpt1+health", "h100/ckpt1", "h100/ckpt50+health", "h100/ckpt50",
         "seed-imbalance+health-avg", "seed-imbalance-avg")
# the test file that judges each case: every case in exactly one
SUBJECTS = {
    "throttling": ("pai-throttled-thermal-avg", "pai-throttled-power-avg"),
    "spellings": ("pai-throttled-power-event-states-avg", "pai-throttled-thermal-throttle-states-avg",
                  "pai-throttled-thermal-mask-avg", "pai-hw-slowdown-mask-avg"),
    "hardware": ("pai-hw-slowdown-avg", "pai-ecc-avg", "pai-link-width-avg", "pai-link-gen-avg"),
    "more_work": ("pai-more-work-avg", "pai-hot-plain-avg", "seed-imbalance+health-avg", "seed-imbalance-avg"),
    "off_gpu": ("pai-cold-rank-avg", "pai-cold-rank-plain-avg", "h100/ckpt1+health", "h100/ckpt1",
                "h100/ckpt50+health", "h100/ckpt50"),
}
# reported by a `python -m gpulse report` process (seconds each); the rest in the test process
PROCESS = ("h100/ckpt1", "seed-imbalance-avg")
DATA = ("traces/h100-8gpu/ckpt1.csv", "traces/h100-8gpu/ckpt50.csv", "traces/h100-8gpu/ckpt1000.csv",
        "traces/alibaba-minibatch/job_1_norm.csv", "captures/nvidia-smi/h100-80gb-hbm3-query-gpu.csv")

# what the evidence of each cause must speak of
SAYS = {"throttling": ("throttle",), "degraded_hardware": ("ECC", "remapping", "no throttle reason", "hw_slowdown",
                                                          "link"),
        "more_work": ("active",), "off_gpu": ("spin-wait",), "unknown": ()}


class _Asked:
    """An `only` that takes nothing and keeps what it was asked: the names of every
    case, in the order the generator writes them, without writing one."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __contains__(self, name: object) -> bool:
        self.names.append(str(name))
        return False


def require() -> None:
    for rel in DATA:
        require_data(rel)


def generated_names(out: Path) -> tuple[str, ...]:
    require()
    asked = _Asked()
    assert causes.build(out, quick=True, only=asked) == []
    return tuple(asked.names)


class Corpus:
    """The cases of one test module: each built alone on first use (the same bytes as in
    the whole build) and reported once."""

    def __init__(self, out: Path) -> None:
        require()
        self.out = out
        self._cases: dict[str, causes.CauseCase] = {}
        self._docs: dict[str, dict] = {}
        self._live: dict[str, tuple[str, dict]] = {}

    def case(self, name: str) -> causes.CauseCase:
        if name not in self._cases:
            got = causes.build(self._dir("build", name), quick=True, only=(name,))
            assert [c.name for c in got] == [name]
            self._cases[name] = got[0]
        return self._cases[name]

    def reported(self, name: str) -> tuple[causes.CauseCase, dict]:
        """The case and its findings.json."""
        c = self.case(name)
        if name not in self._docs:
            d = self._dir("report", name)
            args = ["report", "--input", str(c.path), "--out", str(d), "--quiet"]
            if name in PROCESS:
                r = subprocess.run([sys.executable, "-m", "gpulse", *args], capture_output=True, text=True,
                                   timeout=600, env={"PYTHONPATH": str(ROOT / "exporter"), "PATH": "/usr/bin:/bin"})
                assert r.returncode == 0, (name, r.stderr[-2000:])
            else:
                live = LiveCause(c.gpu)
                with contextlib.redirect_stdout(io.StringIO()), watching(c.path, live.look):
                    assert gpulse_main(args) == 0, name
                self._live[name] = live.result()
            self._docs[name] = json.loads((d / "findings.json").read_text(encoding="utf-8"))
        return c, self._docs[name]

    def live(self, name: str) -> tuple[str, dict]:
        """What the straggler-cause gauge said of the case (bench/cause_matrix.LiveCause)."""
        self.reported(name)
        if name not in self._live:
            self._live[name] = live_cause(self.case(name))
        return self._live[name]

    def _dir(self, kind: str, name: str) -> Path:
        d = self.out / kind / re.sub(r"[^\w.+-]", "_", name)
        d.mkdir(parents=True)
        return d


def finding(doc: dict, gpu: str) -> dict | None:
    """The straggler finding of `gpu`, or the imbalance finding where the case has no straggler."""
    for f in doc["findings"]:
        if gpu and f["kind"] == "straggler" and f["text"].startswith(f"GPU {gpu} "):
            return f
        if not gpu and f["kind"] == "imbalance":
            return f
    return None


def judge_report(c: causes.CauseCase, doc: dict) -> None:
    """The labelled cause for the labelled GPU, with evidence that speaks of it and the
    cause's remedy; "unknown" naming what is missing where the log lacks the evidence."""
    name = c.name
    assert doc["schema"] == "gpulse-findings/3"
    if c.gpu:
        assert [s["gpu"] for s in doc["stragglers"]] == [c.gpu], (name, doc["stragglers"])
    f = finding(doc, c.gpu)
    assert f is not None, (name, [x["text"][:80] for x in doc["findings"]])
    assert f["cause"] in c.accept, (name, f["cause"], f["evidence"], f["missing"])
    assert f["evidence"] and all(isinstance(e, str) and e for e in f["evidence"]), name
    if f["cause"] == "unknown":
        assert f["missing"] and f["remedy"].startswith(REMEDIES["unknown"]), name
    else:
        assert f["remedy"].rstrip(".") == REMEDIES[f["cause"]] or REMEDIES[f["cause"]] in f["remedy"], name
        said = " ".join(f["evidence"])
        assert not SAYS[f["cause"]] or any(w in said for w in SAYS[f["cause"]]), (name, f["evidence"])
    if f["cause"] in ("throttling", "degraded_hardware"):
        # a slowed or failing GPU is never told to rebalance its work
        assert not f["remedy"].lower().startswith("rebalance"), (name, f["remedy"])


def judge_live(c: causes.CauseCase, doc: dict, live: tuple[str, dict]) -> None:
    """The log replayed through the exporter's engine and collector (what `gpulse serve
    --source replay` serves; `Corpus.live`): gpulse_gpu_straggler_cause for the
    straggler carries the report's cause, and no other GPU gets one."""
    cause, detail = live
    assert cause == finding(doc, c.gpu)["cause"], (c.name, detail)
    assert set(detail["reads"]) == {cause} and not detail["other_gpus"], (c.name, detail)
