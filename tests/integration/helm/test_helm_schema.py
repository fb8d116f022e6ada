"""values.schema.json: wrong types and unknown keys fail with the key's name,
`config` follows gpulse's own settings, and every value is commented."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml

from conftest import IN_CI, ROOT

try:
    import helm_python as helm
except ImportError as e:  # skip on a laptop, fail in CI, as for binaries
    if IN_CI:
        pytest.fail(f"helm_python is not installed ({e}): .ci/run must install the test extra", pytrace=False)
    pytest.skip("helm_python is not installed", allow_module_level=True)

CHART = ROOT / "helm" / "gpulse"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())


@pytest.fixture(scope="module")
def chart():
    from helmchart import packaged
    with helm.Chart.load(packaged()) as c:
        yield c


def rejection(chart, values: dict) -> str:
    with pytest.raises(helm.HelmValuesError) as info:
        chart.validate_schema(values)
    return str(info.value)


def test_defaults_pass(chart):
    chart.validate_schema({})
    chart.validate_schema(yaml.safe_load((CHART / "values.yaml").read_text()))


@pytest.mark.parametrize("values, where", [
    ({"image": "gpulse:latest"}, "'/image': got string, want object"),
    ({"image": {"pullPolicy": "Sometimes"}}, "'/image/pullPolicy'"),
    ({"containerPort": "9479"}, "'/containerPort': got string, want integer"),
    ({"containerPort": 70000}, "'/containerPort'"),
    ({"serviceMonitor": {"enabled": "yes"}}, "'/serviceMonitor/enabled': got string, want boolean"),
    ({"serviceMonitor": {"interval": 30}}, "'/serviceMonitor/interval'"),
    ({"serviceMonitor": {"interval": "half a minute"}}, "'/serviceMonitor/interval'"),
    ({"attribution": {"enabled": 1}}, "'/attribution/enabled'"),
    ({"tolerations": {"key": "nvidia.com/gpu"}}, "'/tolerations': got object, want array"),
    ({"extraArgs": "--nvml.gpm"}, "'/extraArgs'"),
    ({"podAnnotations": {"a": 1}}, "'/podAnnotations/a'"),
    ({"prometheusRule": {"alerts": {"GpulseSyncStalls": {"for": 5}}}}, "'/prometheusRule/alerts/GpulseSyncStalls/for'"),
    ({"prometheusRule": {"disabledGroups": "gpulse.training.alerts"}}, "'/prometheusRule/disabledGroups'"),
    ({"dashboards": {"labelValue": 1}}, "'/dashboards/labelValue'"),
    ({"config": {"source": "nvidia"}}, "'/config/source'"),
    ({"config": {"sim": {"gpus": "many"}}}, "'/config/sim/gpus': got string, want integer"),
    ({"config": {"sim": {"gpus": 0}}}, "'/config/sim/gpus'"),
    ({"config": {"sample_interval": "fast"}}, "'/config/sample_interval'"),
    ({"config": {"idle_threshold": 2}}, "'/config/idle_threshold'"),
    ({"config": {"nvml": {"gpm": "on"}}}, "'/config/nvml/gpm': got string, want boolean"),
    ({"config": {"kube": {"copy_labels": [1, 2]}}}, "'/config/kube/copy_labels/0'"),
])
def test_wrong_types_are_rejected_naming_the_key(chart, values, where):
    assert where in rejection(chart, values)


@pytest.mark.parametrize("values, where, key", [
    ({"serviceMonitorr": {"enabled": True}}, "''", "serviceMonitorr"),
    ({"replicas": 3}, "''", "replicas"),
    ({"serviceMonitor": {"intervall": "1m"}}, "'/serviceMonitor'", "intervall"),
    ({"attribution": {"enable": True}}, "'/attribution'", "enable"),
    ({"config": {"sample_intervall": "1s"}}, "'/config'", "sample_intervall"),
    ({"config": {"nvml": {"gmp": True}}}, "'/config/nvml'", "gmp"),
    ({"prometheusRule": {"alerts": {"GpulseSyncStalls": {"threshold": "0.3"}}}},
     "'/prometheusRule/alerts/GpulseSyncStalls'", "threshold"),
])
def test_unknown_keys_are_rejected_naming_the_key(chart, values, where, key):
    message = rejection(chart, values)
    assert f"at {where}: additional properties '{key}' not allowed" in message, message


def test_install_refuses_bad_values_before_rendering(chart):
    # The schema guards the render too, i.e. `helm install` / `helm template`.
    with pytest.raises(helm.HelmValuesError, match="serviceMonitorr"):
        chart.render({"serviceMonitorr": {}}, name="gpulse", namespace="monitoring")


@pytest.mark.parametrize("key", ["web", "node_name", "kube"])
def test_chart_owned_settings_are_not_accepted_under_config(chart, key):
    values = {"web": {"listen_address": ":1"}, "node_name": {"x": 1}, "kube": {"enabled": True}}
    config = {key: values[key]} if key != "node_name" else {"node_name": "n1"}
    assert "/config" in rejection(chart, {"config": config})


# ------------------------------------------------------------------ config follows gpulse's FIELDS

def test_config_schema_is_up_to_date_with_gpulse_settings():
    r = subprocess.run([sys.executable, str(ROOT / "helm" / "sync_config_schema.py"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def _config_keys(schema: dict, prefix: str = "") -> set[str]:
    keys = set()
    for name, sub in schema["properties"].items():
        if sub.get("type") == "object" and "properties" in sub:
            keys |= _config_keys(sub, f"{prefix}{name}.")
        else:
            keys.add(prefix + name)
    return keys


def test_config_schema_covers_every_setting_but_the_chart_owned():
    sys.path.insert(0, str(ROOT / "helm"))
    try:
        from sync_config_schema import CHART_OWNED
    finally:
        sys.path.remove(str(ROOT / "helm"))
    from gpulse.config import FIELDS
    flags = {f.key for f in FIELDS if f.flag}
    assert set(CHART_OWNED) <= flags
    assert _config_keys(SCHEMA["properties"]["config"]) == flags - set(CHART_OWNED)


def _example(field):
    """A valid non-default value for a setting, as a user would write it in values.yaml."""
    from gpulse import config as gcfg
    if field.choices:
        return next((c for c in field.choices if c != field.default), field.default)
    if field.parse is gcfg.parse_duration:
        return "250ms" if (field.lo or 0) <= 0.25 <= (field.hi or 1e9) and field.default != 0.25 else f"{field.hi:g}s"
    if field.parse is gcfg.parse_bool:
        return not field.default
    if field.parse is gcfg.parse_int:
        return int(field.hi) if field.hi is not None else 1234567
    if field.parse is gcfg.parse_float:
        return field.hi if field.hi is not None and field.hi != field.default else 0.125
    if field.parse is gcfg.parse_list:
        return ["example.com/a", "b"]
    return "/tmp/example"


def test_every_config_setting_reaches_gpulse_unchanged(chart):
    """Set every setting the schema allows, render, and parse the container's
    args with gpulse's own parser: each arrives with the value given."""
    from gpulse import config as gcfg
    from gpulse.cli import build_parser
    config: dict = {}
    expected = {}
    for f in gcfg.FIELDS:
        if f.key not in _config_keys(SCHEMA["properties"]["config"]):
            continue
        value = _example(f)
        *section, name = f.key.split(".")
        (config.setdefault(section[0], {}) if section else config)[name] = value
        expected[f.key] = f.coerce(value)
    config["source"] = "replay"  # the example for replay.file makes the cross-checks pass
    expected["source"] = "replay"
    config["analysis_window"] = "60s"
    expected["analysis_window"] = 60.0
    chart.validate_schema({"config": config})
    manifests = [d for p, t in chart.render({"config": config}, name="gpulse", namespace="monitoring").items()
                 if p.endswith("daemonset.yaml") for d in yaml.safe_load_all(t) if d]
    args = manifests[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    ns = build_parser().parse_args(["serve", *args])
    overrides = {f.key: getattr(ns, f.key) for f in gcfg.FIELDS if getattr(ns, f.key, None) is not None}
    cfg = gcfg.load_config(None, overrides, environ={})
    for key, want in expected.items():
        assert gcfg.config_value(cfg, key) == want, f"{key}: {args}"


# ------------------------------------------------------------------ every value is commented

def test_every_value_is_commented():
    """Each key of values.yaml has a comment right above it, except inside
    free-form Kubernetes objects (their schema lists no properties)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, dict | None]] = [(-1, SCHEMA)]
    missing = []
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)([A-Za-z_][\w.-]*):", line)
        if not m or line.lstrip().startswith("-"):
            continue
        indent, key = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if not stack:
            continue  # inside a list item's mapping
        parent = stack[-1][1]
        props = parent.get("properties") if parent else None
        node = props.get(key) if props else None
        if props is not None:
            above = lines[i - 1].strip() if i else ""
            if not above.startswith("#"):
                missing.append(f"line {i + 1}: {line.strip()}")
        stack.append((indent, node))
    assert not missing, "values without a comment:\n" + "\n".join(missing)


def test_every_schema_property_is_in_values_yaml():
    """Nothing the schema accepts is undocumented: each top-level key and each
    key of the chart's own sections appears in values.yaml."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    absent = []
    for key, sub in SCHEMA["properties"].items():
        if key in ("global",):
            continue
        if key not in values:
            absent.append(key)
        elif key != "config" and "properties" in sub:
            absent += [f"{key}.{k}" for k in sub["properties"] if k not in values[key]]
    assert not absent, absent
