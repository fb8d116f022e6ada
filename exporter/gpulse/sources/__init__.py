"""Where samples come from — one module or package per source. `make_source` picks by config."""
from __future__ import annotations

import importlib

from .base import Source, SourceError

# The one list of sources: --source choices and make_source both read it.
SOURCES = {
    "nvml": ("nvml", "NvmlSource"),
    "dcgm": ("dcgm", "DcgmSource"),
    "sim": ("sim", "SimSource"),
    "replay": ("replay", "ReplaySource"),
}


def make_source(cfg) -> Source:
    """Build the configured source. Imports lazily so a missing optional piece of one
    source never breaks another."""
    try:
        return _make(cfg)
    except ImportError as e:
        hint = "; try --source sim to run without a GPU" if cfg.source == "nvml" else ""
        raise SourceError(f"source {cfg.source} is not available: {e}{hint}") from None


def _make(cfg) -> Source:
    if cfg.source not in SOURCES:
        raise SourceError(f"unknown source {cfg.source!r}")
    module, cls = SOURCES[cfg.source]
    return getattr(importlib.import_module(f".{module}", __name__), cls)(cfg)


__all__ = ["Source", "SourceError", "SOURCES", "make_source"]
