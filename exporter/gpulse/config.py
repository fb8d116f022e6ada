"""One frozen, typed Config built from defaults < YAML file < GPULSE_* env < flags.

Every setting is declared once, as a typed field of the Config dataclasses (FIELDS
is derived from them). The YAML key, the flag and the env var are derived from its
dotted name, so they cannot drift apart:

    sim.scenario  ->  YAML `sim: {scenario: ...}`,  --sim.scenario,  GPULSE_SIM_SCENARIO

Every error names the key, where the value came from (the file, the GPULSE_*
variable; flags are on the command line in front of the user) and the reason in one
line (ConfigError); the CLI prints it and exits 2. Raw values appear in messages only
through safeyaml.shown(), so a hostile value cannot make the message itself huge.
"""
from __future__ import annotations

import difflib
import math
import os
import re
import socket
import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Iterable, get_origin, get_type_hints

import yaml

# the defaults of the detection settings are entries of the one threshold table
from .analysis.thresholds import value as threshold
from .logsetup import FORMATTERS as LOG_FORMATS, LEVELS as LOG_LEVELS
from .safetext import clean
from .safeyaml import FileTextError, StrictLoader, read_text, shown
from .sources import SOURCES
from .sources.recorded import FORMATS as REPLAY_FORMATS
from .sources.sim import SCENARIOS as SIM_SCENARIOS

DEFAULT_PORT = 9479
DEFAULT_LISTEN = f":{DEFAULT_PORT}"

SCENARIOS = tuple(SIM_SCENARIOS)

DEFAULT_WORKLOAD_LABEL_KEYS = (
    "training.kubeflow.org/job-name",
    "jobset.sigs.k8s.io/jobset-name",
    "batch.kubernetes.io/job-name",
    "volcano.sh/job-name",
    "leaderworkerset.sigs.k8s.io/name",
    "app.kubernetes.io/instance",
)


class ConfigError(ValueError):
    """A bad setting. str() is the one line shown to the user."""


# Longest integer accepted anywhere: bounds are checked on the number, and a
# 400-digit one cannot even be formatted as a float in a message.
MAX_INT_DIGITS = 18
# Longest string setting (PATH_MAX): a node name or path beyond it is an attack or a mistake.
MAX_STR_CHARS = 4096


# ---------------------------------------------------------------- value parsers

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$", re.ASCII)
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """'100ms', '1.5s', '5m', '2h' or a bare number of seconds -> seconds (finite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a duration like 100ms or 30s, got {shown(value)}")
    if isinstance(value, str):
        m = _DURATION_RE.match(value)
        if not m:
            raise ValueError(f"expected a duration like 100ms or 30s, got {shown(value)}")
        value = float(m.group(1)) * _UNIT[m.group(2)]
    try:
        seconds = float(value)
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds):   # YAML .nan / .inf, or 400 digits of seconds
        raise ValueError(f"expected a finite duration like 100ms or 30s, got {shown(value)}")
    return seconds


def format_duration(seconds: float) -> str:
    """The way people write it and parse_duration reads it back: 0.1 -> '100ms',
    30 -> '30s', 900 -> '15m', 1.5 -> '1.5s'."""
    for unit in ("h", "m", "s"):
        n = seconds / _UNIT[unit]
        if n >= 1 and n == round(n):
            return f"{round(n)}{unit}"
    if 0 < seconds < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


def _parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {shown(value)}")


def _parse_auto_bool(value: Any) -> bool | str:
    """true/false, or "auto" (decided at start-up from what the machine has)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        return _parse_bool(value)
    except ValueError:
        raise ValueError(f"expected true, false or auto, got {shown(value)}") from None


def _parse_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str) and re.fullmatch(r"\s*[-+]?[0-9]+\s*", value):
        digits = len(value.strip().lstrip("+-"))
        if digits > MAX_INT_DIGITS:      # int() of it would work, but nothing can use it
            raise ValueError(f"expected an integer of at most {MAX_INT_DIGITS} digits, got a {digits}-digit number")
        n = int(value)
    else:
        raise ValueError(f"expected an integer, got {shown(value)}")
    if abs(n) >= 10 ** MAX_INT_DIGITS:
        raise ValueError(f"expected an integer of at most {MAX_INT_DIGITS} digits, got {shown(n)}")
    return n


def _parse_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a number, got {shown(value)}")
    try:
        f = float(value)
    except ValueError:
        raise ValueError(f"expected a number, got {shown(value)}") from None
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        raise ValueError(f"expected a finite number, got {shown(value)}")
    return f


def _text(s: str) -> str:
    # a NUL reaches open() and the OS as "embedded null byte"; no setting needs one,
    # nor a value longer than the longest path
    if "\x00" in s:
        raise ValueError("contains a NUL character")
    if len(s) > MAX_STR_CHARS:
        raise ValueError(f"longer than {MAX_STR_CHARS} characters ({len(s)})")
    return s


def _parse_str(value: Any) -> str:
    if isinstance(value, (dict, list)):
        raise ValueError(f"expected a string, got {shown(value)}")
    return _text(str(value))


def _parse_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(v.strip() for v in _text(value).split(",") if v.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(_text(v) for v in value)
    raise ValueError(f"expected a list of strings, got {shown(value)}")


def parse_listen_address(value: str) -> tuple[str, int]:
    """'HOST:PORT', ':PORT' or '[::1]:PORT' -> (host, port); empty host = all interfaces."""
    s = str(value).strip()
    m = re.match(r"^(?:\[([0-9a-fA-F:.]+)\]|([^:\[\]]*)):(\d{1,5})$", s)
    if not m:
        raise ValueError(f"expected HOST:PORT or :PORT, got {shown(value)}")
    host = m.group(1) if m.group(1) is not None else (m.group(2) or "")
    port = int(m.group(3))
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be 0..65535, got {port}")
    return host, port


# ---------------------------------------------------------------- the schema
#
# The Config dataclasses below are the one table of settings. A setting's annotation
# says what its value is and so how a raw value is read: str, int, float, bool,
# tuple[str, ...] (a list, or "a,b" in a flag or variable), Duration (seconds, written
# 100ms/30s/5m) and AutoBool (true, false or "auto"); setting() adds its default, help
# text, choices and bounds. FIELDS, the flags, the GPULSE_* names, the YAML keys, the
# Helm values schema and the docs are all derived from them.

Duration = Annotated[float, parse_duration]
AutoBool = Annotated[bool | str, _parse_auto_bool]

# how a raw value is read, by the type of the setting (Annotated types carry their own)
_PARSERS: dict[Any, Callable[[Any], Any]] = {
    str: _parse_str, int: _parse_int, float: _parse_float, bool: _parse_bool,
    tuple[str, ...]: _parse_list,
}


@dataclass(frozen=True)
class _Spec:
    """What setting() records on a dataclass field, beside its default."""
    help: str
    choices: tuple[str, ...] | None
    lo: float | None
    hi: float | None
    metavar: str | None
    flag: bool


def setting(default: Any, help: str, *, choices: Iterable[str] | None = None, lo: float | None = None,
            hi: float | None = None, metavar: str | None = None, flag: bool = True) -> Any:
    """A setting of a Config section: its default and what the flag, the help and the
    checks need to know about it."""
    spec = _Spec(help, tuple(choices) if choices is not None else None, lo, hi, metavar, flag)
    return dataclasses.field(default=default, metadata={_SPEC: spec})


_SPEC = "gpulse.setting"


@dataclass(frozen=True)
class WebConfig:
    """web.*: the HTTP server."""
    listen_address: str = setting(DEFAULT_LISTEN, "address to listen on, HOST:PORT", metavar="HOST:PORT")
    config_file: str = setting("", "exporter-toolkit web config (TLS, basic auth, headers)", metavar="FILE")
    max_requests: int = setting(64, "concurrent requests served; more get 503", lo=1, hi=10000)
    timeout: Duration = setting(10.0, "per-connection read/write timeout", lo=0.1, hi=600, metavar="DURATION")
    healthz_public: bool = setting(True, "serve /healthz and /readyz without authentication")
    probe_listen_address: str = setting("", "plain-HTTP address answering only /healthz and /readyz, for probes "
                                        "that cannot present a client certificate; empty: none", metavar="HOST:PORT")


@dataclass(frozen=True)
class LogConfig:
    """log.*: the exporter's own log."""
    level: str = setting("info", "log level", choices=LOG_LEVELS)
    format: str = setting("text", "log format", choices=LOG_FORMATS)


@dataclass(frozen=True)
class SimConfig:
    """sim.*: the simulated source."""
    scenario: str = setting("sync-stall", "the training pattern the simulated GPUs follow", choices=SCENARIOS)
    gpus: int = setting(8, "number of simulated GPUs", lo=1, hi=4096)
    seed: int = setting(1, "random seed of the simulation")


@dataclass(frozen=True)
class NvmlConfig:
    """nvml.*: the NVML source."""
    wait: bool = setting(False, "keep retrying NVML initialisation instead of exiting")
    gpm: bool = setting(False, "read GPM SM activity on Hopper and newer")
    xid_events: bool = setting(True, "count XID errors from NVML events")


@dataclass(frozen=True)
class DcgmConfig:
    """dcgm.*: the DCGM source, read from dcgm-exporter."""
    url: str = setting("http://localhost:9400/metrics", "dcgm-exporter /metrics URL", metavar="URL")
    timeout: Duration = setting(2.0, "timeout for one dcgm-exporter request", lo=0.05, hi=60, metavar="DURATION")
    interval: Duration = setting(1.0, "how often dcgm-exporter is read", lo=0.05, hi=600, metavar="DURATION")


@dataclass(frozen=True)
class ReplayConfig:
    """replay.*: a recorded log replayed as a source."""
    file: str = setting("", "recorded log to replay (nvidia-smi CSV, dmon, dcgm-exporter text)", metavar="FILE")
    format: str = setting("auto", "format of replay.file", choices=("auto", *REPLAY_FORMATS))
    speed: float = setting(1.0, "replay speed, 1 = real time, 0 = as fast as possible", lo=0.0, hi=1e6)
    loop: bool = setting(False, "start again at the end of the file")


@dataclass(frozen=True)
class KubeConfig:
    """kube.*: attribution of GPUs to Kubernetes pods."""
    enabled: AutoBool = setting("auto", "attribute GPUs to pods via the kubelet PodResources API; unset (auto): when its socket exists")
    pod_resources_socket: str = setting("/var/lib/kubelet/pod-resources/kubelet.sock", "kubelet PodResources socket", metavar="PATH")
    api: bool = setting(True, "read pod labels and owners from the Kubernetes API")
    workload_label_keys: tuple[str, ...] = setting(DEFAULT_WORKLOAD_LABEL_KEYS, "pod label keys naming the workload, first present wins", metavar="K1,K2")
    copy_labels: tuple[str, ...] = setting((), "pod labels copied onto metrics (allow-list)", metavar="K1,K2")
    refresh_interval: Duration = setting(10.0, "how often attribution is refreshed", lo=1, hi=3600, metavar="DURATION")


@dataclass(frozen=True)
class SlurmConfig:
    """slurm.*: attribution of GPUs to Slurm jobs."""
    job_map_dir: str = setting("", "directory with one file per GPU index holding the job id", metavar="DIR")


@dataclass(frozen=True, kw_only=True)
class Config:
    """The whole gpulse configuration (frozen). Build it with load_config()."""
    source: str = setting("nvml", "where samples come from", choices=SOURCES)
    node_name: str = setting("", "value of the node label (default: $NODE_NAME, else the hostname)")
    sample_interval: Duration = setting(0.1, "how often the source is polled", lo=0.01, hi=60, metavar="DURATION")
    analysis_interval: Duration = setting(1.0, "how often derived metrics are recomputed", lo=0.1, hi=60, metavar="DURATION")
    analysis_window: Duration = setting(30.0, "window for imbalance, peer deviation and gauges", lo=1, hi=3600, metavar="DURATION")
    idle_threshold: float = setting(threshold("idle_ratio"), "utilisation/activity below this counts as idle (0..1)", lo=0.0, hi=1.0)
    min_stall: Duration = setting(threshold("min_stall_seconds"), "shortest co-inactive stretch counted as a sync-stall episode", lo=0.0, hi=600, metavar="DURATION")
    activity: str = setting("auto", "what counts as real work (auto: SM activity where the source has it, else power-gated)",
                            choices=("auto", "power-gated", "utilization", "sm_active", "gr_engine_active"))
    power_gate: float = setting(threshold("power_gate_ratio"), "power-gated activity: a sample is work only above this fraction of the power reference", lo=0.0, hi=1.0)
    stale_after: Duration = setting(5.0, "no successful poll for this long marks the sampler stale", lo=0.1, hi=3600, metavar="DURATION")
    history: Duration = setting(900.0, "how much per-GPU history the live heatmap page keeps", lo=10, hi=86400, metavar="DURATION")
    web: WebConfig
    log: LogConfig
    sim: SimConfig
    nvml: NvmlConfig
    dcgm: DcgmConfig
    replay: ReplayConfig
    kube: KubeConfig
    slurm: SlurmConfig


@dataclass(frozen=True)
class Field:
    """One setting as the rest of gpulse sees it, derived from the Config dataclasses."""
    key: str                       # dotted name: section.name or name
    parse: Callable[[Any], Any]
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    lo: float | None = None        # inclusive bounds for numbers/durations
    hi: float | None = None
    metavar: str | None = None
    flag: bool = True              # exposed as --key

    def coerce(self, raw: Any) -> Any:
        try:
            return self.value(raw)
        except ValueError as e:
            raise ConfigError(f"{self.key}: {e}") from None

    def value(self, raw: Any) -> Any:
        """The parsed, checked value; ValueError(reason) otherwise."""
        v = self.parse(raw)
        if self.choices is not None and v not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}; got {shown(v)}")
        if isinstance(v, float) and not math.isfinite(v):   # a parser that let one through
            raise ValueError(f"must be finite, got {v}")
        if self.lo is not None and v < self.lo:
            raise ValueError(f"must be >= {self.show(self.lo)}, got {self.show(v)}")
        if self.hi is not None and v > self.hi:
            raise ValueError(f"must be <= {self.show(self.hi)}, got {self.show(v)}")
        return v

    def show(self, v: Any) -> str:
        """A value of this field the way a user writes it (durations as 100ms, 30s)."""
        if self.parse is parse_duration:
            return format_duration(v)
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, tuple):
            return ",".join(v)
        if isinstance(v, float):
            return f"{v:g}"
        return str(v)


def _parser(hint: Any) -> Callable[[Any], Any]:
    if get_origin(hint) is Annotated:
        return hint.__metadata__[0]
    try:
        return _PARSERS[hint]
    except KeyError:
        raise TypeError(f"a setting of type {hint!r} has no parser; add one to _PARSERS") from None


def _derive_fields() -> tuple[tuple[Field, ...], dict[str, type]]:
    """FIELDS in declaration order (the top-level settings, then each section's), and
    {section name: its dataclass}."""
    fields: list[Field] = []
    sections: dict[str, type] = {}

    def walk(cls: type, prefix: str) -> None:
        hints = get_type_hints(cls, include_extras=True)
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            if dataclasses.is_dataclass(hint):
                sections[f.name] = hint
                walk(hint, f.name + ".")
                continue
            s: _Spec = f.metadata[_SPEC]
            fields.append(Field(prefix + f.name, _parser(hint), f.default, s.help, s.choices,
                                s.lo, s.hi, s.metavar, s.flag))

    walk(Config, "")
    return tuple(fields), sections


FIELDS, _SECTION_CLASSES = _derive_fields()
FIELD_BY_KEY = {f.key: f for f in FIELDS}
SECTIONS = sorted(_SECTION_CLASSES)


def env_name(key: str) -> str:
    return "GPULSE_" + key.replace(".", "_").upper()


def flag_name(key: str) -> str:
    return "--" + key.replace("_", "-")


# ---------------------------------------------------------------- reading it


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
        top[sec] = _SECTION_CLASSES[sec](**{k.split(".", 1)[1]: v for k, v in values.items() if k.startswith(sec + ".")})
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


__all__ = ["Config", "ConfigError", "FIELDS", "FIELD_BY_KEY", "load_config", "read_config_file",
           "parse_duration", "parse_listen_address", "config_value", "as_dict",
           "DEFAULT_PORT", "DEFAULT_LISTEN", "SCENARIOS", "env_name", "env_settings", "flag_name",
           "format_duration", "suggest", "env_near_misses"]
