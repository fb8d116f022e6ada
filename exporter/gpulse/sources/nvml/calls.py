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

import ctypes
import struct
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

    def supported(self, key: str, name: str) -> bool:
        return (key, name) not in self.unsupported

    def forget(self, key: str) -> None:
        """Drop what was remembered about an entity (after a driver reload)."""
        self.unsupported = {u for u in self.unsupported if u[0] != key}

    def count(self, name: str) -> None:
        self.errors[name] = self.errors.get(name, 0) + 1

    def drain_errors(self) -> dict[str, int]:
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


class Direct:
    """The NVML calls made every second, straight through the library's function
    pointers (resolved once, by pynvml, which loaded the library) into buffers kept
    between calls. pynvml's wrappers allocate per call (nvmlDeviceGetSamples asks the
    driver twice, once for the size, then hands back a ctypes structure per sample;
    the field batch fills its ids in per call) and the results are read member by
    member through ctypes objects; on the fake driver that costs 2-20x the C calls
    themselves (bench/nvml_profile.py). Failures raise pynvml.NVMLError exactly as the
    wrappers do, so Caller classifies them the same way. One instance per polling
    thread: the buffers are shared by its GPUs."""

    FIRST_CAPACITY = 64    # samples per read; ~6 arrive per second, the driver keeps ~120

    def __init__(self) -> None:
        self._fns: dict[str, Any] = {}
        self._vtype = ctypes.c_int()
        self._count = ctypes.c_uint()
        self._since = ctypes.c_ulonglong()
        self._u64 = ctypes.c_ulonglong()
        self._mem = _Memory()
        self._grow(self.FIRST_CAPACITY)

    def fn(self, name: str) -> Any:
        f = self._fns.get(name)
        if f is None:   # raises NVMLError(FUNCTION_NOT_FOUND) on a driver without it
            f = self._fns[name] = pynvml._nvmlGetFunctionPointer(name)
        return f

    def _grow(self, capacity: int) -> None:
        self._cap = capacity
        # nvmlSample_t is {unsigned long long timeStamp; nvmlValue_t sampleValue}: two
        # 8-byte words, read back in bulk through typed views of the one buffer
        self._buf = (ctypes.c_ulonglong * (2 * capacity))()
        self._words = memoryview(self._buf).cast("B").cast("Q")

    def samples(self, handle: Any, kind: int, since_us: int) -> tuple[int, list[tuple[int, float]]]:
        """nvmlDeviceGetSamples in one driver call: (value type, [(µs, value)]) sorted."""
        fn = self.fn("nvmlDeviceGetSamples")
        self._since.value = since_us
        while True:
            self._count.value = self._cap
            ret = fn(handle, kind, self._since, ctypes.byref(self._vtype), ctypes.byref(self._count), self._buf)
            n = self._count.value
            # a full buffer may have left samples out; drivers that say so return
            # INSUFFICIENT_SIZE instead: read again into a larger one
            if ret == pynvml.NVML_ERROR_INSUFFICIENT_SIZE or (ret == pynvml.NVML_SUCCESS and n >= self._cap):
                self._grow(max(4 * self._cap, n + 1))
                continue
            if ret != pynvml.NVML_SUCCESS:
                raise pynvml.NVMLError(ret)
            break
        vtype = self._vtype.value
        words = self._words[0:2 * n].tolist()
        bits = words[1::2]
        if vtype == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:     # what drivers give: no call per value
            vals: list = [b & 0xFFFFFFFF for b in bits]
        elif vtype in (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG):
            vals = bits
        else:
            conv = value_of(vtype)
            vals = [conv(b) for b in bits]
        out = list(zip(words[0::2], vals))
        out.sort()
        return vtype, out

    def field_values(self, handle: Any, buf: Any) -> list[tuple[int, int, float | None]]:
        """nvmlDeviceGetFieldValues into `buf` (nvmlFieldValue_t[], ids filled in: the
        driver rewrites the rest): (field id, nvmlReturn, value or None) per entry,
        unpacked in one pass rather than as a ctypes object per member."""
        ret = self.fn("nvmlDeviceGetFieldValues")(handle, ctypes.c_int32(len(buf)), buf)
        if ret != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(ret)
        ok = pynvml.NVML_SUCCESS
        # through a byte view: iter_unpack on the ctypes array itself parses its format each time
        return [(fid, rc, _CONVERT.get(vtype, float)(bits) if rc == ok else None)
                for fid, vtype, rc, bits in _FIELD_ROW.iter_unpack(memoryview(buf).cast("B"))]

    def memory(self, handle: Any) -> tuple[int, int]:
        """nvmlDeviceGetMemoryInfo (v1): (total, used) bytes."""
        ret = self.fn("nvmlDeviceGetMemoryInfo")(handle, ctypes.byref(self._mem))
        if ret != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(ret)
        return self._mem.total, self._mem.used

    def u64(self, name: str, handle: Any) -> int:
        """A call of the form fn(device, unsigned long long *), e.g. the clock-event reasons."""
        ret = self.fn(name)(handle, ctypes.byref(self._u64))
        if ret != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(ret)
        return self._u64.value


def _row(ctype: Any, members: dict[str, str]) -> struct.Struct:
    """A struct.Struct reading these members of a ctypes structure, in offset order,
    at the offsets pynvml's own definition gives them."""
    fmt, pos = "=", 0
    for name in sorted(members, key=lambda m: getattr(ctype, m).offset):
        off = getattr(ctype, name).offset
        fmt += f"{off - pos}x{members[name]}" if off > pos else members[name]
        pos = off + struct.calcsize("=" + members[name])
    return struct.Struct(fmt + f"{ctypes.sizeof(ctype) - pos}x")


# nvmlFieldValue_t -> (fieldId, valueType, nvmlReturn, value as its 8 raw bytes)
_FIELD_ROW = _row(pynvml.c_nvmlFieldValue_t,
                  {"fieldId": "I", "valueType": "I", "nvmlReturn": "I", "value": "Q"})
_DOUBLE = struct.Struct("=d")
_BITS = struct.Struct("=Q")


def _signed(width: int) -> Callable[[int], float]:
    top, mask = 1 << (width - 1), (1 << width) - 1
    return lambda b: float(((b & mask) ^ top) - top)


# nvmlValue_t member named by its type code, from the union's 8 bytes (little-endian:
# a 32-bit member is the low word; the driver may leave the high word unwritten)
_CONVERT: dict[int, Callable[[int], float]] = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: lambda b: _DOUBLE.unpack(_BITS.pack(b))[0],
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: lambda b: float(b & 0xFFFFFFFF),
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: float,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: float,
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: _signed(64),
    getattr(pynvml, "NVML_VALUE_TYPE_SIGNED_INT", 5): _signed(32),
}


def value_of(vtype: int) -> Callable[[int], float]:
    """The converter for an nvmlValueType_t (unknown types read as unsigned 64-bit)."""
    return _CONVERT.get(vtype, float)


class _Memory(ctypes.Structure):
    """nvmlMemory_t, without pynvml's per-attribute string conversion."""
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
