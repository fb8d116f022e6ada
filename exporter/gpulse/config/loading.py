"""Reading the settings: a YAML file, the GPULSE_* environment and the flags, in
that order of precedence, into one Config; the checks of settings judged together.
"""
from __future__ import annotations

import difflib
import os
import socket
from typing import Any

import yaml

from ..safetext import clean
from ..safeyaml import FileTextError, StrictLoader, read_text, shown
from .schema import FIELD_BY_KEY, FIELDS, SECTION_CLASSES, SECTIONS, Config, env_name
from .values import ConfigError, format_duration, parse_listen_address




def _name(key: Any) -> str:
    """A key as a message may show it (a YAML key can be 100 KB long, or a number)."""
    return key if isinstance(key, str) and len(key) <= 60 else shown(key)


def _flatten(doc: dict, where: str, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in doc.items():
        if not isinstance(k, str):
            raise ConfigError(f"{where}: {prefix}{_name(k)}: keys must be strings")
        key = prefix + k
        if k in SECTIONS and not prefix:
            if v is None:
                continue
            if not isinstance(v, dict):
                raise ConfigError(f"{where}: {key}: expected a mapping of {key}.* settings, got {shown(v)}")
            out.update(_flatten(v, where, key + "."))
        else:
            out[key] = v
    return out


def suggest(key: str) -> str:
    """'; did you mean sim.scenario?' for a key that is not one, or ''."""
    known = list(FIELD_BY_KEY) + SECTIONS
    underscored = key.replace("-", "_")
    if underscored != key and underscored in known:
        return f"; YAML keys use underscores: {underscored}"
    close = difflib.get_close_matches(underscored, known, n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


def read_config_file(path: str) -> dict[str, Any]:
    """Read a YAML config into {dotted key: raw value}; unknown keys are errors."""
    try:
        text = read_text(path)
    except FileTextError as e:
        raise ConfigError(f"config file {path}: {e}") from None
    try:
        doc = yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise ConfigError(f"config file {path}: nested too deeply") from None
    except ValueError as e:    # a value YAML cannot build: a 5000-digit number, month 13
        raise ConfigError(f"config file {path}: unreadable value: {str(e).split(';')[0]}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise ConfigError(f"config file {path}:{where}: {problem}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"config file {path}: top level must be a mapping, got {shown(doc)}")
    flat = _flatten(doc, path)
    for key in flat:
        if key not in FIELD_BY_KEY:
            raise ConfigError(f"{path}: {_name(key)}: unknown key{suggest(key)}")
    return flat


def default_node_name() -> str:
    return os.environ.get("NODE_NAME") or socket.gethostname()


def env_settings(environ: Any) -> dict[str, str]:
    """{key: raw value} of the GPULSE_* variables that name a setting."""
    return {f.key: environ[env_name(f.key)] for f in FIELDS if env_name(f.key) in environ}


def env_near_misses(environ: Any) -> list[str]:
    """Warnings for GPULSE_* variables that are not a setting but nearly are one
    (GPULSE_SIM_GPU): ignored like any other variable, but most likely a typo. Others
    are left alone: GPULSE_* names are also used by the tools around gpulse."""
    known = [env_name(f.key) for f in FIELDS]
    out = []
    for name in sorted(n for n in environ if n.startswith("GPULSE_") and n not in known):
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        if close:
            out.append(f"{name} is not a setting and is ignored; did you mean {close[0]}?")
    return out


def load_config(file: str | None = None, overrides: dict[str, Any] | None = None,
                environ: dict[str, str] | None = None) -> Config:
    """Defaults < file < GPULSE_* environment < overrides (flags). Raises ConfigError."""
    environ = os.environ if environ is None else environ
    raw: dict[str, tuple[Any, str]] = {}       # key -> (raw value, where it was set)
    if file:
        raw.update((k, (v, f"{file}: ")) for k, v in read_config_file(file).items())
    raw.update((k, (v, f"{env_name(k)}: ")) for k, v in env_settings(environ).items())
    for key, v in (overrides or {}).items():
        if key not in FIELD_BY_KEY:
            raise ConfigError(f"{key}: unknown setting")
        if v is not None:
            raw[key] = (v, "")
    values = {}
    for f in FIELDS:
        if f.key not in raw:
            values[f.key] = f.default
            continue
        v, where = raw[f.key]
        try:
            values[f.key] = f.value(v)
        except ValueError as e:
            raise ConfigError(f"{where}{f.key}: {e}") from None
    _cross_checks(values, raw)
    # the node label's value: the environment and argv hold undecodable bytes as lone
    # surrogates, which no exposition can encode, so they become U+FFFD here
    values["node_name"] = clean(values["node_name"] or default_node_name())
    top = {k: v for k, v in values.items() if "." not in k}
    for sec in SECTIONS:
        top[sec] = SECTION_CLASSES[sec](**{k.split(".", 1)[1]: v for k, v in values.items() if k.startswith(sec + ".")})
    return Config(**top)


def _cross_checks(v: dict[str, Any], raw: dict[str, tuple[Any, str]]) -> None:
    """Settings judged together; each message starts where the first setting was set
    (its file or GPULSE_* variable) and says where the other one came from."""
    def where(key: str) -> str:
        return raw[key][1] if key in raw else ""

    def duration(key: str, own: bool) -> str:
        """The value as read, and how: a bare number is seconds, which a reader of
        `sample_interval: 10` may not expect; the other setting also says its origin."""
        text = format_duration(v[key])
        given = raw[key][0] if key in raw else None
        if own and (isinstance(given, (int, float))
                    or (isinstance(given, str) and given.strip().replace(".", "", 1).isdigit())):
            text = f"{given.strip() if isinstance(given, str) else shown(given)} is read as {text} (a bare number is seconds)"
        if own:
            return text
        origin = "the default" if key not in raw else ("from " + raw[key][1].rstrip(": ") if raw[key][1]
                                                       else "from the command line")
        return f"{text}, {origin}"

    for key in ("web.listen_address", "web.probe_listen_address"):
        try:
            if key == "web.listen_address" or v[key]:
                parse_listen_address(v[key])
        except ValueError as e:
            raise ConfigError(f"{where(key)}{key}: {e}") from None
    if v["analysis_window"] < v["analysis_interval"]:
        raise ConfigError(f"{where('analysis_window')}analysis_window: {duration('analysis_window', True)}, which "
                          f"must be at least analysis_interval ({duration('analysis_interval', False)})")
    if v["sample_interval"] > v["analysis_interval"]:
        raise ConfigError(f"{where('sample_interval')}sample_interval: {duration('sample_interval', True)}, which "
                          f"must not exceed analysis_interval ({duration('analysis_interval', False)})")
    if v["source"] == "replay" and not v["replay.file"]:
        raise ConfigError(f"{where('source')}replay.file: required when source is replay")


def config_value(cfg: Any, key: str) -> Any:
    """cfg.get('sim.scenario') equivalent for dotted keys."""
    obj = cfg
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def as_dict(cfg: Any) -> dict[str, Any]:
    return {f.key: config_value(cfg, f.key) for f in FIELDS}
