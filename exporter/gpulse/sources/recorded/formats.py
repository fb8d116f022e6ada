"""The recorded log formats, named once: --replay.format and the report's
--input-format choices, detection and the readers all come from FORMATS."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from . import dcgm, dmon, smi_csv, smi_q
from .records import Problems, Record, RunFacts


@dataclass(frozen=True)
class Format:
    what: str                                    # how an error message names it
    sniff: Callable[[list[str]], bool]           # the first meaningful lines are this format
    read: Callable[[Iterable[str], Problems, float, RunFacts], Iterator[Record]]
    zoneless: bool                               # its timestamps carry no zone (read as UTC)


# name -> format, in the order choices list them; the sniffs exclude each other
FORMATS: dict[str, Format] = {
    "nvidia-smi-csv": Format("nvidia-smi --query-gpu CSV", smi_csv.sniff, smi_csv.read, zoneless=True),
    "dmon": Format("nvidia-smi dmon", dmon.sniff, dmon.read, zoneless=True),
    "nvidia-smi-q": Format("nvidia-smi -q", smi_q.sniff, smi_q.read, zoneless=True),
    "dcgm": Format("dcgm-exporter output", dcgm.sniff, dcgm.read, zoneless=False),
}


def detect_format(lines: list[str]) -> str | None:
    """The format of a log from its first meaningful lines; None when unknown."""
    meaningful = [ln.strip() for ln in lines[:50] if ln.strip()]
    if not meaningful:
        return None
    return next((name for name, f in FORMATS.items() if f.sniff(meaningful)), None)


def expected() -> str:
    """'A, B, C or D': what a log may be, for the message about one that is none."""
    what = [f.what for f in FORMATS.values()]
    return ", ".join(what[:-1]) + " or " + what[-1]
