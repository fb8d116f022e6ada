"""NVIDIA GPUs through NVML: the live source (source.py), the calls that go straight to
the library's function pointers (calls.py), GPU and MIG discovery (discovery.py), the
XID event queue (events.py) and GPM metrics (gpm.py)."""
from .source import NvmlSource

__all__ = ["NvmlSource"]
