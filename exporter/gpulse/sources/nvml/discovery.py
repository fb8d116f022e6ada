"""Which GPU entities NVML shows: whole GPUs, and each MIG instance as its own entity.

A MIG instance gets the `gpu` label "<parent index>/<GPU instance id>" (e.g. "0/1"):
stable across restarts as long as the MIG layout is, sortable under its parent, and
distinct from a whole-GPU index. The parent stays an entity too, because power,
temperature, clocks, ECC, PCIe/NVLink and XIDs belong to the physical device.
"""
from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass

import pynvml

from ...model import DeviceInfo
from .calls import Caller, GpuLost, describe

_MIG_NAME = re.compile(r"\bMIG\s+(\S+)\s*$")


@dataclass
class Entity:
    """One reportable GPU entity and the handles needed to read it."""

    info: DeviceInfo
    index: int                     # NVML index of the physical GPU
    handle: object | None          # this entity's handle (None: not reachable at discovery)
    parent: object | None          # the physical GPU's handle (== handle for a whole GPU)
    gi: int | None = None          # MIG GPU instance id
    mig_enabled: bool = False      # a whole GPU in MIG mode (no utilisation of its own)
    error: str | None = None       # why `handle` is None

    @property
    def key(self) -> str:
        return self.info.gpu

    @property
    def is_mig(self) -> bool:
        return self.gi is not None


def handle_address(h: object) -> int | None:
    """The driver's opaque device pointer, to match event data back to a GPU."""
    return ctypes.cast(h, ctypes.c_void_p).value


def _text(v: object) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def cuda_version_text(v: int | None) -> str:
    """nvmlSystemGetCudaDriverVersion's 12040 -> '12.4'."""
    if not v:
        return ""
    return f"{v // 1000}.{v % 1000 // 10}"


def mig_profile(name: str, attrs: object | None) -> str:
    """'NVIDIA H100 80GB HBM3 MIG 3g.40gb' -> '3g.40gb'; else from slice count and memory."""
    m = _MIG_NAME.search(name)
    if m:
        return m.group(1)
    if attrs is not None and getattr(attrs, "gpuInstanceSliceCount", 0):
        return f"{attrs.gpuInstanceSliceCount}g.{round(attrs.memorySizeMB / 1024)}gb"
    return ""


def discover(caller: Caller) -> list[Entity]:
    """Enumerate GPUs and MIG instances. A GPU that cannot be opened still becomes
    an entity (without a handle) so it is reported down rather than vanishing.
    DriverGone and NVMLError from the system-wide calls pass through."""
    driver = _text(caller.call("system", pynvml.nvmlSystemGetDriverVersion) or "")
    cuda = cuda_version_text(caller.call("system", pynvml.nvmlSystemGetCudaDriverVersion))
    count = pynvml.nvmlDeviceGetCount()
    out: list[Entity] = []
    for i in range(count):
        try:
            out.extend(discover_index(caller, i, driver, cuda))
        except GpuLost as e:
            out.append(Entity(DeviceInfo(gpu=str(i), driver=driver, cuda_version=cuda), i, None, None,
                              error=str(e)))
    return out


def discover_index(caller: Caller, i: int, driver: str, cuda: str) -> list[Entity]:
    """The entities of physical GPU `i` (itself first, then its MIG instances).
    Raises GpuLost when the GPU cannot be opened."""
    key = str(i)
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
    except pynvml.NVMLError as e:
        caller.fail(key, "nvmlDeviceGetHandleByIndex", e)   # raises for lost / driver gone
        raise GpuLost(describe("nvmlDeviceGetHandleByIndex", e)) from None
    uuid = _text(caller.call(key, pynvml.nvmlDeviceGetUUID, h) or "")
    name = _text(caller.call(key, pynvml.nvmlDeviceGetName, h) or "")
    pci = caller.call(key, pynvml.nvmlDeviceGetPciInfo_v3, h)
    mode = caller.call(key, pynvml.nvmlDeviceGetMigMode, h)
    mig_on = bool(mode and mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE)
    info = DeviceInfo(gpu=key, uuid=uuid, model=name, pci_bus_id=_text(pci.busId) if pci else "",
                      driver=driver, cuda_version=cuda)
    out = [Entity(info, i, h, h, mig_enabled=mig_on)]
    if mig_on:
        out.extend(_mig_entities(caller, i, h, info))
    return out


def _mig_entities(caller: Caller, i: int, parent: object, pinfo: DeviceInfo) -> list[Entity]:
    out = []
    slots = caller.call(pinfo.gpu, pynvml.nvmlDeviceGetMaxMigDeviceCount, parent) or 0
    for j in range(slots):
        try:
            mh = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, j)
        except pynvml.NVMLError as e:
            if e.value == pynvml.NVML_ERROR_NOT_FOUND:   # an empty slot
                continue
            caller.fail(pinfo.gpu, "nvmlDeviceGetMigDeviceHandleByIndex", e)
            continue
        gi = caller.call(pinfo.gpu, pynvml.nvmlDeviceGetGpuInstanceId, mh)
        if gi is None:
            continue
        key = f"{i}/{gi}"
        name = _text(caller.call(key, pynvml.nvmlDeviceGetName, mh) or "")
        profile = mig_profile(name, None)
        if not profile:
            profile = mig_profile("", caller.call(key, pynvml.nvmlDeviceGetAttributes_v2, mh))
        out.append(Entity(DeviceInfo(
            gpu=key, uuid=_text(caller.call(key, pynvml.nvmlDeviceGetUUID, mh) or ""),
            model=pinfo.model, pci_bus_id=pinfo.pci_bus_id, driver=pinfo.driver,
            cuda_version=pinfo.cuda_version, mig_profile=profile, gpu_instance=str(gi),
            parent_uuid=pinfo.uuid), i, mh, parent, gi=gi))
    return out
