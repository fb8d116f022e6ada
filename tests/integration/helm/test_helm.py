"""The Helm chart, rendered and linted by Helm's own engine (helm-python-sdk).

Every rendered manifest is validated in strict mode: built-in kinds with
kubernetes-validate for each Kubernetes release from 1.28 to the newest it
knows, and the Prometheus Operator kinds against the operator's published CRD
schema (cloudcoil's generated models), made strict the same way. Consistency
tests tie the chart to the rest of the repository: the rule and dashboard files,
the exporter's real flags and HTTP paths, and the Dockerfile.
"""
from __future__ import annotations

import copy
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, wait_http
from helmchart import (CHART, CHART_RULES, DASHBOARDS, MIN_KUBE, NAMESPACE, OPERATOR_API,  # noqa: F401
                       an_alert_to_tune, by_kind, chart, container, dashboard_files, docs, documented_installs, helm,
                       kube_versions, matrix, merged, one, packaged, render, rule_files, rules_by_source, rules_with,
                       validate_manifest)  # (chart: a fixture)


# ------------------------------------------------------------------ the values matrix


CASES = ["defaults", "with-operator", "attribution", "attribution-off", "attribution-socket-only", "tls-basic-auth",
         "existing-web-config", "podmonitor", "scheduling", "dcgm-source", "rules-tuned", "network-policy",
         "everything-off"]


def test_matrix_names_are_all_tested():
    assert sorted(CASES) == sorted(matrix())


@pytest.mark.parametrize("case", CASES)
def test_renders_and_validates_strictly(chart, case):
    values, apis = matrix()[case]
    manifests = docs(render(chart, values, api_versions=apis))
    assert by_kind(manifests, "DaemonSet"), "no DaemonSet rendered"
    for doc in manifests:
        assert doc["metadata"]["name"], doc
        validate_manifest(doc)


@pytest.mark.parametrize("case", CASES)
def test_lint_strict(case):
    values, _ = matrix()[case]
    report = helm.lint(packaged(), values, strict=True, namespace=NAMESPACE)
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    assert not problems, problems


def test_renders_for_each_kubernetes_release(chart):
    for version in kube_versions():
        manifests = docs(render(chart, {}, kube_version=f"v{version}.0"))
        assert one(manifests, "DaemonSet")


def test_chart_declares_the_oldest_release_tested(chart):
    # Helm refuses installs on clusters outside kubeVersion; keep it equal to
    # the oldest release the manifests are validated against.
    assert chart.metadata["kubeVersion"] == f">={MIN_KUBE}.0-0"


# ------------------------------------------------------------------ defaults: GPU nodes, security

def test_default_daemonset_runs_on_gpu_nodes_only(chart):
    ds = one(docs(render(chart)), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {(e["key"], e["operator"], tuple(e["values"])) for t in terms for e in t["matchExpressions"]}
    assert keys == {("nvidia.com/gpu.present", "In", ("true",)),
                    ("feature.node.kubernetes.io/pci-10de.present", "In", ("true",))}
    assert len(terms) == 2, "the two labels are alternatives: one term each (terms are ORed)"
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in pod["tolerations"]
    assert pod["priorityClassName"] == "system-node-critical"
    assert "runtimeClassName" not in pod
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    env = {e["name"]: e for e in container([ds])["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    # The exporter must not request GPUs: that would take them from training jobs.
    limits = container([ds])["resources"].get("limits", {})
    assert not any(k.startswith("nvidia.com/") for k in limits)


def test_without_attribution_the_pod_is_locked_down(chart):
    manifests = docs(render(chart, {"attribution": {"enabled": False}}))
    pod = one(manifests, "DaemonSet")["spec"]["template"]["spec"]
    sc = container(manifests)["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc.get("privileged", False) is False
    assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add")
    assert pod["automountServiceAccountToken"] is False
    assert not any(v.get("hostPath") for v in pod["volumes"])
    assert not pod.get("hostNetwork") and not pod.get("hostPID")
    kinds = {d["kind"] for d in manifests}
    assert not kinds & {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Secret"}, kinds
    assert "--no-kube.enabled" in container(manifests)["args"]


def test_resources_have_requests_and_limits(chart):
    res = container(docs(render(chart)))["resources"]
    for key in ("cpu", "memory"):
        assert res["requests"][key] and res["limits"][key]


def test_runtime_class_is_optional(chart):
    pod = one(docs(render(chart, {"runtimeClassName": "nvidia"})), "DaemonSet")["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"


def test_user_node_affinity_replaces_the_gpu_default(chart):
    values, _ = matrix()["scheduling"]
    pod = one(docs(render(chart, values)), "DaemonSet")["spec"]["template"]["spec"]
    assert pod["affinity"] == values["affinity"]
    assert pod["nodeSelector"] == values["nodeSelector"]
    assert pod["tolerations"] == values["tolerations"]
    assert "priorityClassName" not in pod
    assert container([one(docs(render(chart, values)), "DaemonSet")])["image"] == \
        "registry.example.com/gpulse@sha256:" + "a" * 64


# ------------------------------------------------------------------ attribution and RBAC

def test_attribution_mounts_the_socket_read_only_and_grants_pod_reads(chart):
    manifests = docs(render(chart, {"attribution": {"enabled": True}}))
    ds = one(manifests, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    c = container(manifests)
    (vol,) = [v for v in pod["volumes"] if v.get("hostPath")]
    assert vol["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}   # never created
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == vol["name"]]
    assert mount["readOnly"] is True and mount["mountPath"] == "/var/lib/kubelet/pod-resources"
    assert "--kube.enabled" in c["args"]
    assert "--kube.pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock" in c["args"]
    assert "--kube.api" in c["args"]
    # The socket is root-only; root here still has no capabilities, and the pod
    # does not claim to run as non-root while its container runs as user 0.
    assert c["securityContext"]["runAsUser"] == 0 and c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert "runAsNonRoot" not in pod["securityContext"] and "runAsUser" not in pod["securityContext"]
    role = one(manifests, "ClusterRole")
    # one list call per refresh (apiserver.ApiClient.pods): no get, no watch
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    binding = one(manifests, "ClusterRoleBinding")
    sa = one(manifests, "ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}]
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is True


def test_attribution_without_api_needs_no_rbac(chart):
    values, _ = matrix()["attribution-socket-only"]
    manifests = docs(render(chart, values))
    kinds = {d["kind"] for d in manifests}
    assert not kinds & {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}, kinds
    c = container(manifests)
    assert "--no-kube.api" in c["args"]
    assert "runAsUser" not in c["securityContext"]
    assert one(manifests, "DaemonSet")["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


# ------------------------------------------------------------------ web config

def test_inline_web_config_becomes_a_mounted_secret(chart):
    values, _ = matrix()["tls-basic-auth"]
    manifests = docs(render(chart, values))
    secret = one(manifests, "Secret")
    assert yaml.safe_load(secret["stringData"]["web-config.yml"]) == values["webConfig"]["config"]
    c = container(manifests)
    assert "--web.config.file=/etc/gpulse/web/web-config.yml" in c["args"]
    pod = one(manifests, "DaemonSet")["spec"]["template"]["spec"]
    secrets = {v["secret"]["secretName"]: v["name"] for v in pod["volumes"] if "secret" in v}
    assert set(secrets) == {secret["metadata"]["name"], "gpulse-tls"}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts[secrets["gpulse-tls"]] == "/etc/gpulse/tls"
    # TLS on the metrics port: the probes use the plain probe port
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["port"] == "probes" and c[probe]["httpGet"]["scheme"] == "HTTP"
    endpoint = one(manifests, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https" and endpoint["basicAuth"]["username"]["name"] == "gpulse-scrape"
    # A changed web config must roll the pods.
    ann = one(manifests, "DaemonSet")["spec"]["template"]["metadata"]["annotations"]
    other = copy.deepcopy(values)
    other["webConfig"]["config"]["basic_auth_users"]["prometheus"] = "$2y$10$zyxwvutsrqponmlkjihgfe"
    ann2 = one(docs(render(chart, other)), "DaemonSet")["spec"]["template"]["metadata"]["annotations"]
    assert ann["checksum/web-config"] != ann2["checksum/web-config"]


def test_existing_web_config_secret_is_used_not_written(chart):
    manifests = docs(render(chart, {"webConfig": {"existingSecret": "my-web-config", "tls": True}}))
    assert not by_kind(manifests, "Secret")
    pod = one(manifests, "DaemonSet")["spec"]["template"]["spec"]
    assert {"name": "web-config", "secret": {"secretName": "my-web-config"}} in pod["volumes"]
    # its TLS settings (client certificates required or not) are unknown here: the probes keep off the TLS port
    assert container(manifests)["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes", "scheme": "HTTP"}


# ------------------------------------------------------------------ Prometheus Operator objects

def test_operator_objects_render_only_when_the_api_exists_or_forced(chart):
    kinds = lambda m: {d["kind"] for d in m}  # noqa: E731
    plain = docs(render(chart))
    assert not kinds(plain) & {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    with_api = docs(render(chart, api_versions=OPERATOR_API))
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds(with_api)
    with_kind = docs(render(chart, api_versions=["monitoring.coreos.com/v1/ServiceMonitor"]))
    assert "ServiceMonitor" in kinds(with_kind)
    forced = docs(render(chart, {"serviceMonitor": {"force": True}, "prometheusRule": {"force": True}}))
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds(forced)
    off = docs(render(chart, {"serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": False}},
                      api_versions=OPERATOR_API))
    assert not kinds(off) & {"ServiceMonitor", "PrometheusRule"}
    notes = render(chart)["gpulse/templates/NOTES.txt"]
    assert "ServiceMonitor was not created" in notes and "PrometheusRule was not created" in notes


def test_servicemonitor_selects_the_service_and_its_port(chart):
    values = {"serviceMonitor": {"additionalLabels": {"release": "kube-prometheus-stack"}, "interval": "30s",
                                 "scrapeTimeout": "25s",
                                 "relabelings": [{"action": "replace", "targetLabel": "cluster", "replacement": "a"}]}}
    manifests = docs(render(chart, values, api_versions=OPERATOR_API))
    svc, sm, ds = one(manifests, "Service"), one(manifests, "ServiceMonitor"), one(manifests, "DaemonSet")
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert svc["metadata"]["namespace"] in sm["spec"]["namespaceSelector"]["matchNames"]
    svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] in svc_ports
    # The Service reaches the pods: its selector matches them and its target is the container's port.
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert svc_ports[endpoint["port"]]["targetPort"] in {p["name"] for p in container(manifests)["ports"]}
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("30s", "25s")
    assert endpoint["honorLabels"] is True
    # The chart's node relabeling first, then the user's.
    assert endpoint["relabelings"][0]["targetLabel"] == "node"
    assert endpoint["relabelings"][1]["targetLabel"] == "cluster"
    # job="gpulse" whatever the release is called: the rules match on it.
    assert svc["metadata"]["labels"][sm["spec"]["jobLabel"]] == "gpulse"


def test_podmonitor_selects_the_pods_and_their_port(chart):
    values, apis = matrix()["podmonitor"]
    manifests = docs(render(chart, values, api_versions=apis))
    pm, ds = one(manifests, "PodMonitor"), one(manifests, "DaemonSet")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in {p["name"] for p in container(manifests)["ports"]}
    assert pod_labels[pm["spec"]["jobLabel"]] == "gpulse"
    assert not by_kind(manifests, "Service") and not by_kind(manifests, "ServiceMonitor")


def test_servicemonitor_and_podmonitor_together_are_refused(chart):
    with pytest.raises(helm.HelmError, match="serviceMonitor.enabled and podMonitor.enabled"):
        render(chart, {"podMonitor": {"enabled": True}}, api_versions=OPERATOR_API)


# ------------------------------------------------------------------ rules and dashboards come from their folders

def test_chart_links_to_the_rule_and_dashboard_folders():
    for link, target in ((CHART / "files" / "rules", CHART_RULES), (CHART / "files" / "dashboards", DASHBOARDS)):
        assert link.is_symlink(), f"{link} must be a link, never a copy"
        assert link.resolve() == target.resolve()
    rule_files()
    dashboard_files()


def test_prometheusrule_groups_equal_the_rule_files(chart):
    manifests = docs(render(chart, api_versions=OPERATOR_API))
    rendered = rules_by_source(manifests)
    expected = {f"prometheus/rules-prometheus/{f.name}": yaml.safe_load(f.read_text())["groups"]
                for f in rule_files()}
    assert rendered == expected
    names = [d["metadata"]["name"] for d in by_kind(manifests, "PrometheusRule")]
    assert len(set(names)) == len(names)


def test_prometheusrule_groups_can_be_switched_off_and_alerts_tuned(chart):
    values, apis = matrix()["rules-tuned"]
    alert, threshold, new = an_alert_to_tune()
    disabled = values["prometheusRule"]["disabledGroups"][0]
    groups = [g for gs in rules_by_source(docs(render(chart, values, api_versions=apis))).values() for g in gs]
    assert disabled not in {g["name"] for g in groups}
    # An alert name may head several rules (one per severity): the change applies to each.
    tuned = [r for g in groups for r in g["rules"] if r.get("alert") == alert]
    originals = [r for f in rule_files() for g in yaml.safe_load(f.read_text())["groups"]
                 if g["name"] != disabled for r in g["rules"] if r.get("alert") == alert]
    assert tuned and len(tuned) == len(originals)
    # the threshold is set by name: what `make rules` writes with the table so
    generated = [r for r in rules_with("prometheus", **{threshold: new}) if r.get("alert") == alert]
    for rule, original, want in zip(tuned, originals, generated):
        assert rule["for"] == "30m" and rule["keep_firing_for"] == "15m"
        assert rule["labels"] == {**original.get("labels", {}), "team": "ml-platform"}
        assert rule["expr"] == want["expr"] and rule["annotations"] == want["annotations"]
    assert any(r["expr"] != o["expr"] for r, o in zip(tuned, originals))
    # and every other rule reading it changes with it: the whole render is the generator's
    everything = [r for gs in rules_by_source(docs(render(
        chart, {"prometheusRule": {"thresholds": {threshold: new}}}, api_versions=apis))).values()
        for g in gs for r in g["rules"]]
    assert everything == rules_with("prometheus", **{threshold: new})
    # enabled: false drops the alert alone
    off = docs(render(chart, {"prometheusRule": {"alerts": {alert: {"enabled": False}}}}, api_versions=apis))
    alerts = {r.get("alert") for gs in rules_by_source(off).values() for g in gs for r in g["rules"]}
    assert alert not in alerts and len(alerts) > 1


@pytest.mark.parametrize("values, message", [
    ({"alerts": {"GpulseNoSuchAlert": {"for": "1m"}}}, "prometheusRule.alerts.GpulseNoSuchAlert: no such alert"),
    ({"disabledGroups": ["no.such.group"]}, 'prometheusRule.disabledGroups: no rule group "no.such.group"'),
])
def test_rule_overrides_naming_nothing_fail(chart, values, message):
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render(chart, {"prometheusRule": values}, api_versions=OPERATOR_API)


def test_a_threshold_set_on_the_command_line_is_the_same_number(chart):
    """`--set prometheusRule.thresholds.x=0.15` hands the chart the text "0.15"."""
    def rules(v):
        return rules_by_source(docs(render(chart, {"prometheusRule": {"thresholds": {"stall_page_ratio": v}}},
                                            api_versions=OPERATOR_API)))
    assert rules("0.15") == rules(0.15) != rules(0.1)
    with pytest.raises(helm.HelmError, match="stall_page_ratio"):
        rules("0.15 or vector(1)")


def test_unknown_threshold_fails(chart):
    with pytest.raises(helm.HelmError, match=re.escape("prometheusRule.thresholds.no_such_ratio: no such threshold")):
        render(chart, {"prometheusRule": {"thresholds": {"no_such_ratio": 0.5}}}, api_versions=OPERATOR_API)
    # a hold duration is set per alert (`for`), not as a threshold
    with pytest.raises(helm.HelmError, match=re.escape("prometheusRule.thresholds.stale_seconds")):
        render(chart, {"prometheusRule": {"thresholds": {"stale_seconds": 60}}}, api_versions=OPERATOR_API)
    # and text to replace in an expression is no longer a way to set one
    alert, _, _ = an_alert_to_tune()
    with pytest.raises(helm.HelmError, match="thresholds"):
        render(chart, {"prometheusRule": {"alerts": {alert: {"thresholds": {"> 0.1": "> 1"}}}}},
               api_versions=OPERATOR_API)


def test_dashboard_configmaps_equal_the_dashboard_files(chart):
    values = {"dashboards": {"folder": "Training", "namespace": "grafana", "additionalLabels": {"team": "ml"}}}
    cms = by_kind(docs(render(chart, values)), "ConfigMap")
    data = {}
    for cm in cms:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["labels"]["team"] == "ml"
        assert cm["metadata"]["annotations"] == {"grafana_folder": "Training"}
        assert cm["metadata"]["namespace"] == "grafana"
        assert len(cm["data"]) == 1
        data.update(cm["data"])
    assert data == {f.name: f.read_text(encoding="utf-8") for f in dashboard_files()}
    for name, text in data.items():
        assert json.loads(text)["uid"], name


def test_dashboard_sidecar_label_is_configurable(chart):
    values = {"dashboards": {"label": "grafana.com/dashboard", "labelValue": "gpulse", "folderAnnotation": ""}}
    for cm in by_kind(docs(render(chart, values)), "ConfigMap"):
        assert cm["metadata"]["labels"]["grafana.com/dashboard"] == "gpulse"
        assert "grafana_dashboard" not in cm["metadata"]["labels"]
        assert not cm["metadata"].get("annotations")


# ------------------------------------------------------------------ the exporter accepts what the chart passes

@functools.lru_cache(maxsize=None)
def serve_flags() -> frozenset[str]:
    """Every flag `gpulse serve --help` lists."""
    env = {"PYTHONPATH": str(ROOT / "exporter")}
    out = subprocess.run([sys.executable, "-m", "gpulse", "serve", "--help"], capture_output=True, text=True,
                         env={**__import__("os").environ, **env}, timeout=60, check=True).stdout
    flags = frozenset(re.findall(r"(?<![\w-])(--[a-z][\w.-]*)", out))
    assert "--web.listen-address" in flags, out
    return flags


@pytest.mark.parametrize("case", CASES)
def test_container_args_are_flags_gpulse_serve_accepts(chart, case):
    values, apis = matrix()[case]
    args = container(docs(render(chart, values, api_versions=apis)))["args"]
    assert args
    for arg in args:
        assert arg.startswith("--"), arg
        name = arg.split("=", 1)[0]
        assert name in serve_flags(), f"{case}: {arg!r} is not a flag of `gpulse serve`"
        if "=" not in arg:  # a switch: only booleans may go without a value
            positive = name.replace("--no-", "--", 1)
            assert f"--no-{positive[2:]}" in serve_flags(), f"{case}: {arg!r} needs a value"


def test_config_values_become_the_flags_gpulse_expects(chart):
    values = {"config": {"source": "sim", "idle_threshold": 0.25, "analysis_window": 60, "sim": {"gpus": 4},
                         "kube": {"workload_label_keys": ["a/b", "c"]}, "nvml": {"gpm": True, "xid_events": False}}}
    args = container(docs(render(chart, values)))["args"]
    for expected in ("--source=sim", "--idle-threshold=0.25", "--analysis-window=60", "--sim.gpus=4",
                     "--kube.workload-label-keys=a/b,c", "--nvml.gpm", "--no-nvml.xid-events"):
        assert expected in args


def test_rendered_args_start_gpulse_and_the_probes_hit_served_paths(chart, gpulse_proc):
    """Run the real exporter with the chart's own args and GET its probe paths."""
    import requests
    values = {"config": {"source": "sim", "sim": {"gpus": 2}, "analysis_interval": "500ms",
                         "nvml": {"xid_events": False}}}
    c = container(docs(render(chart, values)))
    port_arg = f"--web.listen-address=:{c['ports'][0]['containerPort']}"
    assert port_arg in c["args"], "the exporter must listen on the port the pod declares"
    # The fixture binds a free loopback port; the chart's listen address is checked above.
    g = gpulse_proc(*[a for a in c["args"] if a != port_arg])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe in ("livenessProbe", "readinessProbe"):
        get = c[probe]["httpGet"]
        assert get["port"] in ports and get["scheme"] == "HTTP"
        r = requests.get(g.url + get["path"], timeout=5)
        assert r.status_code == 200, f"{probe} {get['path']}: {r.status_code}"
    assert "gpulse_gpu_up" in g.metrics()


def test_mutual_tls_probes_use_their_own_plain_port(chart, gpulse_proc, tmp_path):
    """The chart's web-config Secret and probes against the real server with
    client_auth_type RequireAndVerifyClientCert: the kubelet presents no client
    certificate, so its probes go to the plain probe port (/healthz and /readyz
    only) and pass; /metrics wants the certificate and the password."""
    import requests
    from tlsutil import CA, bcrypt_hash
    ca = CA(tmp_path)
    server, client = ca.issue("server", server=True), ca.issue("client", server=False)
    values = {"config": {"source": "sim", "sim": {"gpus": 2}},
              "webConfig": {"config": {"tls_server_config": {"cert_file": str(server.cert), "key_file": str(server.key),
                                                             "client_auth_type": "RequireAndVerifyClientCert",
                                                             "client_ca_file": str(ca.path)},
                                       "basic_auth_users": {"prometheus": bcrypt_hash("s3cret")}}}}
    manifests = docs(render(chart, values))
    c = container(manifests)
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "web-config"]
    (arg,) = [a for a in c["args"] if a.startswith("--web.config.file=")]
    in_pod = arg.split("=", 1)[1]
    assert in_pod.startswith(mount["mountPath"] + "/")
    # The Secret's file, where the pod would see it.
    local = tmp_path / Path(in_pod).name
    local.write_text(one(manifests, "Secret")["stringData"][Path(in_pod).name])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    port_arg = f"--web.listen-address=:{ports['metrics']}"
    probe_arg = f"--web.probe-listen-address=:{ports['probes']}"
    assert port_arg in c["args"] and probe_arg in c["args"]
    # both ports where the kernel puts them (the harness reads them from the log)
    args = [f"--web.config.file={local}" if a == arg else
            "--web.probe-listen-address=127.0.0.1:0" if a == probe_arg else a
            for a in c["args"] if a != port_arg]
    g = gpulse_proc(*args, ready=False)
    probe_port = g.probe_port
    wait_http(f"http://127.0.0.1:{probe_port}/readyz")
    for probe in ("livenessProbe", "readinessProbe"):
        get = c[probe]["httpGet"]
        assert get["port"] == "probes" and get["scheme"] == "HTTP"
        assert requests.get(f"http://127.0.0.1:{probe_port}{get['path']}", timeout=5).status_code == 200
        # what the chart used to do: HTTPS on the metrics port, no client certificate
        with pytest.raises(requests.exceptions.RequestException):
            requests.get(f"https://127.0.0.1:{g.port}{get['path']}", verify=str(ca.path), timeout=5)
    assert requests.get(f"http://127.0.0.1:{probe_port}/metrics", timeout=5).status_code == 404
    cert = (str(client.cert), str(client.key))
    base = f"https://127.0.0.1:{g.port}"
    assert requests.get(base + "/metrics", verify=str(ca.path), cert=cert, timeout=5).status_code == 401
    ok = requests.get(base + "/metrics", verify=str(ca.path), cert=cert, auth=("prometheus", "s3cret"), timeout=5)
    assert ok.status_code == 200 and "gpulse_gpu_up" in ok.text
    # the probe port is the pod's, not the Service's
    assert [p["targetPort"] for p in one(manifests, "Service")["spec"]["ports"]] == ["metrics"]


def test_network_policy_admits_the_metrics_port_from_the_named_peers(chart):
    assert not by_kind(docs(render(chart)), "NetworkPolicy")
    values, _ = matrix()["network-policy"]
    manifests = docs(render(chart, values))
    policy = one(manifests, "NetworkPolicy")
    ds = one(manifests, "DaemonSet")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}],
                                          "from": values["networkPolicy"]["metricsFrom"]}]


# ------------------------------------------------------------------ the commands docs/kubernetes.md shows


def test_documented_install_commands_render(chart):
    """Each `helm install` of the chart in INSTALL_DOCS, with its --set and -f
    values, passes the schema and renders valid manifests (from the package)."""
    installs = documented_installs()
    assert len(installs) >= 6, "the plain, kube-prometheus-stack, attribution, dcgm and packaged installs"
    assert any(any(a.startswith("dist/") for a in c) for c in installs)
    doc = (ROOT / "docs" / "kubernetes.md").read_text()
    for cmd in installs:
        values: dict = {}
        for i, arg in enumerate(cmd):
            if arg == "--set":
                values = merged(values, helm.parse_set_string(cmd[i + 1]))
            elif arg == "--set-string":
                values = merged(values, helm.parse_set_string_values(cmd[i + 1]))
            elif arg in ("-f", "--values"):
                values = merged(values, _values_file_from_doc(doc, cmd[i + 1]))
        chart.validate_schema(values)
        for d in docs(render(chart, values, api_versions=OPERATOR_API)):
            validate_manifest(d)


def _values_file_from_doc(doc: str, name: str) -> dict:
    """The YAML block the doc shows right under a line naming the file."""
    m = re.search(re.escape(name) + r"[^\n]*\n+```ya?ml\n(.*?)```", doc, re.S)
    assert m, f"docs/kubernetes.md uses -f {name} but shows no YAML block for it"
    return yaml.safe_load(m.group(1))
