"""GPM (GPU Performance Monitoring, Hopper and newer): SM activity without DCGM.

GPM metrics are computed between two samples the caller takes, so each entity keeps
the previous sample and every read yields the mean over the time since then. MIG
instances are sampled through their parent with nvmlGpmMigSampleGet.
"""
from __future__ import annotations

import pynvml

from .calls import Caller
from .discovery import Entity

_METRICS = (pynvml.NVML_GPM_METRIC_SM_UTIL, pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL)


class GpmReader:
    def __init__(self, caller: Caller) -> None:
        self.caller = caller
        self._prev: dict[str, object] = {}     # entity key -> previous sample
        self._spare: dict[str, object] = {}    # entity key -> sample to fill next

    def supported(self, e: Entity) -> bool:
        if e.parent is None:
            return False
        s = self.caller.call(e.key, pynvml.nvmlGpmQueryDeviceSupport, e.parent)
        return bool(s and s.isSupportedDevice)

    def read(self, e: Entity) -> tuple[float, float] | None:
        """(SM activity, graphics-engine activity) as 0..1 since the previous read;
        None on the first read or when GPM cannot answer. GpuLost/DriverGone propagate."""
        key = e.key
        cur = self._spare.pop(key, None)
        if cur is None:
            cur = self.caller.call(key, pynvml.nvmlGpmSampleAlloc)
            if cur is None:
                return None
        if e.is_mig:
            ok = self.caller.call(key, pynvml.nvmlGpmMigSampleGet, e.parent, e.gi, cur)
        else:
            ok = self.caller.call(key, pynvml.nvmlGpmSampleGet, e.parent, cur)
        if ok is None:
            self._spare[key] = cur
            return None
        prev = self._prev.get(key)
        self._prev[key] = cur
        if prev is None:
            return None
        self._spare[key] = prev
        mg = pynvml.c_nvmlGpmMetricsGet_t()
        mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(_METRICS)
        mg.sample1 = prev
        mg.sample2 = cur
        for i, m in enumerate(_METRICS):
            mg.metrics[i].metricId = m
        if self.caller.call(key, pynvml.nvmlGpmMetricsGet, mg) is None:
            return None
        vals = []
        for i in range(len(_METRICS)):
            m = mg.metrics[i]
            if m.nvmlReturn != pynvml.NVML_SUCCESS:
                return None
            vals.append(min(1.0, max(0.0, m.value / 100.0)))
        return vals[0], vals[1]

    def reset(self, key: str) -> None:
        """Forget an entity's previous sample (after it was down: the interval is void)."""
        s = self._prev.pop(key, None)
        if s is None:
            return
        if key in self._spare:
            try:
                pynvml.nvmlGpmSampleFree(s)
            except pynvml.NVMLError:
                pass
        else:
            self._spare[key] = s

    def close(self) -> None:
        for d in (self._prev, self._spare):
            for s in d.values():
                try:
                    pynvml.nvmlGpmSampleFree(s)
                except pynvml.NVMLError:
                    pass
            d.clear()
