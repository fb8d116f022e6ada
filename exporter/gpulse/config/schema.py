"""The one table of settings: the frozen Config dataclasses, their defaults, help,
choices and bounds, and what is derived from them (FIELDS, the flag and GPULSE_*
names).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Iterable, get_origin, get_type_hints

from ..analysis.thresholds import value as threshold
from ..logsetup import FORMATTERS as LOG_FORMATS, LEVELS as LOG_LEVELS
from ..safeyaml import shown
from ..sources import SOURCES
from ..sources.recorded import FORMATS as REPLAY_FORMATS
from ..sources.sim import SCENARIOS as SIM_SCENARIOS
from .values import (ConfigError, format_duration, parse_auto_bool, parse_bool, parse_duration, parse_float,
                     parse_int, parse_list, parse_str)

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



#
# The Config dataclasses below are the one table of settings. A setting's annotation
# says what its value is and so how a raw value is read: str, int, float, bool,
# tuple[str, ...] (a list, or "a,b" in a flag or variable), Duration (seconds, written
# 100ms/30s/5m) and AutoBool (true, false or "auto"); setting() adds its default, help
# text, choices and bounds. FIELDS, the flags, the GPULSE_* names, the YAML keys, the
# Helm values schema and the docs are all derived from them.

Duration = Annotated[float, parse_duration]
AutoBool = Annotated[bool | str, parse_auto_bool]

# how a raw value is read, by the type of the setting (Annotated types carry their own)
_PARSERS: dict[Any, Callable[[Any], Any]] = {
    str: parse_str, int: parse_int, float: parse_float, bool: parse_bool,
    tuple[str, ...]: parse_list,
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


FIELDS, SECTION_CLASSES = _derive_fields()
FIELD_BY_KEY = {f.key: f for f in FIELDS}
SECTIONS = sorted(SECTION_CLASSES)


def env_name(key: str) -> str:
    return "GPULSE_" + key.replace(".", "_").upper()


def flag_name(key: str) -> str:
    return "--" + key.replace("_", "-")

