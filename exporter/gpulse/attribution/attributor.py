"""The attribution cache: refreshed in its own thread, read without blocking.

Scrapes and analysis ticks only ever read `self._map`, a dict that the refresh
thread replaces whole (a single reference assignment), so a slow kubelet or API
server delays the next refresh, never a reader.
"""
from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from typing import Protocol

from ..model import ATTRIBUTION_LABELS, DeviceInfo
from .devices import entity_keys
from .errors import AttributionFailure

log = logging.getLogger("gpulse.attribution")

# A kubelet restart takes the socket away for a few seconds; keeping the last map
# that long avoids dropping and re-creating every attributed series.
STALE_REFRESHES = 3

# Label values come from whoever created the pod: Kubernetes checks names to 253
# characters (a DNS subdomain) but an ownerReference name only for being non-empty,
# and a tenant's workload label lands on every series of its GPUs and in every alert
# about it. Longer values keep their first MAX_LABEL_VALUE characters and gain a
# short hash of the whole, so two long names stay two workloads; no valid
# Kubernetes name is touched.
MAX_LABEL_VALUE = 253
HASH_CHARS = 8
_SURROGATE = re.compile("[\ud800-\udfff]")    # only ever alone in a str: no UTF-8 for them


def label_value(value: str) -> tuple[str, bool]:
    """(value fit for a label, whether it had to be rewritten): text that is not
    valid Unicode (a lone surrogate from a non-conformant API) gets U+FFFD, a value
    over MAX_LABEL_VALUE characters is cut and tagged with a hash of the whole."""
    value, fixed = _SURROGATE.subn("\ufffd", value)
    if len(value) <= MAX_LABEL_VALUE:
        return value, fixed > 0
    digest = hashlib.sha256(value.encode("utf-8")).hexdigest()[:HASH_CHARS]
    return f"{value[:MAX_LABEL_VALUE]}~{digest}", True


class Mapper(Protocol):
    name: str

    def refresh(self) -> dict[str, dict[str, str]]: ...

    def close(self) -> None: ...


class Attributor:
    """GPU entity -> {namespace, pod, container, workload, label_*}."""

    def __init__(self, mappers: list[Mapper], refresh_interval: float,
                 label_names: tuple[str, ...] = ATTRIBUTION_LABELS,
                 reasons: tuple[str, ...] = (), clock=time.monotonic):
        self.clock = clock
        self.mappers = mappers
        self.refresh_interval = refresh_interval
        self.label_names = label_names
        self._map: dict[str, dict[str, str]] = {}
        self._parts: dict[str, dict[str, dict[str, str]]] = {}
        self._last_ok: dict[str, float] = {}
        self._part_up: dict[str, bool] = {m.name: False for m in mappers}
        self._failing: dict[str, str] = {}
        self._lock = threading.Lock()
        self._errors: dict[str, int] = {r: 0 for r in reasons}
        self.rewritten = 0           # distinct label values of the current map label_value() changed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.refreshes = 0

    # ------------------------------------------------------------ readers (any thread)

    def lookup(self, device: DeviceInfo) -> dict[str, str] | None:
        """Attribution of one GPU entity from the cached map, or None. Never blocks."""
        current = self._map
        for key in entity_keys(device):
            hit = current.get(key)
            if hit is not None:
                return dict(hit)
        return None

    def health(self) -> tuple[bool, dict[str, int], int]:
        """(every enabled part's last refresh worked, errors so far by reason, distinct
        label values of the current map rewritten to fit: too long or invalid text)."""
        with self._lock:
            return all(self._part_up.values()), dict(self._errors), self.rewritten

    # ------------------------------------------------------------ the refresh thread

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpulse-attribution", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            # A refresh stuck on a hung API server must not hold up shutdown: the
            # thread is a daemon, and closing the clients below cancels its call.
            self._thread.join(timeout=2)
            self._thread = None
        for m in self.mappers:
            m.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh_once()
            except Exception as e:  # a bug in one refresh must not end attribution for good
                log.error("attribution refresh failed unexpectedly: %s: %s", type(e).__name__, e)
                log.debug("attribution refresh failure", exc_info=True)
            self._stop.wait(self.refresh_interval)

    def refresh_once(self) -> None:
        """Refresh every part once and publish the merged map."""
        now = self.clock()
        for m in self.mappers:
            try:
                part = m.refresh()
            except AttributionFailure as e:
                self._failed(m.name, e)
                if now - self._last_ok.get(m.name, float("-inf")) > STALE_REFRESHES * self.refresh_interval:
                    self._parts.pop(m.name, None)
                continue
            self._parts[m.name] = part
            self._last_ok[m.name] = now
            partial = getattr(m, "partial_failure", None)
            if partial is not None:
                self._failed(m.name, partial)
            else:
                self._recovered(m.name)
        merged: dict[str, dict[str, str]] = {}
        # Earlier mappers win: Kubernetes assignments before the Slurm job map.
        for m in reversed(self.mappers):
            merged.update(self._parts.get(m.name, {}))
        empty = {n: "" for n in self.label_names}
        # each distinct value is bounded (and counted) once, however many GPUs share it
        values: dict[str, tuple[str, bool]] = {}
        for v in merged.values():
            for value in v.values():
                if value not in values:
                    values[value] = label_value(value)
        self._map = {k: {**empty, **{n: values[x][0] for n, x in v.items()}} for k, v in merged.items()}
        with self._lock:
            self.rewritten = sum(changed for _, changed in values.values())
        self.refreshes += 1

    def _failed(self, part: str, e: AttributionFailure) -> None:
        with self._lock:
            self._errors[e.reason] = self._errors.get(e.reason, 0) + 1
            self._part_up[part] = False
        if self._failing.get(part) != e.reason:
            # One line per change of state, not one per refresh.
            log.warning("attribution (%s) not available, metrics continue without it: %s", part, e)
            self._failing[part] = e.reason

    def _recovered(self, part: str) -> None:
        with self._lock:
            self._part_up[part] = True
        if self._failing.pop(part, None) is not None:
            log.info("attribution (%s) available again", part)
