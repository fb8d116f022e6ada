"""docs/migrating-from-dcgm-exporter.md: every gpulse series it names exists,
every field of dcgm-exporter's real default output has a row whose gpulse metrics
the DCGM source really serves from that output, and every PromQL recipe parses
(promtool)."""
from __future__ import annotations

import re
import shlex
import subprocess

import yaml

from conftest import ROOT, require_binary, require_data
from gpulse.sources.dcgm import FIELDS as DCGM_FIELDS
from testing.fakedcgm import DcgmExporter

DOC = (ROOT / "docs" / "migrating-from-dcgm-exporter.md").read_text()
METRICS_DOC = (ROOT / "docs" / "metrics.md").read_text()
RULE_FILES = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))
CAPTURES = ["captures/dcgm-exporter/l4-gpu-operator.prom", "captures/dcgm-exporter/h100x8-eks-aicr-sampled.prom"]
# Every field dcgm-exporter's own default lists name (etc/default-counters.csv and
# etc/dcp-metrics-included.csv, the lines commented out in them included, labels and
# per-link NVLink fields left out), whether or not the captures hold them: a user
# moving over looks each up.
DEFAULT_LISTS = {
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE", "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
}
RULE_NAME = re.compile(r"\b[a-z_]+:gpulse_\w+:\w+")


def _rules() -> list[dict]:
    return [r for f in RULE_FILES for g in yaml.safe_load(f.read_text())["groups"] for r in g["rules"]]


def _section(title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", DOC, re.S | re.M)
    assert m, f"no '## {title}' section"
    return m.group(1)


def _rows(section: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split(" | ")]
            for line in _section(section).splitlines() if line.startswith("| ") and not line.startswith("|---")][1:]


def field_rows() -> dict[str, list[str]]:
    """DCGM field -> the gpulse metrics its row names."""
    out = {}
    for cells in _rows("Fields"):
        (field,) = re.findall(r"`(DCGM_FI_\w+)`", cells[0])
        out[field] = re.findall(r"`(gpulse_\w+)`", cells[2])
    return out


def recipes() -> list[tuple[str, str, str]]:
    out = []
    for question, dcgm, gpulse in _rows("Recipes"):
        out.append((question, dcgm.strip("`"), gpulse.strip("`")))
    return out


def test_every_gpulse_name_exists():
    recorded = {r["record"] for r in _rules() if "record" in r}
    for name in set(RULE_NAME.findall(DOC)):
        assert name in recorded, f"{name} is not a recording rule of prometheus/rules"
    documented = set(re.findall(r"^\| `(gpulse_\w+)` \|", METRICS_DOC, re.M))
    named = {n for n in re.findall(r"\bgpulse_[a-z0-9_]*[a-z0-9]\b", RULE_NAME.sub("", DOC))}
    assert named, "the doc names no gpulse metric"
    missing = sorted(n for n in named if n not in documented)
    assert not missing, f"named in the migration doc but not in docs/metrics.md: {missing}"
    alerts = {r["alert"] for r in _rules() if "alert" in r}
    for alert in set(re.findall(r"`(Gpulse[A-Z]\w+)`", DOC)):
        assert alert in alerts, alert


def test_every_field_of_the_real_default_output_has_a_row():
    rows = field_rows()
    captured = set()
    for rel in CAPTURES:
        captured |= set(re.findall(r"^(DCGM_FI_\w+)[{ ]", require_data(rel).read_text(), re.M))
    assert len(captured) >= 20
    missing = sorted((captured | DEFAULT_LISTS) - set(rows))
    assert not missing, f"dcgm-exporter fields without a row: {missing}"


def test_every_field_the_dcgm_source_reads_has_a_row():
    """Both names of the clock event mask included (fields.py reads either)."""
    missing = sorted(set(DCGM_FIELDS) - set(field_rows()))
    assert not missing, f"fields the DCGM source reads without a row: {missing}"


def _enable_block() -> list[str]:
    (block,) = re.findall(r"```csv\n(.*?)```", _section("What to enable in dcgm-exporter for `--source dcgm`"), re.S)
    return [line.split(",")[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_what_to_enable_gives_real_work_and_the_cause_signals(gpulse_proc):
    """The L4's default output lacks SM activity, the power limit and throttle
    reasons; with the doc's lines added (values on every GPU line of the capture's
    labels) `gpulse --source dcgm` exports each family they feed."""
    fields = _enable_block()
    assert "DCGM_FI_PROF_SM_ACTIVE" in fields and "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" in fields
    text = require_data(CAPTURES[0]).read_text()
    assert not set(fields) & set(re.findall(r"^(DCGM_FI_\w+)[{ ]", text, re.M)), "the default output has them already"
    wanted = set()
    for f in fields:
        kind, _, key = DCGM_FIELDS[f].target.partition(":")
        wanted.add({"sample": "gpulse_gpu_sm_active_ratio", "limit": "gpulse_gpu_power_limit_watts",
                    "throttle": "gpulse_gpu_throttle_seconds_total"}.get(kind, f"gpulse_gpu_{key}"))
    labels = re.search(r"^DCGM_FI_DEV_GPU_UTIL(\{[^}]*\})", text, re.M).group(1)
    values = {"DCGM_FI_PROF_SM_ACTIVE": "0.5", "DCGM_FI_DEV_POWER_MGMT_LIMIT": "72",
              "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "4"}
    extra = "".join(f"{f}{labels} {values.get(f, '0')}\n" for f in fields)
    default = DcgmExporter(text)
    enabled = DcgmExporter(text + extra)
    try:
        plain = gpulse_proc("--source", "dcgm", "--dcgm.url", default.url, "--dcgm.interval", "200ms")
        g = gpulse_proc("--source", "dcgm", "--dcgm.url", enabled.url, "--dcgm.interval", "200ms")
        g.wait_metrics(lambda t: all(f"\n{m}{{" in t for m in wanted), f"every family of {sorted(wanted)}")
        before = plain.wait_metrics(lambda t: "\ngpulse_gpu_power_watts{" in t, "the default output read")
        assert not [m for m in ("gpulse_gpu_sm_active_ratio", "gpulse_gpu_power_limit_watts",
                                "gpulse_gpu_throttle_seconds_total") if f"\n{m}{{" in before]
    finally:
        default.stop()
        enabled.stop()


def test_rows_agree_with_what_the_dcgm_source_reads():
    """Where the DCGM source maps a field straight onto a family, the row names that family."""
    for field, metrics in field_rows().items():
        spec = DCGM_FIELDS.get(field)
        if spec is None:
            continue
        kind, _, key = spec.target.partition(":")
        if kind in ("gauge", "lgauge", "counter", "lcounter", "rate"):
            assert f"gpulse_gpu_{key}" in metrics, f"{field}: the DCGM source exports gpulse_gpu_{key}"


def test_the_rows_metrics_are_served_from_the_real_default_output(gpulse_proc):
    """gpulse --source dcgm, fed the L4's default output: each row of a field in it
    names metrics that are really exposed."""
    text = require_data(CAPTURES[0]).read_text()
    ex = DcgmExporter(text)
    try:
        g = gpulse_proc("--source", "dcgm", "--dcgm.url", ex.url, "--dcgm.interval", "200ms")
        rows = field_rows()
        wanted = {m for f in set(re.findall(r"^(DCGM_FI_\w+)[{ ]", text, re.M)) for m in rows[f]}
        assert wanted
        g.wait_metrics(lambda t: all(f"\n{m}{{" in t for m in wanted), "every metric the rows name")
    finally:
        ex.stop()


def test_every_recipe_parses(tmp_path):
    promtool = require_binary("promtool")
    pairs = recipes()
    assert len(pairs) >= 10
    assert ("GPU busy (alert)", "DCGM_FI_DEV_GPU_UTIL > 90", "rate(gpulse_gpu_busy_seconds_total[5m]) > 0.9") in pairs
    rules = [{"record": f"recipe:{side}:{i}", "expr": expr}
             for i, (_, dcgm, gpulse) in enumerate(pairs) for side, expr in (("dcgm", dcgm), ("gpulse", gpulse))]
    f = tmp_path / "recipes.yml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "recipes", "rules": rules}]}))
    p = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    for _, dcgm, gpulse in pairs:
        assert "DCGM_FI_" in dcgm and "DCGM_FI_" not in gpulse.split("label_replace")[0], (dcgm, gpulse)


def test_the_side_by_side_install_points_gpulse_at_dcgm_exporter():
    """The doc's `helm install` (rendered with the others by test_helm) sets up
    gpulse reading the node's dcgm-exporter."""
    from helmchart import INSTALL_DOCS, container, docs, documented_installs, helm, merged, packaged, render
    assert "docs/migrating-from-dcgm-exporter.md" in INSTALL_DOCS
    joined = re.sub(r"\\\n\s*", " ", DOC)
    (line,) = [ln.strip() for ln in joined.splitlines() if ln.strip().startswith("helm install gpulse ")]
    assert shlex.split(line) in documented_installs()
    args = shlex.split(line)
    values: dict = {}
    for i, a in enumerate(args):
        if a == "--set":
            values = merged(values, helm.parse_set_string(args[i + 1]))
    with helm.Chart.load(packaged()) as chart:
        c = container(docs(render(chart, values)))
    assert "--source=dcgm" in c["args"] and "--dcgm.url=http://$(HOST_IP):9400/metrics" in c["args"]


def test_the_per_pod_recipe_groups_by_the_workloads_pod():
    """Scraped through the GPU Operator's ServiceMonitor (the EKS capture), `pod` is
    dcgm-exporter's own pod; the workload's is `exported_pod`."""
    import json
    (dcgm,) = [d for q, d, _ in recipes() if q == "utilisation per pod (panel)"]
    by = [x.strip() for x in re.search(r"by \(([^)]*)\)", dcgm).group(1).split(",")]
    doc = json.loads(require_data("captures/dcgm-exporter/h100x8-eks-aicr-promql-DCGM_FI_DEV_GPU_UTIL.json").read_text())
    pods = {s["metric"].get(by[-1], "") for s in doc["data"]["result"]} - {""}
    assert pods and not any(p.startswith("nvidia-dcgm-exporter") for p in pods), (by, pods)
