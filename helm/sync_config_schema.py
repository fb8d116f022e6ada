"""Write the `config` part of helm/gpulse/values.schema.json from gpulse's FIELDS.

The chart turns `.Values.config` into `--key=value` flags, so the schema for it
must list exactly the settings gpulse accepts, with their types, choices and
bounds: then a misspelt or mistyped setting fails `helm install` with the key's
name instead of a crash-looping pod. Deriving it from FIELDS keeps the two from
drifting; tests/integration/helm/test_helm_schema.py runs `--check`.

    python helm/sync_config_schema.py          # rewrite the schema
    python helm/sync_config_schema.py --check  # exit 1 when it is out of date
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "exporter"))

from gpulse import config as gcfg  # noqa: E402
from generated import write_or_check  # noqa: E402

SCHEMA = ROOT / "helm" / "gpulse" / "values.schema.json"

# Settings the chart sets itself from other values (and why), so they are not
# accepted under `config`.
CHART_OWNED = {
    "node_name": "NODE_NAME from the downward API",
    "web.listen_address": "containerPort",
    "web.config_file": "webConfig",
    "web.probe_listen_address": "probePort (set when the web config serves TLS)",
    "kube.enabled": "attribution.enabled",
    "kube.pod_resources_socket": "attribution.podResourcesPath",
    "kube.api": "attribution.kubeApi",
}

# Same grammar as gpulse.config.parse_duration, for string values.
_DURATION = r"^\s*\d+(\.\d+)?\s*(ms|s|m|h)?\s*$"


def field_schema(f: gcfg.Field) -> dict:
    s: dict = {"description": f.help}
    parse = f.parse
    if f.choices is not None:
        s.update(type="string", enum=list(f.choices))
    elif parse is gcfg.parse_duration:
        s.update(type=["string", "number"], pattern=_DURATION)
    elif parse is gcfg.parse_bool:
        s.update(type="boolean")
    elif parse is gcfg.parse_int:
        s.update(type="integer")
    elif parse is gcfg.parse_float:
        s.update(type="number")
    elif parse is gcfg.parse_list:
        s.update(type=["array", "string"], items={"type": "string"})
    elif parse is gcfg.parse_str:
        s.update(type="string")
    else:
        raise SystemExit(f"{f.key}: no JSON Schema type known for parser {parse.__name__}; add it to {__file__}")
    # JSON Schema applies minimum/maximum to numbers only, so a duration given
    # as a string is still range-checked by gpulse itself at start-up.
    if f.lo is not None:
        s["minimum"] = f.lo
    if f.hi is not None:
        s["maximum"] = f.hi
    return s


def config_schema() -> dict:
    top: dict = {}
    sections: dict = {}
    for f in gcfg.FIELDS:
        if f.key in CHART_OWNED or not f.flag:
            continue
        if "." in f.key:
            sec, name = f.key.split(".", 1)
            sections.setdefault(sec, {})[name] = field_schema(f)
        else:
            top[f.key] = field_schema(f)
    for sec, props in sections.items():
        top[sec] = {"type": "object", "description": f"{sec}.* settings", "additionalProperties": False,
                    "properties": props}
    owned = ", ".join(f"{k} ({why})" for k, why in CHART_OWNED.items())
    return {
        "type": "object",
        "description": "gpulse settings, nested like its YAML config file; each becomes a --flag. "
                       f"Set by the chart instead: {owned}.",
        "additionalProperties": False,
        "properties": top,
    }


def render(current: dict) -> str:
    current["properties"]["config"] = config_schema()
    return json.dumps(current, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report whether the file is up to date")
    args = ap.parse_args(argv)
    text = SCHEMA.read_text(encoding="utf-8")
    return write_or_check(SCHEMA, text, render(json.loads(text)), args.check,
                          f"{SCHEMA.relative_to(ROOT)} is out of date with gpulse/config/schema.py FIELDS: "
                          f"run python helm/sync_config_schema.py")


if __name__ == "__main__":
    raise SystemExit(main())
