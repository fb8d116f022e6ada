"""XID errors from an NVML event set, counted per GPU entity and XID code.

NVML delivers XIDs only as events. The driver queues them on the event set until
they are read, so the source drains the set once per read, with a zero timeout,
on the sampler's own thread: no thread of its own that wakes to wait (a blocking
wait has to time out every fraction of a second to notice a stop, and each wake-up
cost more CPU than the whole drain), and a count is on /metrics at the next
snapshot, as before. A storm is drained at most MAX_PER_DRAIN events per read;
the rest wait in the driver's queue for the next read.
"""
from __future__ import annotations

import logging
import time

import pynvml

from .calls import DRIVER, UNSUPPORTED
from .discovery import Entity, handle_address

log = logging.getLogger("gpulse.sources.nvml")

MAX_PER_DRAIN = 10000    # events per read: bounds one read's time in a storm
NO_INSTANCE = 0xFFFFFFFF  # event data's gpuInstanceId when not a MIG event
# A failing GPU can fire thousands of XIDs a second: per GPU, the first of an interval
# is logged as it comes and the rest in one line per interval, counted by code.
LOG_INTERVAL = 10.0


class XidWatcher:
    def __init__(self, entities: list[Entity], count_error) -> None:
        self._count_error = count_error
        self._by_handle: dict[int, str] = {}
        self._by_instance: dict[tuple[int, int], str] = {}
        for e in entities:
            if e.parent is None:
                continue
            addr = handle_address(e.parent)
            if e.is_mig:
                self._by_instance[(addr, e.gi)] = e.key
            else:
                self._by_handle[addr] = e.key
        self._physical = [e for e in entities if e.handle is not None and not e.is_mig]
        self._counts: dict[str, dict[tuple[str], float]] = {}
        self._set = None
        self.registered: list[str] = []
        self._quiet_until: dict[str, float] = {}               # per GPU: log no single XID before
        self._held: dict[str, dict[str, int]] = {}             # per GPU: XIDs not logged yet, by code

    def start(self) -> bool:
        """Register every GPU for XID events. False when no GPU can deliver them (no
        permission, unsupported): XIDs are then just absent."""
        try:
            self._set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as e:
            log.warning("XID events unavailable: nvmlEventSetCreate: %s", e)
            self._count_error("nvmlEventSetCreate")
            return False
        for e in self._physical:
            try:
                pynvml.nvmlDeviceRegisterEvents(e.handle, pynvml.nvmlEventTypeXidCriticalError, self._set)
                self.registered.append(e.key)
            except pynvml.NVMLError as err:
                if err.value not in UNSUPPORTED:
                    self._count_error("nvmlDeviceRegisterEvents")
                log.info("GPU %s: no XID events (%s)", e.key, err)
        if not self.registered:
            self._free()
            return False
        return True

    def counts(self, key: str) -> dict[tuple[str], float] | None:
        c = self._counts.get(key)
        return dict(c) if c else None

    def seed(self, counts: dict[str, dict[tuple[str], float]]) -> None:
        """Carry counts over from a previous watcher (after NVML re-initialisation)."""
        for k, c in counts.items():
            self._counts[k] = dict(c)

    def all_counts(self) -> dict[str, dict[tuple[str], float]]:
        return {k: dict(c) for k, c in self._counts.items()}

    def drain(self, now: float) -> None:
        """Count every XID queued since the last drain (at most MAX_PER_DRAIN)."""
        self._summarise(now)
        if self._set is None:
            return
        for _ in range(MAX_PER_DRAIN):
            try:
                data = pynvml.nvmlEventSetWait_v2(self._set, 0)
            except pynvml.NVMLError as e:
                # TIMEOUT: the queue is empty. A driver error shows in the GPU reads
                # that follow, which re-initialise the source and this watcher.
                if e.value != pynvml.NVML_ERROR_TIMEOUT and e.value not in DRIVER:
                    self._count_error("nvmlEventSetWait_v2")
                return
            if not data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                continue
            addr = handle_address(data.device)
            key = None
            if data.gpuInstanceId != NO_INSTANCE:
                key = self._by_instance.get((addr, data.gpuInstanceId))
            key = key or self._by_handle.get(addr)
            if key is None:
                continue
            code = (str(int(data.eventData)),)
            c = self._counts.setdefault(key, {})
            c[code] = c.get(code, 0.0) + 1.0
            self._log(key, code[0], now)

    def _log(self, key: str, code: str, now: float) -> None:
        if now >= self._quiet_until.get(key, 0.0):
            self._summarise(now, key)
            log.warning("GPU %s: XID %s", key, code)
            self._quiet_until[key] = now + LOG_INTERVAL
        else:
            held = self._held.setdefault(key, {})
            held[code] = held.get(code, 0) + 1

    def _summarise(self, now: float, only: str | None = None, final: bool = False) -> None:
        """One line per GPU for the XIDs held back over an interval that has ended."""
        for key in [only] if only is not None else list(self._held):
            held = self._held.get(key)
            if not held or (now < self._quiet_until.get(key, 0.0) and not final):
                continue
            del self._held[key]
            by_code = ", ".join(f"XID {c} x{n}" for c, n in sorted(held.items(), key=lambda kv: int(kv[0])))
            log.warning("GPU %s: %d more XIDs within %gs: %s", key, sum(held.values()), LOG_INTERVAL, by_code)

    def stop(self) -> None:
        self._summarise(time.monotonic(), final=True)     # nothing counted goes unsaid
        self._free()

    def _free(self) -> None:
        if self._set is not None:
            try:
                pynvml.nvmlEventSetFree(self._set)
            except pynvml.NVMLError:
                pass
            self._set = None
