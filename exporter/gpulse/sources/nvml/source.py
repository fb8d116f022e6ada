"""NVIDIA GPUs through NVML (nvidia-ml-py, `import pynvml`).

Cadence. NVML does not need the sampler's --sample-interval (0.1 s): the driver
buffers a utilisation sample every ~1/6 s, and nvmlDeviceGetSamples(...,
last_seen_timestamp) returns every one since the previous read. So the source sets
`poll_interval` (the sampler then wakes once a second) and reads in two tiers,
returning an empty result for a poll that comes early:

    every 1 s:   utilisation samples and power samples (nvmlDeviceGetSamples, one
                 C call each), memory, clock-event reasons    (~4 calls/GPU/s)
    every 5 s:   temperature, SM and memory clocks, power limit, fan, and one
                 batched nvmlDeviceGetFieldValues (energy, ECC, PCIe and NVLink
                 bytes, PCIe replays, remapped rows, memory temperature)
                                                              (~1 call/GPU/s)

Every driver sample still reaches the engine with its own timestamp, so the time
resolution is the driver's (~0.17 s), not the read interval; reading more often
would only add calls and lower the latency below the 1 s analysis tick, where it
buys nothing. Power comes from the driver's power-sample buffer too and is matched
to each utilisation sample by time, so a sample taken while computing is never
judged by the power of a later stall. A GPU whose driver keeps no power samples is
read once a second through the instantaneous field (NVML_FI_DEV_POWER_INSTANT), and
only where that is unsupported too through nvmlDeviceGetPowerUsage, which NVML
documents as a 1 s average on Ampere (but GA100) and newer: the source then declares
its power averaged (`power_averaged`), so the engine judges it as such. Clock-event reasons are read every second
because they are integrated into throttle seconds; memory, because it decides
whether a GPU holds a job. The 5 s tier holds counters (rate() is exact at any read
interval) and gauges that a 15 s scrape would alias anyway.

The calls of the 1 s tier and the field batch go straight to the library's function
pointers with buffers kept between calls (calls.Direct): pynvml's wrappers
allocate per call and ask nvmlDeviceGetSamples twice. pynvml still loads the library,
resolves the symbols and makes every other call.

Sample.t is the driver's timestamp (µs since the epoch) / 1e6, one timeline for all
GPUs, which the engine needs to align GPUs and find moments when all are idle.

Failures are per GPU and per call (see calls.py): a lost GPU is reported down and
retried with backoff while the others keep reporting; when NVML itself goes away the
library is re-initialised with backoff. XIDs are drained from NVML's event queue at
each read (events.py). Per-process queries are not made at all: whether a GPU holds a job is
judged from its memory.
"""
from __future__ import annotations

import logging
from typing import Any

import pynvml

from ...catalog import THROTTLE_REASONS
from ...model import DeviceInfo, PollResult, Reading, Sample
from ..base import Source, SourceError
from .calls import Caller, Direct, DriverGone, GpuLost
from .discovery import Entity, discover, discover_index
from .events import XidWatcher
from .gpm import GpmReader

log = logging.getLogger("gpulse.sources.nvml")

READ_INTERVAL = 1.0        # samples and gauges (the driver buffers samples in between)
COUNTER_INTERVAL = 5.0     # the field batch, temperature, clocks, power limit, fan
RETRY_MIN, RETRY_MAX = 1.0, 30.0   # backoff for a lost GPU and for NVML re-initialisation
# Every GPU down this long looks like a driver reload: re-initialise NVML, at most
# this often (a single lost GPU on a one-GPU host must not cause a re-init loop).
ALL_DOWN_REINIT = 10.0
ALL_DOWN_REINIT_EVERY = 60.0
from ...model import UTIL_PERIOD as DEFAULT_PERIOD  # driver utilisation sample period until measured
# Driver timestamps are wall-clock µs. The last one seen this far ahead of the wall
# clock means the clock was stepped back: samples since then would never qualify.
CLOCK_STEP_BACK = 2.0

UTIL_SAMPLES = "nvmlDeviceGetSamples[util]"
POWER_SAMPLES = "nvmlDeviceGetSamples[power]"
POWER_INSTANT = "nvmlDeviceGetFieldValues[power_instant]"
POWER_USAGE = "nvmlDeviceGetPowerUsage"
F_POWER_INSTANT = pynvml.NVML_FI_DEV_POWER_INSTANT          # mW
REASONS = "nvmlDeviceGetCurrentClocksEventReasons"
REASONS_OLD = "nvmlDeviceGetCurrentClocksThrottleReasons"

# nvmlClocksEventReason* bits, in catalog.THROTTLE_REASONS order
REASON_BITS = tuple((1 << i, name) for i, name in enumerate(THROTTLE_REASONS))

# One batched nvmlDeviceGetFieldValues per GPU per counters tick.
F_ENERGY = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION      # mJ
F_MEM_TEMP = pynvml.NVML_FI_DEV_MEMORY_TEMP
F_ECC_CORR = pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL
F_ECC_UNCORR = pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL
F_PCIE_REPLAY = pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER
F_NVLINK_TX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX  # KiB, all links
F_NVLINK_RX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
F_REMAP_CORR = pynvml.NVML_FI_DEV_REMAPPED_COR
F_REMAP_UNC = pynvml.NVML_FI_DEV_REMAPPED_UNC
F_REMAP_PENDING = pynvml.NVML_FI_DEV_REMAPPED_PENDING
F_PCIE_TX = pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES
F_PCIE_RX = pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES
# NVLink error counters summed over the GPU's links (NOT_SUPPORTED without NVLink: then
# dropped from the batch like any field the GPU lacks), by catalog.NVLINK_ERRORS type
F_NVLINK_ERRORS = (("replay", pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL),
                   ("recovery", pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL),
                   ("crc_flit", pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL),
                   ("crc_data", pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL))
FIELD_IDS = (F_ENERGY, F_MEM_TEMP, F_ECC_CORR, F_ECC_UNCORR, F_PCIE_REPLAY, F_NVLINK_TX, F_NVLINK_RX,
             F_REMAP_CORR, F_REMAP_UNC, F_REMAP_PENDING, F_PCIE_TX, F_PCIE_RX) + tuple(f for _, f in F_NVLINK_ERRORS)
# PCIe link state, 5 s tier: the generation in use moves (an idle GPU lowers it), the
# width only when the link retrains; the maxima are read until they answer, then kept
LINK_NOW = (("pcie_link_generation", "nvmlDeviceGetCurrPcieLinkGeneration"),
            ("pcie_link_width", "nvmlDeviceGetCurrPcieLinkWidth"))
LINK_MAX = (("pcie_link_max_generation", "nvmlDeviceGetMaxPcieLinkGeneration"),
            ("pcie_link_max_width", "nvmlDeviceGetMaxPcieLinkWidth"))
# (field id, scope id) pairs: pynvml takes a bare id through an exception handler
FIELD_SCOPES = tuple((f, 0) for f in FIELD_IDS)


def init_message(e: Exception) -> str:
    """One line telling the user why NVML cannot be used and what to do."""
    hint = "use --source sim to try gpulse without GPUs, or --nvml.wait to wait for the driver"
    code = getattr(e, "value", None)
    if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return ("NVML library libnvidia-ml.so.1 not found: no NVIDIA driver on this host, or it is not "
                f"visible to this process/container; {hint}")
    if code == pynvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return f"NVIDIA driver is not loaded (nvmlInit: {e}); {hint}"
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return f"no permission to use NVML (nvmlInit: {e}); run with access to /dev/nvidia*"
    return f"NVML initialisation failed: {e}; {hint}"




def _next_tick(due: float, interval: float, now: float) -> float:
    """Keep a fixed grid; after a late poll (or the first), restart it from now."""
    nxt = due + interval
    return nxt if nxt > now + interval / 2 else now + interval


class _State:
    """Mutable per-entity state (source-private)."""

    def __init__(self, entity: Entity, start_us: int):
        self.entity = entity
        self.up = entity.handle is not None
        self.error = entity.error
        self.retry_at = 0.0
        self.backoff = RETRY_MIN
        self.util_ts = start_us        # last driver utilisation timestamp consumed (µs)
        self.power_ts = start_us
        self.last_t = start_us / 1e6   # last Sample.t emitted
        self.period = DEFAULT_PERIOD
        # power points (s, W) to match this read's utilisation samples: the last one of
        # the previous read, then the new ones
        self.power_t: list[float] = []
        self.power_w: list[float] = []
        self.gauges: dict[str, Any] = {}
        self.counters: dict[str, Any] = {}
        self.throttle = {name: 0.0 for name in THROTTLE_REASONS}
        self.reasons_t: float | None = None
        self.fields = list(FIELD_SCOPES)
        self.field_buf: Any = None    # nvmlFieldValue_t[len(fields)], ids filled in, reused
        self.gpm = False
        # how its power is read: "samples" (the driver's buffer), "instant" (the
        # instantaneous field), "average" (nvmlDeviceGetPowerUsage: a 1 s mean on
        # Ampere and newer), or None before a read decides
        self.power_path: str | None = None
        self.instant_buf: Any = None   # nvmlFieldValue_t[1] for F_POWER_INSTANT, reused

    def adopt(self, old: "_State") -> None:
        """Keep what must survive an NVML re-initialisation: our own accumulators and
        the sample timeline, so counters stay monotonic and no sample repeats."""
        self.util_ts, self.power_ts, self.last_t = old.util_ts, old.power_ts, old.last_t
        self.period = old.period
        self.throttle = old.throttle
        if "throttle_seconds_total" in old.counters:
            self.counters["throttle_seconds_total"] = old.counters["throttle_seconds_total"]

    def restart_timeline(self, t: float) -> None:
        """Take driver samples from t on again (after the wall clock stepped back)."""
        self.util_ts = self.power_ts = int(t * 1e6)
        self.last_t = t
        self.power_t, self.power_w = [], []
        self.reasons_t = None

    def set_power(self, points: list[tuple[float, float]]) -> None:
        """Start this read's power points: the previous read's last, then `points`."""
        pt, pw = self.power_t[-1:], self.power_w[-1:]
        last = pt[-1] if pt else float("-inf")
        for t, w in points:
            if t > last:
                pt.append(t)
                pw.append(w)
                last = t
        self.power_t, self.power_w = pt, pw

    def powers_at(self, times: list[float]) -> list[float | None]:
        """The power point nearest in time to each of `times` (ascending), in one pass."""
        pts, ws = self.power_t, self.power_w
        if not pts:
            return [None] * len(times)
        out: list[float | None] = []
        i, n = 0, len(pts)
        for t in times:
            while i < n and pts[i] < t:     # i: the first point at or after t
                i += 1
            if i == 0:
                out.append(ws[0])
            elif i == n:
                out.append(ws[-1])
            else:
                out.append(ws[i] if pts[i] - t < t - pts[i - 1] else ws[i - 1])
        return out


class NvmlSource(Source):
    name = "nvml"

    def __init__(self, cfg: Any):
        self.cfg = cfg
        self.read_interval = max(cfg.sample_interval, READ_INTERVAL)
        self.poll_interval = self.read_interval   # driver samples wait in its buffer
        self.counter_interval = max(self.read_interval, COUNTER_INTERVAL)
        self.caller = Caller()
        self.direct = Direct()
        self.states: list[_State] = []
        self.xid: XidWatcher | None = None
        self.gpm: GpmReader | None = None
        self.has_sm_active = False
        self._inited = False
        self._lib_error: str | None = None
        self._reinit_at = 0.0
        self._reinit_backoff = RETRY_MIN
        self._next_read = 0.0
        self._next_counters = 0.0
        self._devices_changed = False
        self._closed = False
        self._all_down_since: float | None = None
        self._last_all_down_reinit = float("-inf")

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> list[DeviceInfo]:
        try:
            self._start()
        except (pynvml.NVMLError, DriverGone) as e:
            msg = init_message(e) if isinstance(e, pynvml.NVMLError) else f"NVML unusable: {e}"
            if not self.cfg.nvml.wait:
                raise SourceError(msg) from None
            log.warning("%s; retrying with backoff (--nvml.wait)", msg)
            self._lib_error = msg
            self._reinit_at = self.loop_clock.now() + self._reinit_backoff
            return []
        return self.devices()

    def devices(self) -> list[DeviceInfo]:
        return [s.entity.info for s in self.states]

    @property
    def power_averaged(self) -> bool | None:   # type: ignore[override]
        """True when some GPU's power is read through nvmlDeviceGetPowerUsage (a 1 s
        average on Ampere and newer); False when every GPU's is an instant (the
        driver's power samples, matched to each utilisation sample, or the
        instantaneous field); None before any GPU's power has been read
        (--nvml.wait), for the engine to judge from the data. One answer for the
        source: the engine's averaged-power judgement (Engine.power_averaged, the
        share) is one for all its GPUs. Known as the source opens, when the engine
        is built from it."""
        paths = [s.power_path for s in self.states if not s.entity.is_mig and s.power_path is not None]
        if not paths:
            return None
        return "average" in paths

    def _start(self, previous: list[_State] | None = None) -> None:
        """nvmlInit, discover, start XID events and GPM. Raises NVMLError/DriverGone."""
        pynvml.nvmlInit()
        self._inited = True
        try:
            entities = discover(self.caller)
        except BaseException:
            self._shutdown()
            raise
        # the first read takes the driver's last second of samples, so power and
        # utilisation are known at once
        start_us = int((self.loop_clock.wall() - self.read_interval) * 1e6)
        old = {s.entity.info.uuid or s.entity.key: s for s in previous or ()}
        states = []
        for e in entities:
            st = _State(e, start_us)
            prev = old.get(e.info.uuid or e.key)
            if prev is not None:
                st.adopt(prev)
            states.append(st)
        self.states = states
        try:
            self._probe_power(self.loop_clock.wall())
        except BaseException:
            self._shutdown()
            raise
        self.has_sm_active = False
        if self.cfg.nvml.gpm:
            self.gpm = GpmReader(self.caller)
            for st in states:
                st.gpm = self.gpm.supported(st.entity)
                self.has_sm_active = self.has_sm_active or st.gpm
        old_xid = self.xid.all_counts() if self.xid is not None else {}
        if self.cfg.nvml.xid_events:
            self.xid = XidWatcher(entities, self.caller.count)
            self.xid.seed(old_xid)
            self.xid.start()
        n_gpu = sum(1 for e in entities if not e.is_mig)
        n_mig = len(entities) - n_gpu
        driver = entities[0].info.driver if entities else "?"
        log.info("NVML: %d GPU(s)%s, driver %s", n_gpu, f", {n_mig} MIG instance(s)" if n_mig else "", driver)
        if not entities:
            log.warning("NVML reports no GPUs on this host")

    def _shutdown(self) -> None:
        if self.xid is not None:
            self.xid.stop()
        if self.gpm is not None:
            self.gpm.close()
            self.gpm = None
        if self._inited:
            self._inited = False
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._shutdown()

    # ------------------------------------------------------------------ polling

    def poll(self, now: float) -> PollResult:
        if self._lib_error is not None:
            if now < self._reinit_at:
                return self._all_down(now)
            if not self._reinit(now):
                return self._all_down(now)
        # the driver buffers samples: polls between the reads have nothing to do
        if now + self.cfg.sample_interval / 2 < self._next_read:
            return PollResult([])
        self._next_read = _next_tick(self._next_read, self.read_interval, now)
        counters = now + self.cfg.sample_interval / 2 >= self._next_counters
        if counters:
            self._next_counters = _next_tick(self._next_counters, self.counter_interval, now)
        wall = self.loop_clock.wall()
        if self.xid is not None:
            self.xid.drain(now)
        readings = []
        try:
            for st in list(self.states):
                readings.append(self._read(st, now, wall, counters))
        except DriverGone as e:
            self._driver_gone(str(e), now)
            return self._all_down(now)
        self._check_all_down(now)
        devices = None
        if self._devices_changed:
            self._devices_changed = False
            devices = self.devices()
        return PollResult(readings, devices=devices, call_errors=self.caller.drain_errors())

    def _check_all_down(self, now: float) -> None:
        physical = [s for s in self.states if not s.entity.is_mig]
        if not physical or any(s.up for s in physical):
            self._all_down_since = None
            return
        if self._all_down_since is None:
            self._all_down_since = now
        if (now - self._all_down_since >= ALL_DOWN_REINIT
                and now - self._last_all_down_reinit >= ALL_DOWN_REINIT_EVERY):
            self._last_all_down_reinit = now
            self._all_down_since = None
            self._driver_gone("every GPU stopped answering", now)

    def _all_down(self, now: float) -> PollResult:
        err = self._lib_error or "NVML unavailable"
        readings = [Reading(s.entity.key, up=False, error=err, counters=self._counters(s)) for s in self.states]
        devices = None
        if self._devices_changed:
            self._devices_changed = False
            devices = self.devices()
        return PollResult(readings, devices=devices, call_errors=self.caller.drain_errors())

    def _driver_gone(self, why: str, now: float) -> None:
        if self._lib_error is None:
            log.warning("NVML stopped working (%s); re-initialising with backoff", why)
        self._lib_error = f"NVML unavailable: {why}"
        for st in self.states:
            st.up = False
            st.error = self._lib_error
        self._shutdown()
        self._reinit_at = now + self._reinit_backoff

    def _reinit(self, now: float) -> bool:
        before = [s.entity.info for s in self.states]
        try:
            self._start(previous=self.states)
        except (pynvml.NVMLError, DriverGone) as e:
            self._reinit_backoff = min(RETRY_MAX, self._reinit_backoff * 2)
            self._reinit_at = now + self._reinit_backoff
            self._lib_error = init_message(e) if isinstance(e, pynvml.NVMLError) else f"NVML unavailable: {e}"
            return False
        log.info("NVML is back")
        self._lib_error = None
        self._reinit_backoff = RETRY_MIN
        self._next_read = self._next_counters = 0.0
        if self.devices() != before:
            self._devices_changed = True
        return True

    def _counters(self, st: _State) -> dict[str, Any]:
        """A copy of the counters to report: a Reading must not change after poll()."""
        x = self.xid.counts(st.entity.key) if self.xid is not None else None
        return {**st.counters, "xid_errors_total": x} if x else dict(st.counters)

    def _read(self, st: _State, now: float, wall: float, counters: bool) -> Reading:
        e = st.entity
        if not st.up and now < st.retry_at:
            return Reading(e.key, up=False, error=st.error, counters=self._counters(st))
        try:
            if e.handle is None:
                self._reopen(st)
                e = st.entity
            was_down = not st.up
            samples = self._samples_and_memory(st, wall)
            if not e.is_mig:
                self._throttle(st, wall)
                if counters or was_down:
                    self._counters_tier(st)
        except GpuLost as err:
            if st.up:
                log.warning("GPU %s is down: %s", e.key, err)
            st.up = False
            st.error = f"GPU unreachable: {err}"
            st.retry_at = now + st.backoff
            st.backoff = min(RETRY_MAX, st.backoff * 2)
            st.reasons_t = None
            if self.gpm is not None:
                self.gpm.reset(e.key)
            return Reading(e.key, up=False, error=st.error, counters=self._counters(st))
        if not st.up:
            log.info("GPU %s answers again", e.key)
            st.up = True
            st.error = None
            st.backoff = RETRY_MIN
        return Reading(e.key, samples=samples, gauges=dict(st.gauges), counters=self._counters(st))

    def _reopen(self, st: _State) -> None:
        """A GPU that could not be opened at discovery: try again (raises GpuLost)."""
        e = st.entity
        info = e.info
        found = discover_index(self.caller, e.index, info.driver, info.cuda_version)
        st.entity = found[0]
        start_us = int(self.loop_clock.wall() * 1e6)
        extra = [_State(f, start_us) for f in found[1:]]
        if found[0].info != info or extra:
            at = self.states.index(st) + 1
            self.states[at:at] = extra
            self._devices_changed = True

    # ------------------------------------------------------------------ every read

    def _samples_and_memory(self, st: _State, wall: float) -> list[Sample]:
        e, c = st.entity, self.caller
        if st.last_t - wall > CLOCK_STEP_BACK:
            log.info("GPU %s: the wall clock went back %.1f s; following it", e.key, st.last_t - wall)
            st.restart_timeline(wall - self.read_interval)
        mem = c.call(e.key, self.direct.memory, e.handle, name="nvmlDeviceGetMemoryInfo")
        used = None
        if mem is not None:
            used = float(mem[1])
            st.gauges["memory_used_bytes"] = used
            st.gauges["memory_total_bytes"] = float(mem[0])
        gpm = self.gpm.read(e) if st.gpm and self.gpm is not None else None
        if e.is_mig:
            # NVML has no utilisation for MIG instances; GPM is their only activity signal
            if gpm is None:
                return []
            t = max(wall, st.last_t + 1e-6)
            st.last_t = t
            return [Sample(t, memory_used_bytes=used, sm_active=gpm[0], gr_active=gpm[1])]
        self._read_power(st, wall)
        utils = self._read_util(st, wall)
        sm, gr = gpm if gpm is not None else (None, None)
        powers = st.powers_at([t for t, _ in utils])
        return [Sample(t, u, w, used, sm, gr) for (t, u), w in zip(utils, powers)]

    def _samples(self, st: _State, name: str, kind: int, since_us: int) -> list[tuple[int, float]] | None:
        """nvmlDeviceGetSamples since a timestamp as sorted (µs, value) pairs: [] when
        nothing is new, None when this GPU cannot give this kind of sample."""
        key = st.entity.key
        if not self.caller.supported(key, name):
            return None
        try:
            return self.direct.samples(st.entity.handle, kind, since_us)[1]
        except pynvml.NVMLError as err:
            if err.value == pynvml.NVML_ERROR_NOT_FOUND:    # nothing since since_us
                return []
            self.caller.fail(key, name, err)
            return None if not self.caller.supported(key, name) else []

    def _probe_power(self, wall: float) -> None:
        """Read each GPU's power once as the source opens, so that every GPU's power
        path (and power_averaged) is known before the engine is built; what it read is
        put back, for the first read to match to its utilisation samples. A GPU lost
        meanwhile is judged at its first read."""
        for st in self.states:
            if st.entity.is_mig or st.entity.handle is None:
                continue
            kept = st.power_ts, st.power_t, st.power_w
            try:
                self._read_power(st, wall)
            except GpuLost:
                pass
            st.power_ts, st.power_t, st.power_w = kept

    def _read_power(self, st: _State, wall: float) -> None:
        """The driver's power samples; without them the instantaneous field; without
        that nvmlDeviceGetPowerUsage, a 1 s average on Ampere and newer."""
        e = st.entity
        raw = self._samples(st, POWER_SAMPLES, pynvml.NVML_TOTAL_POWER_SAMPLES, st.power_ts)
        if raw is not None:
            st.power_path = "samples"
            new = [(ts / 1e6, mw / 1000.0) for ts, mw in raw if ts > st.power_ts]
            if new:
                st.power_ts = raw[-1][0]
            st.set_power(new)
        else:
            mw = self._power_instant(st)
            if mw is not None:
                st.power_path = "instant"
            elif not self.caller.supported(e.key, POWER_INSTANT):
                mw = self.caller.call(e.key, pynvml.nvmlDeviceGetPowerUsage, e.handle, name=POWER_USAGE)
                if self.caller.supported(e.key, POWER_USAGE):
                    st.power_path = "average"
            st.set_power([] if mw is None else [(wall, mw / 1000.0)])
        if st.power_w:
            st.gauges["power_watts"] = st.power_w[-1]

    def _power_instant(self, st: _State) -> float | None:
        """NVML_FI_DEV_POWER_INSTANT in mW, or None: unsupported (remembered, so the
        caller turns to nvmlDeviceGetPowerUsage) or a failure this read (counted)."""
        e, c = st.entity, self.caller
        if not c.supported(e.key, POWER_INSTANT):
            return None
        if st.instant_buf is None:
            st.instant_buf = (pynvml.c_nvmlFieldValue_t * 1)()
            st.instant_buf[0].fieldId, st.instant_buf[0].scopeId = F_POWER_INSTANT, 0
        got = c.call(e.key, self.direct.field_values, e.handle, st.instant_buf, name=POWER_INSTANT)
        if not got:
            return None
        _, ret, value = got[0]
        if value is None:
            c.fail(e.key, POWER_INSTANT, pynvml.NVMLError(ret))
        return value

    def _read_util(self, st: _State, wall: float) -> list[tuple[float, float]]:
        e = st.entity
        raw = self._samples(st, UTIL_SAMPLES, pynvml.NVML_GPU_UTILIZATION_SAMPLES, st.util_ts)
        new = [x for x in raw or () if x[0] > st.util_ts]
        out: list[tuple[float, float]] = []
        if new:
            if len(new) > 1:                 # the driver's sample period, for the fallback below
                st.period = min(b[0] - a[0] for a, b in zip(new, new[1:])) / 1e6 or st.period
            st.util_ts = new[-1][0]
            last = st.last_t                 # samples a fallback reading already covered are dropped
            out = [(ts / 1e6, min(1.0, pct / 100.0)) for ts, pct in new if ts / 1e6 > last]
            if out:
                st.last_t = out[-1][0]
                return out
        # No new driver sample for several periods: the buffer is empty on an idle GPU
        # (or the driver keeps none). Read the instantaneous rate instead, stamped now,
        # without moving util_ts, so driver samples are picked up again when they return.
        if wall - st.util_ts / 1e6 < max(1.0, 3 * st.period):
            return out
        rates = self.caller.call(e.key, pynvml.nvmlDeviceGetUtilizationRates, e.handle)
        if rates is None:
            return out
        t = max(wall, st.last_t + 1e-6)
        st.last_t = t
        return [(t, min(1.0, rates.gpu / 100.0))]

    # ------------------------------------------------------------------ every 5 s

    def _counters_tier(self, st: _State) -> None:
        e, c, g = st.entity, self.caller, st.gauges
        h, k = e.handle, e.key
        temp = c.call(k, pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU)
        if temp is not None:
            g["temperature_celsius"] = float(temp)
        sm = c.call(k, pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM, name="nvmlDeviceGetClockInfo[sm]")
        if sm is not None:
            g["sm_clock_hertz"] = sm * 1e6
        mem = c.call(k, pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_MEM, name="nvmlDeviceGetClockInfo[mem]")
        if mem is not None:
            g["memory_clock_hertz"] = mem * 1e6
        limit = c.call(e.key, pynvml.nvmlDeviceGetEnforcedPowerLimit, e.handle)
        if limit is not None:
            g["power_limit_watts"] = limit / 1000.0
        fan = c.call(e.key, pynvml.nvmlDeviceGetFanSpeed, e.handle)
        if fan is not None:
            g["fan_speed_ratio"] = fan / 100.0
        for key, fn in LINK_NOW + tuple(x for x in LINK_MAX if x[0] not in g):
            v = c.call(k, getattr(pynvml, fn), h)
            if v is not None:
                g[key] = float(v)
        self._fields(st)

    def _throttle(self, st: _State, wall: float) -> None:
        """Clock-event reasons are a bitmask of *now*; integrate them into seconds per
        reason, crediting each interval between reads to the mask read at its end."""
        c, e = self.caller, st.entity
        u64 = self.direct.u64
        mask = c.call(e.key, u64, REASONS, e.handle, name=REASONS)
        if mask is None and not c.supported(e.key, REASONS):
            mask = c.call(e.key, u64, REASONS_OLD, e.handle, name=REASONS_OLD)  # older drivers
        if mask is None:
            return
        credited = False
        if mask and st.reasons_t is not None and 0 < wall - st.reasons_t <= 3 * self.read_interval:
            dt = wall - st.reasons_t
            for bit, name in REASON_BITS:
                if mask & bit:
                    st.throttle[name] += dt
                    credited = True
        st.reasons_t = wall
        # a new mapping only when a value changed: Readings hold the previous one
        if credited or "throttle_seconds_total" not in st.counters:
            st.counters["throttle_seconds_total"] = {(n,): v for n, v in st.throttle.items()}

    def _fields(self, st: _State) -> None:
        e, c = st.entity, self.caller
        if not st.fields:
            return
        if not c.supported(e.key, "nvmlDeviceGetFieldValues"):
            self._fields_one_by_one(st)
            return
        if st.field_buf is None:   # the driver rewrites every entry but the ids: fill them once
            st.field_buf = (pynvml.c_nvmlFieldValue_t * len(st.fields))()
            for v, (fid, scope) in zip(st.field_buf, st.fields):
                v.fieldId, v.scopeId = fid, scope
        values = c.call(e.key, self.direct.field_values, e.handle, st.field_buf, name="nvmlDeviceGetFieldValues")
        if values is None:
            return
        got: dict[int, float] = {}
        for fid, ret, value in values:
            if value is not None:
                got[fid] = value
                continue
            try:
                c.fail(e.key, f"nvmlDeviceGetFieldValues[{fid}]", pynvml.NVMLError(ret))
            finally:
                if not c.supported(e.key, f"nvmlDeviceGetFieldValues[{fid}]"):
                    st.fields.remove((fid, 0))
                    st.field_buf = None
        self._apply_fields(st, got)

    def _fields_one_by_one(self, st: _State) -> None:
        """Drivers without nvmlDeviceGetFieldValues: the same values, call by call."""
        e, c = st.entity, self.caller
        h, k = e.handle, e.key
        got: dict[int, float] = {}
        mj = c.call(k, pynvml.nvmlDeviceGetTotalEnergyConsumption, h)
        if mj is not None:
            got[F_ENERGY] = float(mj)
        for fid, kind in ((F_ECC_CORR, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                          (F_ECC_UNCORR, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
            n = c.call(k, pynvml.nvmlDeviceGetTotalEccErrors, h, kind, pynvml.NVML_VOLATILE_ECC)
            if n is not None:
                got[fid] = float(n)
        rows = c.call(k, pynvml.nvmlDeviceGetRemappedRows, h)
        if rows is not None:
            got[F_REMAP_CORR], got[F_REMAP_UNC], got[F_REMAP_PENDING] = map(float, rows[:3])
        self._apply_fields(st, got)

    @staticmethod
    def _apply_fields(st: _State, got: dict[int, float]) -> None:
        g, cn = st.gauges, st.counters
        if F_ENERGY in got:
            cn["energy_joules_total"] = got[F_ENERGY] / 1000.0
        if F_MEM_TEMP in got and got[F_MEM_TEMP] > 0:
            g["memory_temperature_celsius"] = got[F_MEM_TEMP]
        if F_ECC_CORR in got or F_ECC_UNCORR in got:
            cn["ecc_errors_total"] = {(t,): got[f] for t, f in (("corrected", F_ECC_CORR), ("uncorrected", F_ECC_UNCORR))
                                      if f in got}
        if F_PCIE_REPLAY in got:
            cn["pcie_replays_total"] = got[F_PCIE_REPLAY]
        if F_PCIE_TX in got or F_PCIE_RX in got:
            cn["pcie_bytes_total"] = {(d,): got[f] for d, f in (("tx", F_PCIE_TX), ("rx", F_PCIE_RX)) if f in got}
        if F_NVLINK_TX in got or F_NVLINK_RX in got:
            cn["nvlink_bytes_total"] = {(d,): got[f] * 1024.0 for d, f in (("tx", F_NVLINK_TX), ("rx", F_NVLINK_RX))
                                        if f in got}
        if F_REMAP_CORR in got or F_REMAP_UNC in got:
            g["remapped_rows"] = {(t,): got[f] for t, f in (("correctable", F_REMAP_CORR), ("uncorrectable", F_REMAP_UNC))
                                  if f in got}
        if F_REMAP_PENDING in got:
            g["remapping_pending"] = 1.0 if got[F_REMAP_PENDING] else 0.0
        nvl = {(t,): got[f] for t, f in F_NVLINK_ERRORS if f in got}
        if nvl:
            cn["nvlink_errors_total"] = nvl
