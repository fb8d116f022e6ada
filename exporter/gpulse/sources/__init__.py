"""Where samples come from — one module per source. `make_source` picks by config."""
from __future__ import annotations

from .base import Source, SourceError


def make_source(cfg) -> Source:
    """Build the configured source. Imports lazily so a missing optional piece of one
    source never breaks another."""
    try:
        return _make(cfg)
    except ImportError as e:
        hint = "; try --source sim to run without a GPU" if cfg.source == "nvml" else ""
        raise SourceError(f"source {cfg.source} is not available: {e}{hint}") from None


def _make(cfg) -> Source:
    kind = cfg.source
    if kind == "sim":
        from .sim import SimSource
        return SimSource(cfg)
    if kind == "nvml":
        from .nvml import NvmlSource
        return NvmlSource(cfg)
    if kind == "dcgm":
        from .dcgm import DcgmSource
        return DcgmSource(cfg)
    if kind == "replay":
        from .replay import ReplaySource
        return ReplaySource(cfg)
    raise SourceError(f"unknown source {kind!r}")


__all__ = ["Source", "SourceError", "make_source"]
