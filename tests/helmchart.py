"""The chart as users get it: packaged once per test session by helm/package_chart.py
(Helm's own package action), so the tests render and lint the .tgz, not the
folder with its links into prometheus/rules and grafana/dashboards; rendered with
Helm's own engine (helm-python-sdk) into manifests, for the matrix of values the
chart tests cover; the install commands the docs show."""
from __future__ import annotations

import functools
import importlib
import json
import re
import shlex
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from conftest import IN_CI, ROOT

sys.path.insert(0, str(ROOT / "helm"))

import package_chart  # noqa: E402


@functools.lru_cache(maxsize=None)
def packaged() -> Path:
    """Path of the packaged chart; checked self-contained before it is handed out."""
    return package_chart.package(Path(tempfile.mkdtemp(prefix="gpulse-chart-")))


def need(module: str):
    """A Python package the tests need: skip on a laptop, fail in CI (like require_binary)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if IN_CI:
            pytest.fail(f"{module} is not installed ({e}): .ci/run must install the test extra", pytrace=False)
        pytest.skip(f"{module} is not installed", allow_module_level=True)


helm = need("helm_python")


CHART = ROOT / "helm" / "gpulse"


# the rule files the chart's default variant (prometheusRule.variant: prometheus) equals
RULES = ROOT / "prometheus" / "rules-prometheus"


DASHBOARDS = ROOT / "grafana" / "dashboards"


RELEASE, NAMESPACE = "gpulse", "monitoring"


OPERATOR_API = ["monitoring.coreos.com/v1"]


@pytest.fixture(scope="module")
def chart():
    """The packaged chart (.tgz), as a registry would serve it."""
    with helm.Chart.load(packaged()) as c:
        yield c


def render(chart, values: dict | None = None, *, api_versions: list[str] | None = None,
           kube_version: str | None = None) -> dict[str, str]:
    """Template path -> rendered text, like `helm template --api-versions ...`.

    Chart.render() has no way to pass the cluster's API versions, which the
    chart reads to decide on the Prometheus Operator kinds, so this goes one
    level down to the same native call with the options the library accepts.
    """
    from helm_python import _native
    opts: dict = {"name": RELEASE, "namespace": NAMESPACE, "is_install": True}
    if api_versions:
        opts["api_versions"] = api_versions
    if kube_version:
        opts["kube_version"] = kube_version
    out = _native.call_string("helm_render", chart._raw(), json.dumps(values or {}), json.dumps(opts))
    return json.loads(out)


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it: the rules are large


def docs(rendered: dict[str, str]) -> list[dict]:
    out = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        out += [d for d in yaml.load_all(text, Loader=_LOADER) if d]
    return out


def by_kind(manifests: list[dict], kind: str) -> list[dict]:
    return [d for d in manifests if d["kind"] == kind]


def one(manifests: list[dict], kind: str) -> dict:
    found = by_kind(manifests, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def container(manifests: list[dict]) -> dict:
    (c,) = one(manifests, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    return c


def rule_files() -> list[Path]:
    files = sorted(p for p in RULES.iterdir() if p.suffix in (".yml", ".yaml")) if RULES.is_dir() else []
    assert files, f"no rule files in {RULES}: the chart ships its PrometheusRules from there"
    return files


def dashboard_files() -> list[Path]:
    files = sorted(DASHBOARDS.glob("*.json")) if DASHBOARDS.is_dir() else []
    assert files, f"no dashboards in {DASHBOARDS}: the chart ships its ConfigMaps from there"
    return files


# ------------------------------------------------------------------ validation

kubernetes_validate = need("kubernetes_validate")
kv_utils = need("kubernetes_validate.utils")  # all_versions lives here

MIN_KUBE = "1.28"


# ------------------------------------------------------------------ rendering


def kube_versions() -> list[str]:
    from packaging.version import Version
    versions = sorted({v for v in kv_utils.all_versions()}, key=Version)
    wanted = [v for v in versions if Version(v) >= Version(MIN_KUBE)]
    assert wanted, f"kubernetes-validate {kubernetes_validate.__version__} knows no release >= {MIN_KUBE}"
    return wanted


def _strict(schema):
    """Forbid unknown fields wherever an object lists its fields, as
    kubernetes-validate's strict schemas do."""
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        for v in schema.values():
            _strict(v)
    elif isinstance(schema, list):
        for v in schema:
            _strict(v)
    return schema


@functools.lru_cache(maxsize=None)
def operator_validator(kind: str):
    """A strict JSON Schema validator for a monitoring.coreos.com/v1 kind."""
    import jsonschema
    models = need("cloudcoil.models.prometheus_operator.v1")
    from pydantic import TypeAdapter
    schema = _strict(TypeAdapter(getattr(models, kind)).json_schema(by_alias=True))
    return jsonschema.Draft202012Validator(schema)


# kubernetes-validate re-reads its schema files from disk for every object; the
# files never change during a run, so read each once.
kv_utils.schema_contents = functools.lru_cache(maxsize=None)(kv_utils.schema_contents)


def validate_manifest(doc: dict) -> None:
    _validate_once(json.dumps(doc, sort_keys=True))


@functools.lru_cache(maxsize=None)
def _validate_once(text: str) -> None:
    """Objects repeat across the values matrix (the dashboards, say): check each once."""
    doc = json.loads(text)
    kind, name = doc["kind"], doc["metadata"]["name"]
    if doc["apiVersion"] == "monitoring.coreos.com/v1":
        errors = sorted(operator_validator(kind).iter_errors(doc), key=lambda e: list(e.path))
        assert not errors, f"{kind}/{name}: " + "; ".join(
            f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors[:5])
        return
    for version in kube_versions():
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{kind}/{name} invalid for Kubernetes {version}: "
                        f"{'.'.join(map(str, e.path))}: {e.message}")


# ------------------------------------------------------------------ the values matrix

# the chart's rule files: prometheus/rules and its variants (prometheus/tools/variants.py),
# one folder per prometheusRule.variant, with the thresholds the chart sets left as
# @{name} (prometheus/generate.py)
CHART_RULES = ROOT / "prometheus" / "chart"
_spec = importlib.util.spec_from_file_location("prometheus_generate", ROOT / "prometheus" / "generate.py")
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)


def an_alert_to_tune() -> tuple[str, str, float]:
    """(alert, a threshold its expression reads, a new value) for the first alert
    whose expression reads a threshold the chart sets."""
    for f in sorted((CHART_RULES / "prometheus").glob("*.yml")):
        for group in yaml.safe_load(f.read_text())["groups"]:
            for rule in group["rules"]:
                m = re.search(r"@\{(\w+)\}", rule.get("expr", "")) if "alert" in rule else None
                if m:
                    return rule["alert"], m.group(1), 0.4321
    pytest.fail("no alert reads a threshold the chart sets in prometheus/chart")


def rules_with(variant: str, **changed: float) -> list[dict]:
    """Every rule `make rules` (and `make rules-variants` for the chart's variant
    `variant`) writes with the threshold table changed so: what the chart must render
    for those values."""
    import dataclasses
    sys.path.insert(0, str(ROOT / "prometheus" / "tools"))
    import variants
    from gpulse.analysis.thresholds import THRESHOLDS
    table = {n: dataclasses.replace(t, value=changed.pop(n)) if n in changed else t for n, t in THRESHOLDS.items()}
    assert not changed, f"not in the threshold table: {sorted(changed)}"
    out = []
    for text in generate.generate(table).values():
        doc = yaml.safe_load(text)
        form = generate.CHART_VARIANTS[variant]
        doc = doc if form is None else variants.transform(doc, form)
        out += [r for g in doc["groups"] for r in g["rules"]]
    return out


def _last_group() -> str:
    return yaml.safe_load(rule_files()[-1].read_text())["groups"][-1]["name"]


def matrix() -> dict[str, tuple[dict, list[str]]]:
    """name -> (values, api versions the cluster serves)."""
    alert, threshold, new = an_alert_to_tune()
    return {
        "defaults": ({}, []),
        "with-operator": ({"serviceMonitor": {"additionalLabels": {"release": "kube-prometheus-stack"}},
                           "prometheusRule": {"additionalLabels": {"release": "kube-prometheus-stack"}}},
                          OPERATOR_API),
        "attribution": ({"attribution": {"enabled": True},
                         "config": {"kube": {"copy_labels": ["team", "queue"], "refresh_interval": "30s"}}},
                        OPERATOR_API),
        "attribution-off": ({"attribution": {"enabled": False}}, []),
        "attribution-socket-only": ({"attribution": {"enabled": True, "kubeApi": False, "runAsRoot": False},
                                     "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 10001,
                                                            "supplementalGroups": [993],
                                                            "seccompProfile": {"type": "RuntimeDefault"}}}, []),
        "tls-basic-auth": ({"webConfig": {"config": {
                                "tls_server_config": {"cert_file": "/etc/gpulse/tls/tls.crt",
                                                      "key_file": "/etc/gpulse/tls/tls.key"},
                                "basic_auth_users": {"prometheus": "$2y$10$abcdefghijklmnopqrstuv"}},
                                "tlsSecret": "gpulse-tls"},
                            "serviceMonitor": {"force": True, "tlsConfig": {"insecureSkipVerify": True},
                                               "basicAuth": {"username": {"name": "gpulse-scrape", "key": "user"},
                                                             "password": {"name": "gpulse-scrape", "key": "pass"}}}},
                           []),
        "existing-web-config": ({"webConfig": {"existingSecret": "my-web-config", "tls": True}}, OPERATOR_API),
        "podmonitor": ({"podMonitor": {"enabled": True, "force": True, "interval": "30s", "scrapeTimeout": "20s",
                                       "relabelings": [{"action": "labeldrop", "regex": "container"}]},
                        "serviceMonitor": {"enabled": False}, "service": {"enabled": False}}, []),
        "scheduling": ({"runtimeClassName": "nvidia", "priorityClassName": "", "fullnameOverride": "gpu-metrics",
                        "nodeSelector": {"node-role.kubernetes.io/gpu": ""},
                        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [
                                {"key": "pool", "operator": "In", "values": ["h100"]}]}]}}},
                        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                        "podAnnotations": {"example.com/team": "ml-platform"}, "podLabels": {"tier": "monitoring"},
                        "commonLabels": {"cost-center": "gpu"},
                        "imagePullSecrets": [{"name": "regcred"}],
                        "image": {"repository": "registry.example.com/gpulse", "digest": "sha256:" + "a" * 64},
                        "extraArgs": ["--nvml.gpm"], "extraEnv": [{"name": "TZ", "value": "UTC"}],
                        "extraVolumes": [{"name": "scratch", "emptyDir": {}}],
                        "extraVolumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "20%"}}},
                       OPERATOR_API),
        "dcgm-source": ({"config": {"source": "dcgm", "dcgm": {"interval": "2s", "timeout": 1.5},
                                    "activity": "sm_active", "nvml": {"xid_events": False}},
                         "extraArgs": ["--dcgm.url=http://$(HOST_IP):9400/metrics"]}, OPERATOR_API),
        "rules-tuned": ({"prometheusRule": {"disabledGroups": [_last_group()], "thresholds": {threshold: new},
                                            "alerts": {alert: {"for": "30m", "keep_firing_for": "15m",
                                                               "labels": {"team": "ml-platform"}}}}}, OPERATOR_API),
        "network-policy": ({"networkPolicy": {"enabled": True, "metricsFrom": [
                                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                                 "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]}}, []),
        "everything-off": ({"serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": False},
                            "dashboards": {"enabled": False}, "gpuNodeAffinity": {"enabled": False},
                            "tolerations": [], "resources": {}, "priorityClassName": ""}, OPERATOR_API),
    }


def rules_by_source(manifests: list[dict]) -> dict[str, list]:
    return {d["metadata"]["annotations"]["gpulse/source-file"]: d["spec"]["groups"]
            for d in by_kind(manifests, "PrometheusRule")}


INSTALL_DOCS = ("docs/kubernetes.md", "README.md", "helm/gpulse/README.md", "docs/migrating-from-dcgm-exporter.md")


def documented_installs() -> list[list[str]]:
    """`helm install|upgrade` of the chart folder or of the package `make chart` writes."""
    doc = "".join((ROOT / p).read_text() for p in INSTALL_DOCS)
    text = re.sub(r"\\\n\s*", " ", doc)  # join continued shell lines
    commands = [shlex.split(line.strip()) for line in text.splitlines() if line.strip().startswith("helm ")]
    return [c for c in commands if c[1] in ("install", "upgrade")
            and any(a == "./helm/gpulse" or re.fullmatch(r"dist/gpulse-[\d.]+\.tgz", a) for a in c)]


def merged(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
