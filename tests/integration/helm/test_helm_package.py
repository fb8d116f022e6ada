"""The packaged chart is self-contained: real rule and dashboard files inside (no
links), equal to prometheus/chart and grafana/dashboards, and it works after being
copied away from the repository, which the chart folder with its links does not."""
from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib

import pytest
import yaml

from conftest import ROOT
from helmchart import CHART_RULES, OPERATOR_API, dashboard_files, docs, helm, package_chart, packaged, render


def test_package_holds_regular_files_equal_to_the_repository():
    with tarfile.open(packaged()) as tar:
        members = tar.getmembers()
        assert all(m.isfile() for m in members), [m.name for m in members if not m.isfile()]
        inside = {m.name: m for m in members}
        chart_rules = sorted(p for p in CHART_RULES.rglob("*.y*ml"))
        assert chart_rules
        for folder, files in (("rules", chart_rules), ("dashboards", dashboard_files())):
            for f in files:
                name = f.relative_to(CHART_RULES).as_posix() if folder == "rules" else f.name
                member = inside[f"gpulse/files/{folder}/{name}"]
                assert tar.extractfile(member).read() == f.read_bytes(), name
    package_chart.check(packaged())


def test_a_copy_of_the_package_renders_like_the_chart_folder(tmp_path):
    """Vendoring: unpack the .tgz somewhere the repository is not, load that folder."""
    with tarfile.open(packaged()) as tar:
        tar.extractall(tmp_path, filter="data")
    vendored = tmp_path / "vendor" / "gpulse"
    shutil.move(tmp_path / "gpulse", vendored)
    with helm.Chart.load(vendored) as copy, helm.Chart.load(ROOT / "helm" / "gpulse") as folder:
        got = docs(render(copy, api_versions=OPERATOR_API))
        assert got == docs(render(folder, api_versions=OPERATOR_API))
        kinds = {d["kind"] for d in got}
        assert {"PrometheusRule", "ConfigMap", "DaemonSet"} <= kinds


def _archive_with(tmp_path, change) -> str:
    """The packaged chart rewritten member by member; change(tarinfo, data) -> (tarinfo, data)."""
    out = tmp_path / "gpulse-0.1.0.tgz"
    with tarfile.open(packaged()) as src, tarfile.open(out, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else b""
            m, data = change(m, data)
            dst.addfile(m, io.BytesIO(data) if m.isfile() else None)
    return out


def test_check_refuses_a_link_and_a_stale_copy(tmp_path):
    first_rule = f"gpulse/files/rules/prometheus/{sorted((CHART_RULES / 'prometheus').glob('*.yml'))[0].name}"

    def as_link(m, data):
        if m.name == first_rule:
            m.type, m.linkname, m.size = tarfile.SYMTYPE, "../../../prometheus/rules/x.yml", 0
        return m, data

    with pytest.raises(package_chart.PackageError, match="is not a regular file"):
        package_chart.check(_archive_with(tmp_path, as_link))

    def stale(m, data):
        if m.name == first_rule:
            data = data.replace(b"groups:", b"groups:  ", 1)
            m.size = len(data)
        return m, data

    with pytest.raises(package_chart.PackageError, match="differs from the repository's copy"):
        package_chart.check(_archive_with(tmp_path, stale))


def test_the_packaging_command_writes_the_tgz(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "helm" / "package_chart.py"), "--destination", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    archive = p.stdout.strip()
    version = yaml.safe_load((ROOT / "helm" / "gpulse" / "Chart.yaml").read_text())["version"]
    assert archive == str(tmp_path / f"gpulse-{version}.tgz")
    package_chart.check(archive)
    makefile = (ROOT / "Makefile").read_text()
    assert "chart: $(CHARTS)\n\t$(PY) helm/package_chart.py\n" in makefile


def test_make_chart_installs_only_what_packaging_needs(tmp_path):
    """`make chart` used to install the whole test extra (selenium, hypothesis,
    grpcio-tools, ...) to run a script that imports Helm's engine alone."""
    if shutil.which("make") is None:
        pytest.skip("make not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    p = subprocess.run(["make", "--no-print-directory", "-n", "chart", f"VENV={tmp_path / 'venv'}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    installs = [line for line in p.stdout.splitlines() if "pip install" in line]
    pin = next(d for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
               ["optional-dependencies"]["test"] if d.startswith("helm-python-sdk=="))
    assert installs == [f'{tmp_path / "venv"}/bin/python -m pip install --quiet "{pin}"'], p.stdout
    # and the script itself imports nothing of gpulse or the test extra but Helm's engine
    source = (ROOT / "helm" / "package_chart.py").read_text()
    imports = set(re.findall(r"^\s*(?:import|from) (\w+)", source, re.M))
    assert imports <= {"__future__", "argparse", "sys", "tarfile", "pathlib", "helm_python"}, imports
