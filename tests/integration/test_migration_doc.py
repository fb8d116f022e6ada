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
from test_dcgm import _Exporter

DOC = (ROOT / "docs" / "migrating-from-dcgm-exporter.md").read_text()
METRICS_DOC = (ROOT / "docs" / "metrics.md").read_text()
RULE_FILES = sorted((ROOT / "prometheus" / "rules").glob("*.yml"))
CAPTURES = ["captures/dcgm-exporter/l4-gpu-operator.prom", "captures/dcgm-exporter/h100x8-eks-aicr-sampled.prom"]
# In dcgm-exporter's default counter set but absent from the captures (the L4 has
# no NVLink; no XID had happened).
DEFAULTS_NOT_CAPTURED = {"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"}
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
    missing = sorted((captured | DEFAULTS_NOT_CAPTURED) - set(rows))
    assert not missing, f"dcgm-exporter fields without a row: {missing}"


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
    ex = _Exporter(text)
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
    from test_helm import INSTALL_DOCS, _documented_installs, _merge, container, docs, helm, render
    from helmchart import packaged
    assert "docs/migrating-from-dcgm-exporter.md" in INSTALL_DOCS
    joined = re.sub(r"\\\n\s*", " ", DOC)
    (line,) = [ln.strip() for ln in joined.splitlines() if ln.strip().startswith("helm install gpulse ")]
    assert shlex.split(line) in _documented_installs()
    args = shlex.split(line)
    values: dict = {}
    for i, a in enumerate(args):
        if a == "--set":
            values = _merge(values, helm.parse_set_string(args[i + 1]))
    with helm.Chart.load(packaged()) as chart:
        c = container(docs(render(chart, values)))
    assert "--source=dcgm" in c["args"] and "--dcgm.url=http://$(HOST_IP):9400/metrics" in c["args"]
