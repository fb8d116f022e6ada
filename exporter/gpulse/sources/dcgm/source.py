"""DCGM, read from a running dcgm-exporter's /metrics endpoint.

Most Kubernetes GPU nodes already run NVIDIA's dcgm-exporter (GPU Operator). Reading
it, rather than DCGM directly, needs no DCGM library in gpulse and no second
profiling session (DCGM allows one). Its profiling fields are what matter here:
DCGM_FI_PROF_SM_ACTIVE tells a computing GPU from one spinning in an NCCL wait, which
utilisation cannot.

dcgm-exporter refreshes its values every `-c` milliseconds (30 s by default in older
releases); run it with `-c 1000` or less, and set --dcgm.interval to match, or gpulse
integrates the same value many times.

The field map (fields.py) is shared with replay of recorded dcgm-exporter output
(sources/recorded/dcgm.py), so a live node and a log of one look the same downstream.
"""
from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlparse

from ...model import DeviceInfo, PollResult, Reading, gpu_sort_key
from .. import bounded
from ..base import Source, SourceError
from .fields import FIELDS, DcgmMapper, parse_exposition

log = logging.getLogger("gpulse.dcgm")


class _FetchError(Exception):
    pass


class DcgmSource(Source):
    """Polls dcgm-exporter at --dcgm.interval; between fetches, polls repeat the last
    state without new samples. A down or slow endpoint marks every GPU down with one
    error line and never raises."""

    name = "dcgm"
    MAX_BODY = 64 * 2 ** 20
    # One node has at most a few dozen GPU entities (16 GPUs x 7 MIG instances); an
    # answer naming more is broken or hostile, and each would be a dozen series.
    MAX_ENTITIES = 256
    # An entity missing from the answers this long is gone (a MIG reconfiguration, a
    # renamed host, a GPU removed): forgotten, its series leave /metrics.
    EXPIRE_S = 300.0

    def __init__(self, cfg: Any):
        self.url = cfg.dcgm.url
        self.timeout = float(cfg.dcgm.timeout)
        self.interval = float(cfg.dcgm.interval)
        self.sample_spacing = self.interval
        self.has_sm_active = False
        self._session: Any = None
        self._mapper = DcgmMapper(one_node=True)
        self._devices: dict[str, DeviceInfo] = {}
        self._seen: dict[str, float] = {}        # entity -> `now` of the last answer naming it
        self._capped = False
        self._last: dict[str, Reading] = {}
        self._last_fetch: float | None = None
        self._failing: str | None = None
        self._reported_invalid: set[str] = set()
        self._devices_changed = False
        self._pending: str | None = None     # the body fetched by open(), mapped by the first poll
        self._deadline = bounded.Deadline()
        self._events: dict[tuple[str, str], int] = {}

    # -- connection

    def open(self) -> list[DeviceInfo]:
        u = urlparse(self.url)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise SourceError(f"dcgm.url: {self.url!r} is not an http(s) URL of dcgm-exporter's /metrics")
        import requests
        self._session = requests.Session()
        # one keep-alive connection, no retries: a retry would double the worst-case poll time
        adapter = bounded.deadline_adapter(self._deadline)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        self._session.headers["Accept"] = "text/plain;version=0.0.4"
        try:
            body = self._fetch()
        except _FetchError as e:
            # not fatal: dcgm-exporter often starts after us; GPUs appear when it answers
            log.warning("%s; will keep trying every %gs", e, self.interval)
            self._failing = str(e)
            return []
        # discovery only (a throw-away mapper): the first poll maps this body at its own `now`
        self._pending = body
        series, _ = parse_exposition(body)
        m = DcgmMapper(one_node=True).map(((n, lab, v, 0) for n, lab, v, _ in series), 0.0)
        self._devices = {k: m.devices[k] for k in self._within_cap(m.devices)}
        self.has_sm_active = m.has_sm_active
        return self.devices()

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def devices(self) -> list[DeviceInfo]:
        return [self._devices[k] for k in sorted(self._devices, key=gpu_sort_key)]

    def _fetch(self) -> str:
        """One GET with a deadline on the whole answer and a cap on its size
        (sources/bounded.py): a server that trickles a byte at a time or never ends
        its body costs --dcgm.timeout and MAX_BODY at most."""
        import requests
        try:
            answer = bounded.get(self._session, self._deadline, self.url, self.timeout, self.MAX_BODY)
        except bounded.Late as e:
            got = "answer not complete" if e.answered else "no answer"
            raise _FetchError(f"dcgm-exporter {self.url}: {got} within {self.timeout:g}s") from None
        except bounded.TooLarge:
            raise _FetchError(f"dcgm-exporter {self.url}: answer larger than {self.MAX_BODY / 2 ** 20:g} MiB") from None
        except (requests.RequestException, OSError, *bounded.http_errors()) as e:
            if isinstance(e, requests.Timeout):
                raise _FetchError(f"dcgm-exporter {self.url}: no answer within {self.timeout:g}s") from None
            if isinstance(e, requests.ConnectionError) and not self._deadline.answered:
                raise _FetchError(f"dcgm-exporter {self.url}: cannot connect ({_reason(e)})") from None
            if self._deadline.answered:
                raise _FetchError(f"dcgm-exporter {self.url}: answer cut off ({_reason(e)})") from None
            raise _FetchError(f"dcgm-exporter {self.url}: {_reason(e)}") from None
        if answer.status != 200:
            raise _FetchError(f"dcgm-exporter {self.url}: HTTP {answer.status}")
        return answer.body.decode("utf-8", errors="replace")

    # -- polling

    def poll(self, now: float) -> PollResult:
        errors: dict[str, int] = {}
        if self._pending is not None:
            body, self._pending = self._pending, None
            self._last_fetch = now
            self._ingest_body(now, body, errors)
            return self._result(errors)
        if self._last_fetch is not None and now - self._last_fetch < self.interval * 0.999:
            # between fetches: same state, no new samples
            return PollResult([Reading(r.gpu, [], r.gauges, r.counters, r.up, r.error, r.attribution,
                                       r.holds_workload) for r in self._last.values()])
        self._last_fetch = now
        try:
            body = self._fetch()
        except _FetchError as e:
            errors["dcgm_scrape"] = 1
            if self._failing != str(e):
                log.warning("%s; its GPUs are marked down", e)
            self._failing = str(e)
            for key, r in self._last.items():
                self._last[key] = Reading(key, [], {}, r.counters, False, str(e), r.attribution)
            return self._result(errors)
        if self._failing is not None:
            log.info("dcgm-exporter %s answers again", self.url)
            self._failing = None
        self._ingest_body(now, body, errors)
        return self._result(errors)

    def _within_cap(self, found: dict[str, DeviceInfo]) -> list[str]:
        """The entities kept: those already known, then new ones in GPU order, up to MAX_ENTITIES."""
        known = [k for k in found if k in self._devices]
        new = sorted((k for k in found if k not in self._devices), key=gpu_sort_key)
        return known + new[:max(0, self.MAX_ENTITIES - len(known))]

    def _ingest_body(self, now: float, body: str, errors: dict[str, int]) -> None:
        series, bad = parse_exposition(body)
        if bad:
            errors["dcgm_parse"] = len(bad)
            log.debug("dcgm-exporter %s: %d unparseable lines, first: %s", self.url, len(bad), bad[0][1])
        m = self._mapper.map(((n, lab, v, 0) for n, lab, v, _ in series), now)
        if m.invalid:
            errors["dcgm_invalid_value"] = len(m.invalid)
            for _, desc in m.invalid:
                field_key = desc.split(" = ")[0]
                if field_key not in self._reported_invalid:   # once per field and GPU
                    if len(self._reported_invalid) >= self.MAX_ENTITIES * len(FIELDS):
                        self._reported_invalid.clear()        # GPUs come and go: stay bounded
                    self._reported_invalid.add(field_key)
                    log.warning("dcgm-exporter %s: %s; dropped", self.url, desc)
        if m.duplicates:
            self._event(("dropped_series_total", "duplicate"), m.duplicates)
        for family, n in m.resets.items():
            self._event(("resets_total", family), n)
            log.info("dcgm-exporter %s: %s went backwards (DCGM restarted?); counting on from the last value",
                     self.url, family)
        if m.has_sm_active:
            self.has_sm_active = True
        kept = self._within_cap(m.devices)
        if len(kept) < len(m.devices):
            over = len(m.devices) - len(kept)
            self._event(("dropped_series_total", "entity_limit"), over)
            for key in set(m.devices) - set(kept):
                self._mapper.forget(key)
            if not self._capped:
                log.warning("dcgm-exporter %s: %d GPU entities in one answer, more than %d; the rest are dropped",
                            self.url, len(m.devices), self.MAX_ENTITIES)
                self._capped = True
        for key in kept:
            self._seen[key] = now
            dev = m.devices[key]
            if self._devices.get(key) != dev:
                self._devices[key] = dev
                self._devices_changed = True
        for key in list(self._devices):
            rec = m.readings.get(key) if key in self._seen and self._seen[key] == now else None
            if rec is None:
                if now - self._seen.get(key, now) >= self.EXPIRE_S:
                    self._expire(key)
                    continue
                self._seen.setdefault(key, now)
                prev = self._last.get(key)
                self._last[key] = Reading(key, [], {}, prev.counters if prev else {}, False,
                                          "not in dcgm-exporter output", prev.attribution if prev else None)
                continue
            s = rec.samples[0]
            has_value = any(v is not None for v in (s.util, s.power_w, s.memory_used_bytes, s.sm_active, s.gr_active))
            self._last[key] = Reading(key, [s] if has_value else [], rec.gauges, rec.counters, True, None,
                                      rec.attribution, rec.holds_workload)

    def _expire(self, key: str) -> None:
        log.info("dcgm-exporter %s: GPU %s not in its answers for %gs; forgotten", self.url, key, self.EXPIRE_S)
        for d in (self._devices, self._last, self._seen):
            d.pop(key, None)
        self._mapper.forget(key)
        self._devices_changed = True
        self._event(("expired_entities_total", ""), 1)

    def _event(self, key: tuple[str, str], n: int) -> None:
        self._events[key] = self._events.get(key, 0) + n

    def _result(self, errors: dict[str, int]) -> PollResult:
        devices = None
        if self._devices_changed:
            devices = self.devices()
            self._devices_changed = False
        readings = list(self._last.values())
        # the samples go out once; repeats between fetches carry none
        self._last = {k: Reading(r.gpu, [], r.gauges, r.counters, r.up, r.error, r.attribution, r.holds_workload)
                      for k, r in self._last.items()}
        events, self._events = self._events, {}
        return PollResult(readings, devices, errors, events)



def _reason(e: BaseException) -> str:
    """The innermost cause of a requests error, in a few words."""
    text = str(e)
    for pat, short in (("Connection refused", "connection refused"), ("Name or service not known", "unknown host"),
                       ("timed out", "timed out"), ("Connection reset", "connection reset"),
                       ("Max retries exceeded", "connection failed")):
        if pat in text:
            return short
    return (text.splitlines() or [type(e).__name__])[0][:120]


__all__ = ["DcgmSource"]
