"""Guarded NVML calls: the one place that decides what an NVML error means.

    NOT_SUPPORTED / FUNCTION_NOT_FOUND / NO_PERMISSION
                 the device (or driver) cannot answer this call: remembered per
                 entity and never asked again, so a missing feature costs nothing
                 per cycle.
    GPU_IS_LOST / RESET_REQUIRED / GPU_NOT_FOUND
                 this GPU fell off (XID 79 and friends): GpuLost; the caller marks
                 it down and the other GPUs keep reporting.
    UNINITIALIZED / DRIVER_NOT_LOADED / LIB_RM_VERSION_MISMATCH
                 the library or driver went away underneath us: DriverGone; the
                 source re-initialises NVML with backoff.
    anything else
                 a transient failure: counted by call name, the value is missing
                 this cycle.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import pynvml

UNSUPPORTED = frozenset({pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                         pynvml.NVML_ERROR_NO_PERMISSION})
LOST = frozenset({pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED,
                  getattr(pynvml, "NVML_ERROR_GPU_NOT_FOUND", 28)})
DRIVER = frozenset({pynvml.NVML_ERROR_UNINITIALIZED, pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
                    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH})


class GpuLost(Exception):
    """One GPU stopped answering; str() is the one-line reason."""


class DriverGone(Exception):
    """NVML as a whole stopped working; str() is the one-line reason."""


def describe(call: str, err: pynvml.NVMLError) -> str:
    return f"{call}: {err} (NVML error {err.value})"


class Caller:
    """Calls NVML functions for one source, remembering what each entity lacks and
    counting failures by call name (exported as gpulse_source_errors_total)."""

    def __init__(self) -> None:
        self.unsupported: set[tuple[str, str]] = set()
        self.errors: dict[str, int] = {}
        self._lock = threading.Lock()   # the XID thread counts its errors here too

    def supported(self, key: str, name: str) -> bool:
        return (key, name) not in self.unsupported

    def forget(self, key: str) -> None:
        """Drop what was remembered about an entity (after a driver reload)."""
        self.unsupported = {u for u in self.unsupported if u[0] != key}

    def count(self, name: str) -> None:
        with self._lock:
            self.errors[name] = self.errors.get(name, 0) + 1

    def drain_errors(self) -> dict[str, int]:
        with self._lock:
            out, self.errors = self.errors, {}
        return out

    def call(self, key: str, fn: Callable[..., Any], *args: Any, name: str | None = None) -> Any:
        """fn(*args), or None when the entity cannot answer it (now or ever).
        Raises GpuLost / DriverGone as described in the module docstring."""
        name = name or fn.__name__
        if (key, name) in self.unsupported:
            return None
        try:
            return fn(*args)
        except pynvml.NVMLError as e:
            self.fail(key, name, e)
            return None

    def fail(self, key: str, name: str, e: pynvml.NVMLError) -> None:
        """Classify an NVMLError raised by `name` for entity `key`."""
        code = e.value
        if code in UNSUPPORTED:
            if code == pynvml.NVML_ERROR_NO_PERMISSION:
                self.count(name)
            self.unsupported.add((key, name))
            return
        self.count(name)
        if code in LOST:
            raise GpuLost(describe(name, e)) from None
        if code in DRIVER:
            raise DriverGone(describe(name, e)) from None
