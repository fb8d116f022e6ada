"""Chart values for cluster installs: namespaceOverride, image registries,
revisionHistoryLimit, dashboard annotations, the runbook base URL, the `helm
test` connection check and attribution on by default. Rendered from the packaged
chart; the test Pod's check runs for real against a gpulse server."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, free_port
from helmchart import (NAMESPACE, OPERATOR_API, by_kind, chart, container, dashboard_files, docs, one,  # noqa: F401
                       render, rule_files, validate_manifest)  # (chart: a fixture)

VALUES = yaml.safe_load((ROOT / "helm" / "gpulse" / "values.yaml").read_text())
HELPERS = (ROOT / "helm" / "gpulse" / "templates" / "_helpers.tpl").read_text()
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding"}


def test_namespace_override_moves_every_namespaced_object(chart):
    values = {"namespaceOverride": "gpu-monitoring", "attribution": {"enabled": True}}
    manifests = docs(render(chart, values, api_versions=OPERATOR_API))
    for d in manifests:
        validate_manifest(d)
        if d["kind"] not in CLUSTER_SCOPED:
            assert d["metadata"]["namespace"] == "gpu-monitoring", d["kind"]
    assert one(manifests, "ServiceMonitor")["spec"]["namespaceSelector"]["matchNames"] == ["gpu-monitoring"]
    assert one(manifests, "ClusterRoleBinding")["subjects"][0]["namespace"] == "gpu-monitoring"
    # a namespace given for one kind still wins for that kind
    cms = by_kind(docs(render(chart, {**values, "dashboards": {"namespace": "grafana"}})), "ConfigMap")
    assert cms and {cm["metadata"]["namespace"] for cm in cms} == {"grafana"}
    notes = render(chart, values)["gpulse/templates/NOTES.txt"]
    assert "kubectl -n gpu-monitoring get daemonset" in notes


@pytest.mark.parametrize("values, image", [
    ({}, "gpulse:0.1.0"),
    ({"image": {"registry": "registry.example.com", "repository": "ml/gpulse", "tag": "1.2.3"}},
     "registry.example.com/ml/gpulse:1.2.3"),
    ({"global": {"imageRegistry": "mirror.example.com:5000/"}, "image": {"registry": "registry.example.com"}},
     "mirror.example.com:5000/gpulse:0.1.0"),
    ({"image": {"registry": "registry.example.com", "digest": "sha256:" + "b" * 64}},
     "registry.example.com/gpulse@sha256:" + "b" * 64),
])
def test_image_registry_and_global_registry(chart, values, image):
    manifests = docs(render(chart, values))
    assert container(manifests)["image"] == image
    (pod,) = by_kind(manifests, "Pod")          # the helm test Pod uses the same image
    assert pod["spec"]["containers"][0]["image"] == image


def test_revision_history_limit(chart):
    assert one(docs(render(chart)), "DaemonSet")["spec"]["revisionHistoryLimit"] == VALUES["revisionHistoryLimit"]
    assert one(docs(render(chart, {"revisionHistoryLimit": 3})), "DaemonSet")["spec"]["revisionHistoryLimit"] == 3


def test_dashboard_configmap_annotations_merge_with_the_folder(chart):
    values = {"dashboards": {"annotations": {"argocd.argoproj.io/sync-options": "Replace=true"}}}
    for cm in by_kind(docs(render(chart, values)), "ConfigMap"):
        assert cm["metadata"]["annotations"] == {"argocd.argoproj.io/sync-options": "Replace=true",
                                                 "grafana_folder": "GPU"}


# ------------------------------------------------------------------ runbook links

DEFAULT_RUNBOOKS = VALUES["runbookBaseUrl"]


def _runbook_urls(manifests) -> list[str]:
    return [r["annotations"]["runbook_url"] for d in by_kind(manifests, "PrometheusRule")
            for g in d["spec"]["groups"] for r in g["rules"] if "runbook_url" in r.get("annotations", {})]


def test_the_runbook_prefix_is_the_one_the_files_carry():
    """The chart swaps one prefix: the values default, the template's literal and
    every runbook link of the rules and dashboards must be that prefix."""
    assert f'replace "{DEFAULT_RUNBOOKS}"' in HELPERS
    urls = [r["annotations"]["runbook_url"] for f in rule_files() for g in yaml.safe_load(f.read_text())["groups"]
            for r in g["rules"] if "runbook_url" in r.get("annotations", {})]
    assert urls and all(u.startswith(DEFAULT_RUNBOOKS + "/") for u in urls), urls
    for f in dashboard_files():
        links = re.findall(r'https?://[^"\s]*runbooks[^"\s]*', f.read_text())
        assert all(u.startswith(DEFAULT_RUNBOOKS) for u in links), (f.name, links)


def test_runbook_base_url_reaches_every_alert_and_dashboard(chart):
    default = docs(render(chart, api_versions=OPERATOR_API))
    moved = docs(render(chart, {"runbookBaseUrl": "https://wiki.example.com/gpu/runbooks/"}, api_versions=OPERATOR_API))
    before, after = _runbook_urls(default), _runbook_urls(moved)
    assert before and len(before) == len(after)
    for old, new in zip(before, after):
        assert new == old.replace(DEFAULT_RUNBOOKS, "https://wiki.example.com/gpu/runbooks")
    linked = 0
    for cm in by_kind(moved, "ConfigMap"):
        (body,) = cm["data"].values()
        assert DEFAULT_RUNBOOKS not in body
        # links, or the default of a runbook-base variable the links are built from
        linked += body.count("https://wiki.example.com/gpu/runbooks")
    assert linked > 0, "no dashboard carries the runbook prefix"
    # the default changes nothing: the shipped objects equal the files
    for cm, f in zip(sorted(by_kind(default, "ConfigMap"), key=lambda c: next(iter(c["data"]))), dashboard_files()):
        assert cm["data"] == {f.name: f.read_text()}


# ------------------------------------------------------------------ helm test

def _test_pod(chart, values=None) -> dict:
    (pod,) = by_kind(docs(render(chart, values)), "Pod")
    return pod


def _run_check(pod: dict, url: str, attempts: str) -> subprocess.CompletedProcess:
    (c,) = pod["spec"]["containers"]
    env = {e["name"]: e["value"] for e in c["env"]}
    env.update(GPULSE_TEST_URL=url, GPULSE_TEST_ATTEMPTS=attempts)
    cmd = [sys.executable if c["command"][0] == "python3" else c["command"][0], *c["command"][1:]]
    return subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=120)


def test_helm_test_pod_targets_the_service(chart):
    manifests = docs(render(chart))
    pod, svc = one(manifests, "Pod"), one(manifests, "Service")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never" and pod["spec"]["automountServiceAccountToken"] is False
    (c,) = pod["spec"]["containers"]
    url = next(e["value"] for e in c["env"] if e["name"] == "GPULSE_TEST_URL")
    assert url == f"http://{svc['metadata']['name']}.{NAMESPACE}.svc:{svc['spec']['ports'][0]['port']}/healthz"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    tls = next(e["value"] for e in _test_pod(chart, {"webConfig": {"existingSecret": "s", "tls": True}})
               ["spec"]["containers"][0]["env"] if e["name"] == "GPULSE_TEST_URL")
    assert tls.startswith("https://")
    assert not by_kind(docs(render(chart, {"tests": {"enabled": False}})), "Pod")


def test_helm_test_check_passes_against_gpulse_and_fails_without_it(chart, gpulse_proc):
    pod = _test_pod(chart)
    g = gpulse_proc("--source", "sim", "--sim.gpus", "2")
    ok = _run_check(pod, g.url + "/healthz", "3")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "HTTP 200" in ok.stdout
    dead = _run_check(pod, f"http://127.0.0.1:{free_port()}/healthz", "1")
    assert dead.returncode == 1 and "attempt 1/1" in dead.stdout


# ------------------------------------------------------------------ attribution on by default

def test_attribution_is_auto_by_default(chart):
    assert VALUES["attribution"]["enabled"] == "auto"
    manifests = docs(render(chart))
    pod = one(manifests, "DaemonSet")["spec"]["template"]["spec"]
    c = container(manifests)
    (vol,) = [v for v in pod["volumes"] if v.get("hostPath")]
    # never created on the node: a node without the folder keeps the pod from starting
    assert vol["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == vol["name"]]
    assert mount["readOnly"] is True
    # gpulse's own default (kube.enabled auto) decides; --kube.enabled would insist
    assert not any(a in ("--kube.enabled", "--no-kube.enabled") for a in c["args"])
    assert "--kube.pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock" in c["args"]
    assert c["securityContext"]["runAsUser"] == 0 and c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert one(manifests, "ClusterRole") and pod["automountServiceAccountToken"] is True
    insisted = docs(render(chart, {"attribution": {"enabled": True}}))
    (vol,) = [v for v in one(insisted, "DaemonSet")["spec"]["template"]["spec"]["volumes"] if v.get("hostPath")]
    assert vol["hostPath"]["type"] == "Directory"


@pytest.mark.parametrize("value", ["on", "yes", 1])
def test_attribution_enabled_takes_auto_true_or_false(chart, value):
    import helm_python as helm
    with pytest.raises(helm.HelmValuesError, match="attribution"):
        chart.validate_schema({"attribution": {"enabled": value}})
