"""The chart's pods against the Pod Security Standards (tests/podsecurity.py, the
controls as Kubernetes documents them), rendered by Helm's own engine: the level
each setup reaches is the one helm/gpulse/README.md states, with attribution off
the pods pass "restricted", and with attribution on nothing but the pod-resources
hostPath keeps them from "baseline"."""
from __future__ import annotations

import re

import pytest

import podsecurity as pss
from conftest import ROOT
from helmchart import chart, docs, matrix, render  # noqa: F401 (chart: a fixture)

README = ROOT / "helm" / "gpulse" / "README.md"


def readme_levels() -> dict[str, str]:
    """The README's table: `--set` values of a setup -> its Pod Security level."""
    section = README.read_text(encoding="utf-8").split("### Pod Security Standards", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith(("| `", "| (defaults)"))]
    out = {}
    for row in rows:
        setup, level = (c.strip() for c in row.strip("|").split("|")[:2])
        out[setup] = level.strip("*")
    return out


def values_of(setup: str) -> dict:
    """'`a.b=false`, `c=1`' or '(defaults)' -> nested values."""
    values: dict = {}
    for item in re.findall(r"`([^`=]+)=([^`]*)`", setup):
        key, raw = item
        value = {"true": True, "false": False}.get(raw, int(raw) if raw.isdigit() else raw)
        node = values
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = [value] if last == "supplementalGroups" else value
    return values


def test_the_checker_knows_the_controls():
    locked = {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
              "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": False,
                                                                 "capabilities": {"drop": ["ALL"]}}}],
              "volumes": [{"name": "t", "emptyDir": {}}]}
    assert pss.restricted(locked) == []
    root = {**locked, "containers": [{"name": "c", "securityContext": {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsUser": 0, "runAsNonRoot": False}}]}
    assert {c for c, _ in pss.restricted(root)} == {"Running as Non-root", "Running as Non-root user"}
    assert pss.baseline(root) == []
    host = {**locked, "volumes": [{"name": "h", "hostPath": {"path": "/x", "type": "Directory"}}]}
    assert [c for c, _ in pss.baseline(host)] == ["HostPath Volumes"]
    assert {c for c, _ in pss.restricted(host)} == {"HostPath Volumes", "Volume Types"}
    bad = {"hostNetwork": True, "containers": [{"name": "c", "ports": [{"containerPort": 1, "hostPort": 1}],
                                                "securityContext": {"privileged": True,
                                                                    "capabilities": {"add": ["SYS_ADMIN"]}}}]}
    assert {c for c, _ in pss.baseline(bad)} == {"Host Namespaces", "Host Ports", "Privileged Containers",
                                                 "Capabilities"}


def test_every_setup_reaches_the_level_the_readme_states(chart):
    levels = readme_levels()
    assert len(levels) >= 4, levels
    for setup, level in levels.items():
        values = values_of(setup)
        chart.validate_schema(values)
        got = pss.strictest_level(docs(render(chart, values)))
        assert got == level, f"{setup}: README says {level}, the rendered pods reach {got}"


def test_attribution_off_passes_restricted_with_every_pod(chart):
    for case in ("attribution-off",):
        values, _ = matrix()[case]
        pods = pss.pod_specs(docs(render(chart, values)))
        assert {name.split("/")[0] for name, _, _ in pods} == {"DaemonSet", "Pod"}    # the helm test Pod too
        for name, spec, annotations in pods:
            assert pss.restricted(spec, annotations) == [], name


@pytest.mark.parametrize("case", ["defaults", "attribution", "attribution-socket-only", "tls-basic-auth",
                                  "network-policy"])
def test_attribution_keeps_from_baseline_only_by_its_host_path(chart, case):
    """No privilege beyond the pod-resources folder: no host namespace, port or
    capability, never privileged; the folder a read-only hostPath of type
    Directory (never created on the node)."""
    values, _ = matrix()[case]
    for name, spec, annotations in pss.pod_specs(docs(render(chart, values))):
        violations = pss.baseline(spec, annotations)
        assert [c for c, _ in violations] in ([], ["HostPath Volumes"]), (name, violations)
        for v in spec.get("volumes") or []:
            if "hostPath" in v:
                assert v["hostPath"]["type"] == "Directory", (name, v)
        restricted = {c for c, _ in pss.restricted(spec, annotations)} - {"HostPath Volumes", "Volume Types"}
        if name.startswith("DaemonSet") and values.get("attribution", {}).get("runAsRoot", True):
            assert restricted <= {"Running as Non-root", "Running as Non-root user"}, (name, restricted)
        else:
            assert restricted == set(), (name, restricted)
