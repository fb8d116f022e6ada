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
replay of its own. For the cases in ALERTED, the same run's snapshots are also what
/metrics said at every 15 s scrape, the input of a promtool unit test over the
shipped rules (`judge_alert`): the GpulseStragglerGPU alert must name the cause the
gauge and the report name.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import ROOT, require_binary, require_data

import bench.lib.corpus.causes as causes
from bench.cause_matrix import LiveCause, live_cause
from reportutil import watching
from testing import rulegraph

from gpulse.analysis.cause import REMEDIES
from gpulse.cli import main as gpulse_main
from gpulse.collector import snapshot_families

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
# whose scrapes go through the shipped alert in promtool (judge_alert): a power cap
# holding the clocks down and a PCIe link at x8 of x16, 1 s-averaged power
ALERTED = ("pai-throttled-power-avg", "pai-link-width-avg")
assert not set(ALERTED) & set(PROCESS)
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
        self._scrapes: dict[str, list[dict[str, float]]] = {}

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
                live, scraped = LiveCause(c.gpu), Scrapes()

                def look(snap) -> None:
                    live.look(snap)
                    if name in ALERTED:
                        scraped.look(snap)

                with contextlib.redirect_stdout(io.StringIO()), watching(c.path, look):
                    assert gpulse_main(args) == 0, name
                self._live[name] = live.result()
                self._scrapes[name] = scraped.out
            self._docs[name] = json.loads((d / "findings.json").read_text(encoding="utf-8"))
        return c, self._docs[name]

    def live(self, name: str) -> tuple[str, dict]:
        """What the straggler-cause gauge said of the case (bench/cause_matrix.LiveCause)."""
        self.reported(name)
        if name not in self._live:
            self._live[name] = live_cause(self.case(name))
        return self._live[name]

    def scrapes(self, name: str) -> list[dict[str, float]]:
        """What /metrics said of an ALERTED case at every SCRAPE_S of its report's run."""
        assert name in ALERTED, name
        self.reported(name)
        return self._scrapes[name]

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


SCRAPE_S = 15
RULES = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))
EVAL_EVERY_S = 60


class Scrapes:
    """What /metrics said at every SCRAPE_S of a replay's snapshots (`look`): one
    {series: value} per scrape (`out`)."""

    def __init__(self) -> None:
        self.out: list[dict[str, float]] = []
        self.next_t: float | None = None

    def look(self, snap) -> None:
        if snap.t is None or (self.next_t is not None and snap.t < self.next_t):
            return
        self.next_t = snap.t + SCRAPE_S if self.next_t is None else self.next_t + SCRAPE_S
        now: dict[str, float] = {}
        for fam in snapshot_families(snap):
            for s in fam.samples:
                if not s.name.startswith("gpulse_") or s.name.endswith("_created"):
                    continue
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                now[f"{s.name}{{{labels}}}"] = s.value
        self.out.append(now)


def judge_alert(c: causes.CauseCase, doc: dict, live: tuple[str, dict], series: list[dict[str, float]],
                tmp: Path) -> None:
    """The shipped GpulseStragglerGPU alert, evaluated by the real promtool over the
    scrapes (the shipped rule files: recording rules and alerts, as a Prometheus
    scraping the exporter would evaluate them), names the cause that
    `gpulse_gpu_straggler_cause` holds in the same run and that the report finds, and
    pages for the straggler alone."""
    cause, detail = live
    reported = [f["cause"] for f in doc["findings"]
                if f["kind"] == "straggler" and f["text"].startswith(f"GPU {c.gpu} ")]
    assert reported == [cause] and cause in c.accept, (reported, cause, detail)
    assert len(series) > 40, "the case is shorter than 10 minutes of scrapes"
    span = (len(series) - 1) * SCRAPE_S
    out = _promtool_test(tmp, series, list(range(EVAL_EVERY_S, span + 1, EVAL_EVERY_S)))
    got = _fired(out)
    named = {t: s for t, alerts in got.items() for g, s in alerts if g == c.gpu and "(cause: " in s}
    assert named, f"promtool never raised GpulseStragglerGPU naming a cause for GPU {c.gpu}:\n{out[-3000:]}"
    causes_named = {re.search(r"\(cause: ([a-z_]+)\)", s).group(1) for s in named.values()}
    assert causes_named == {cause}, (causes_named, cause, named)
    # the straggler is the only GPU paged for, at every evaluation
    assert {g for alerts in got.values() for g, _ in alerts} == {c.gpu}, got


def _promtool_test(tmp: Path, series: list[dict[str, float]], eval_times: list[int]) -> str:
    """A promtool unit test expecting no GpulseStragglerGPU at each eval time; its
    output lists, for every time it fired, the alerts promtool evaluated."""
    names = sorted({k for s in series for k in s})
    doc = {
        # the shipped rules the alert can see (testing/rulegraph.py)
        "rule_files": [str(r) for r in rulegraph.seen_by(RULES, ["GpulseStragglerGPU"], tmp / "rules")],
        "evaluation_interval": f"{SCRAPE_S}s",
        "tests": [{
            "interval": f"{SCRAPE_S}s",
            "input_series": [{"series": n, "values": " ".join(repr(s[n]) if n in s else "_" for s in series)}
                             for n in names],
            "alert_rule_test": [{"eval_time": f"{t}s", "alertname": "GpulseStragglerGPU", "exp_alerts": []}
                                for t in eval_times],
        }],
    }
    path = tmp / "cause.test.yml"
    path.write_text(yaml.safe_dump(doc, width=10**9))
    r = subprocess.run([require_binary("promtool"), "test", "rules", str(path)], capture_output=True, text=True,
                       timeout=600)
    return r.stdout + r.stderr


def _fired(output: str) -> dict[int, list[tuple[str, str]]]:
    """eval time (s) -> [(gpu, summary)] of the GpulseStragglerGPU alerts promtool got."""
    out: dict[int, list[tuple[str, str]]] = {}
    for block in re.split(r"\n\s*alertname: ", output)[1:]:
        m = re.match(r"GpulseStragglerGPU, time: (\S+),", block)
        if not m:
            continue
        t = _seconds(m.group(1))
        out[t] = [(g, s) for g, s in re.findall(r'Labels:\{[^}]*gpu="([^"]+)"[^}]*\}\s*Annotations:\{.*?summary="([^"]*)"',
                                                block)]
    return out


def _seconds(text: str) -> int:
    total = 0
    for n, unit in re.findall(r"(\d+)(h|m|s)", text):
        total += int(n) * {"h": 3600, "m": 60, "s": 1}[unit]
    return total
