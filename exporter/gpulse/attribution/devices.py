"""Matching the device IDs a scheduler hands out to the GPU entities gpulse reads.

Schedulers name GPUs in several ways, depending on the device plugin and its
settings; all of them are reduced to a few normalised keys:

    GPU-5f3c...            whole GPU by UUID (NVIDIA device plugin, default)   uuid:gpu-5f3c...
    GPU-5f3c...::2         the same, time-sliced replica 2 (sharing)           uuid:gpu-5f3c...
    MIG-8d2e...            MIG instance by UUID (R470+ drivers)                uuid:mig-8d2e...
    MIG-GPU-5f3c.../3/0    MIG instance, old UUID form parent/GI/CI            mig:gpu-5f3c.../3
    3, nvidia3, /dev/nvidia3   whole GPU by index (index strategy, device names)   index:3
    gpu-3 (DRA device name)    whole GPU by index                                 index:3

An entity (DeviceInfo) yields the keys it can be found under; the first key a
scheduler assigned wins. A MIG instance is never matched by its parent's index or
UUID: the other instances of that GPU may belong to other pods.
"""
from __future__ import annotations

import re

from ..model import DeviceInfo

_INDEX_RE = re.compile(r"^(?:/dev/)?(?:nvidia|gpu-)?(\d+)$")
_OLD_MIG_RE = re.compile(r"^mig-(gpu-[0-9a-f-]+)/(\d+)/(\d+)$")


def device_id_keys(device_id: str) -> list[str]:
    """Normalised keys for one device ID from the kubelet or a job map (may be empty
    for a form gpulse does not know, which then simply attributes nothing)."""
    s = device_id.strip().lower()
    # Time-sliced / MPS replicas: the NVIDIA device plugin appends "::<replica>".
    s = s.split("::", 1)[0]
    if not s:
        return []
    m = _OLD_MIG_RE.match(s)
    if m:
        return [f"mig:{m.group(1)}/{_num(m.group(2))}"]
    if s.startswith(("gpu-", "mig-")) and not _INDEX_RE.match(s):
        return [f"uuid:{s}"]
    m = _INDEX_RE.match(s)
    if m:
        return [f"index:{int(m.group(1))}"]
    return []


def is_mig(device: DeviceInfo) -> bool:
    return bool(device.mig_profile or device.gpu_instance or "/" in device.gpu
                or device.uuid.upper().startswith("MIG-"))


def entity_keys(device: DeviceInfo) -> list[str]:
    """Keys a GPU entity can be found under, most specific first."""
    keys: list[str] = []
    if device.uuid:
        keys.append(f"uuid:{device.uuid.strip().lower()}")
    if is_mig(device):
        if device.parent_uuid and device.gpu_instance:
            keys.append(f"mig:{device.parent_uuid.strip().lower()}/{_num(device.gpu_instance)}")
    elif device.gpu.strip().isdecimal():
        keys.append(f"index:{_num(device.gpu)}")
    return keys


def _num(s: str) -> str:
    # "03" and "3" name the same instance; anything else is kept as written.
    s = s.strip()
    return str(int(s)) if s.isdecimal() else s
