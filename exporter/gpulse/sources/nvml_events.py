"""XID errors from an NVML event set, counted per GPU entity and XID code.

NVML delivers XIDs only as events, so a thread of its own blocks in
nvmlEventSetWait_v2 (with a timeout, so it notices when to stop). The poll loop
just copies the counts; it never waits on events.
"""
from __future__ import annotations

import logging
import threading

import pynvml

from .nvml_calls import DRIVER, UNSUPPORTED
from .nvml_discovery import Entity, handle_address

log = logging.getLogger("gpulse.sources.nvml")

WAIT_MS = 500            # how long one wait blocks; bounds how long stop() takes
ERROR_PAUSE = 1.0        # after an unexpected error, before waiting again
NO_INSTANCE = 0xFFFFFFFF  # event data's gpuInstanceId when not a MIG event


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
        self._lock = threading.Lock()
        self._counts: dict[str, dict[tuple[str], float]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._set = None
        self.registered: list[str] = []

    def start(self) -> bool:
        """Register every GPU for XID events and start the thread. False when no GPU
        can deliver them (no permission, unsupported): XIDs are then just absent."""
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
        self._thread = threading.Thread(target=self._run, name="gpulse-nvml-xid", daemon=True)
        self._thread.start()
        return True

    def counts(self, key: str) -> dict[tuple[str], float] | None:
        with self._lock:
            c = self._counts.get(key)
            return dict(c) if c else None

    def seed(self, counts: dict[str, dict[tuple[str], float]]) -> None:
        """Carry counts over from a previous watcher (after NVML re-initialisation)."""
        with self._lock:
            for k, c in counts.items():
                self._counts[k] = dict(c)

    def all_counts(self) -> dict[str, dict[tuple[str], float]]:
        with self._lock:
            return {k: dict(c) for k, c in self._counts.items()}

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = pynvml.nvmlEventSetWait_v2(self._set, WAIT_MS)
            except pynvml.NVMLError as e:
                if e.value == pynvml.NVML_ERROR_TIMEOUT:
                    continue
                if e.value in DRIVER:       # the source re-initialises and starts a new watcher
                    return
                self._count_error("nvmlEventSetWait_v2")
                self._stop.wait(ERROR_PAUSE)
                continue
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
            with self._lock:
                c = self._counts.setdefault(key, {})
                c[code] = c.get(code, 0.0) + 1.0
            log.warning("GPU %s: XID %s", key, code[0])

    def stop(self) -> None:
        self._stop.set()
        t = self._thread
        if t is not None:
            t.join(WAIT_MS / 1000 * 2 + 0.5)
            if t.is_alive():       # stuck in the driver: leave the set alone
                return
        self._free()

    def _free(self) -> None:
        if self._set is not None:
            try:
                pynvml.nvmlEventSetFree(self._set)
            except pynvml.NVMLError:
                pass
            self._set = None
