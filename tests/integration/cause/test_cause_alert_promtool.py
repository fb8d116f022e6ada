"""The shipped GpulseStragglerGPU alert, evaluated by the real promtool over a
real-data cause case, names the same cause as the live gauge and the report.

Each case (bench/lib/corpus/causes.py: the Alibaba PAI job's slow worker with a power
cap holding its clocks down, and with its PCIe link at x8 of x16; 1 s-averaged
power) goes through `gpulse report` (the CLI, in this process), and the snapshots of
the engine run that report reads, which are what the exporter serves replaying the
log (`reportutil.watching`), through its collector: what /metrics would have said at
every 15 s scrape becomes the input series of a promtool unit test over the shipped
rule files (recording rules and alerts, as a Prometheus scraping the exporter would
evaluate them). promtool reports the alerts it evaluated; the straggler's summary
must carry the cause that `gpulse_gpu_straggler_cause` holds in the same run and
that the report finds.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess

import pytest
import yaml

from conftest import CPU_BOUND, ROOT, require_binary, require_data
import bench.lib.corpus.causes as causes  # noqa: E402
from bench.cause_matrix import LiveCause  # noqa: E402
from reportutil import watching
from testing import rulegraph

from gpulse.cli import main as gpulse_main  # noqa: E402
from gpulse.collector import snapshot_families  # noqa: E402

pytestmark = CPU_BOUND

CASES = ("pai-throttled-power-avg", "pai-link-width-avg")
SCRAPE_S = 15
RULES = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))
EVAL_EVERY_S = 60


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    for rel in ("traces/alibaba-minibatch/job_1_norm.csv", "captures/nvidia-smi/h100-80gb-hbm3-query-gpu.csv",
                "traces/h100-8gpu/ckpt1.csv", "traces/h100-8gpu/ckpt50.csv", "traces/h100-8gpu/ckpt1000.csv"):
        require_data(rel)
    return {c.name: c for c in causes.build(tmp_path_factory.mktemp("causes"), quick=True, only=CASES)}


@pytest.fixture(params=CASES)
def case(request, built):
    return built[request.param]


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


def promtool_test(tmp, series: list[dict[str, float]], eval_times: list[int]) -> str:
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


def fired(output: str) -> dict[int, list[tuple[str, str]]]:
    """eval time (s) -> [(gpu, summary)] of the GpulseStragglerGPU alerts promtool got."""
    out: dict[int, list[tuple[str, str]]] = {}
    for block in re.split(r"\n\s*alertname: ", output)[1:]:
        m = re.match(r"GpulseStragglerGPU, time: (\S+),", block)
        if not m:
            continue
        t = parse_seconds(m.group(1))
        out[t] = [(g, s) for g, s in re.findall(r'Labels:\{[^}]*gpu="([^"]+)"[^}]*\}\s*Annotations:\{.*?summary="([^"]*)"',
                                                block)]
    return out


def parse_seconds(text: str) -> int:
    total = 0
    for n, unit in re.findall(r"(\d+)(h|m|s)", text):
        total += int(n) * {"h": 3600, "m": 60, "s": 1}[unit]
    return total


def test_straggler_alert_names_the_cause_the_gauge_and_the_report_name(case, tmp_path):
    report = tmp_path / "report"
    gauge, scraped = LiveCause(case.gpu), Scrapes()

    def look(snap):
        gauge.look(snap)
        scraped.look(snap)

    with contextlib.redirect_stdout(io.StringIO()), watching(case.path, look):
        assert gpulse_main(["report", "--input", str(case.path), "--out", str(report), "--quiet"]) == 0
    findings = json.loads((report / "findings.json").read_text(encoding="utf-8"))
    reported = [f["cause"] for f in findings["findings"]
                if f["kind"] == "straggler" and f["text"].startswith(f"GPU {case.gpu} ")]
    live, detail = gauge.result()
    assert reported == [live] and live in case.accept, (reported, live, detail)

    series = scraped.out
    assert len(series) > 40, "the case is shorter than 10 minutes of scrapes"
    span = (len(series) - 1) * SCRAPE_S
    out = promtool_test(tmp_path, series, list(range(EVAL_EVERY_S, span + 1, EVAL_EVERY_S)))
    got = fired(out)
    named = {t: s for t, alerts in got.items() for g, s in alerts if g == case.gpu and "(cause: " in s}
    assert named, f"promtool never raised GpulseStragglerGPU naming a cause for GPU {case.gpu}:\n{out[-3000:]}"
    causes_named = {re.search(r"\(cause: ([a-z_]+)\)", s).group(1) for s in named.values()}
    assert causes_named == {live}, (causes_named, live, named)
    # the straggler is the only GPU paged for, at every evaluation
    assert {g for alerts in got.values() for g, _ in alerts} == {case.gpu}, got
