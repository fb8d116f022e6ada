"""A simulated training node: deterministic for a seed, with the failures users face.

Every value is a pure function of (seed, GPU, time since the first poll), so two
runs with the same seed produce the same samples, live or in virtual time.

The model is one synchronous data-parallel job. Each GPU has a *work level* (the
utilisation it reaches while computing) and, at any instant, one of four states:

    compute — util = work level + noise, power = idle + level·(limit − idle)
    spin    — blocked in a collective: util ≈ 100 %, power ≈ spin power (idle-level)
    off     — its rank is busy off the GPU (checkpoint, data loading): util ≈ 0
    stalled — the whole job waits (all-reduce, input pipeline): util 0, idle power

Scenarios set the work levels and the timing of stalls and checkpoints; see
SCENARIOS. `Scenario` is public so benchmarks can build labelled variants.

The straggler-cause scenarios (`slow_cause` set) run in steps: every GPU computes
for `peer_share` of each `step`, then spin-waits in the all-reduce until the slow GPU
(`slow_gpu`) is done at `slow_share`. How the slow GPU is slow shows in the telemetry
a real one would report (analysis/cause.py reads it):

    throttled    SM clock 1410 MHz, hw_thermal and sw_power_cap time while it
                 computes, power at its limit, running hot
    hw-slowdown  SM clock 1200 MHz, hw_slowdown time, no thermal or power reason
    link-errors  clocks as its peers, PCIe replays and corrected ECC errors rising
    more-work    everything as its peers: it just has more to compute per step
    off-gpu      off the GPU (checkpoint, data loading) for the first
                 1 - peer_share of each step, then computing; the peers spin-wait
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..catalog import THROTTLE_REASONS
from ..model import DeviceInfo, PollResult, Reading, Sample
from .base import Source

GIB = 2**30
MHZ = 1e6


@dataclass(frozen=True)
class Scenario:
    name: str
    level: float = 0.93                   # work level of a normal GPU
    levels: dict[int, float] = field(default_factory=dict)   # per-GPU overrides
    low_half: float | None = None          # imbalance: GPUs in the upper half run at this level
    noise: float = 0.02                    # utilisation noise (uniform ±)
    # common dips per step (balanced): all GPUs dip to dip_level, not to idle
    dip_period: float = 0.0
    dip_length: float = 0.0
    dip_level: float = 0.5
    # sync stalls: every GPU to 0 % together
    stall_period: float = 0.0
    stall_length: float = 0.0
    stall_jitter: float = 0.0              # ± seconds on each stall's start
    # checkpoints: rank 0 off the GPU, the others spin-wait
    ckpt_period: float = 0.0
    ckpt_length: float = 0.0
    ckpt_offset: float = 0.0
    # one GPU stops answering
    lost_gpu: int | None = None
    lost_after: float = 0.0
    running: bool = True                   # False: no job at all (memory released)
    # straggler-cause scenarios (see module doc)
    slow_cause: str = ""
    slow_gpu: int = 3
    step: float = 2.0
    peer_share: float = 0.55
    slow_share: float = 0.95


# Periods are chosen so a test sees several cycles in a few seconds (sync-stall) or
# the checkpoint rhythm of the real H100 traces (checkpoint).
SCENARIOS: dict[str, Scenario] = {
    "balanced": Scenario("balanced", level=0.93, dip_period=2.0, dip_length=0.1, dip_level=0.55),
    "sync-stall": Scenario("sync-stall", level=0.95, stall_period=2.0, stall_length=0.3, stall_jitter=0.02),
    "straggler": Scenario("straggler", level=0.60, levels={1: 0.99}, noise=0.015),
    "imbalance": Scenario("imbalance", level=0.99, low_half=0.12, noise=0.01),
    "checkpoint": Scenario("checkpoint", level=0.97, ckpt_period=30.0, ckpt_length=15.0, ckpt_offset=10.0),
    "gpu-lost": Scenario("gpu-lost", level=0.93, lost_gpu=-1, lost_after=10.0),
    "idle": Scenario("idle", running=False),
    "straggler-throttled": Scenario("straggler-throttled", slow_cause="throttled"),
    "straggler-hw-slowdown": Scenario("straggler-hw-slowdown", slow_cause="hw-slowdown"),
    "straggler-link-errors": Scenario("straggler-link-errors", slow_cause="link-errors"),
    "straggler-more-work": Scenario("straggler-more-work", slow_cause="more-work"),
    "straggler-off-gpu": Scenario("straggler-off-gpu", slow_cause="off-gpu", peer_share=0.4),
}

# the slow GPU's SM clock while it computes, by cause (MHz); peers run at BOOST_MHZ
SLOW_MHZ = {"throttled": 1410, "hw-slowdown": 1200}
BOOST_MHZ = 1980
# clock-event reasons the slow GPU reports while it computes, by cause
SLOW_REASONS = {"throttled": ("hw_thermal", "sw_power_cap"), "hw-slowdown": ("hw_slowdown",)}
PCIE_REPLAYS_PER_S = 40.0    # link-errors: a marginal link retries constantly
ECC_CORRECTED_PER_S = 0.5

IDLE_W = 70.0
SPIN_W = 150.0
LIMIT_W = 700.0
MEM_TOTAL = 80 * GIB


def _unit(seed: int, gpu: int, k: int, salt: int = 0) -> float:
    """Deterministic uniform [0, 1) from (seed, gpu, k): splitmix64, no global RNG."""
    x = (seed * 0x9E3779B97F4A7C15 + gpu * 0xBF58476D1CE4E5B9 + k * 0x94D049BB133111EB + salt) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 31
    return x / 2**64


class SimSource(Source):
    name = "sim"
    util_window = 0.0        # each sample is the state at its instant, not an average
    power_averaged = False   # and so is its power

    def __init__(self, cfg, scenario: Scenario | None = None):
        self.n = cfg.sim.gpus
        self.seed = cfg.sim.seed
        self.sc = scenario or SCENARIOS[cfg.sim.scenario]
        if self.sc.lost_gpu is not None and self.sc.lost_gpu < 0:
            self.sc = replace(self.sc, lost_gpu=self.n + self.sc.lost_gpu)
        self.t0: float | None = None
        self.last_t: float | None = None
        self.energy = [0.0] * self.n
        self.idle_throttle = [0.0] * self.n
        # straggler-cause scenarios: every reason counted, and the link's error counters
        self.throttle = [dict.fromkeys(THROTTLE_REASONS, 0.0) for _ in range(self.n)]
        self.replays = [0.0] * self.n
        self.ecc = [0.0] * self.n
        self.lost_reported = False

    def open(self) -> list[DeviceInfo]:
        return [DeviceInfo(
            gpu=str(i),
            uuid=f"GPU-{self.seed & 0xFFFFFFFF:08x}-5157-4d00-8000-{i:012x}",
            model="NVIDIA H100 80GB HBM3 (simulated)",
            pci_bus_id=f"00000000:{0x18 + i * 0x10 & 0xFF:02X}:00.0",
            driver="sim", cuda_version="12.8",
        ) for i in range(self.n)]

    # --------------------------------------------------------------- the model

    def level_of(self, i: int) -> float:
        sc = self.sc
        if i in sc.levels:
            return sc.levels[i]
        if sc.low_half is not None and i >= (self.n + 1) // 2:
            return sc.low_half
        return sc.level

    def state(self, i: int, rel: float) -> str:
        """compute | spin | off | stalled | dip | none at `rel` seconds into the run."""
        sc = self.sc
        if not sc.running:
            return "none"
        if sc.slow_cause:
            phase = rel % sc.step / sc.step
            if i != sc.slow_gpu:
                return "compute" if phase < sc.peer_share else "spin"
            if sc.slow_cause == "off-gpu":
                return "off" if phase < 1 - sc.peer_share else "compute"
            return "compute" if phase < sc.slow_share else "spin"
        if sc.ckpt_period and (rel - sc.ckpt_offset) >= 0:
            if (rel - sc.ckpt_offset) % sc.ckpt_period < sc.ckpt_length:
                return "off" if i == 0 else "spin"
        if sc.stall_period:
            k = int(rel // sc.stall_period)
            start = k * sc.stall_period + sc.stall_jitter * (2 * _unit(self.seed, -1, k, 7) - 1)
            if k >= 1 and start <= rel < start + sc.stall_length:
                return "stalled"
        if sc.dip_period and rel % sc.dip_period < sc.dip_length:
            return "dip"
        return "compute"

    def sample(self, i: int, t: float) -> Sample:
        rel = t - (self.t0 if self.t0 is not None else t)
        st = self.state(i, rel)
        k = int(rel * 1000)
        noise = (2 * _unit(self.seed, i, k) - 1) * self.sc.noise
        if st == "none":
            return Sample(t, util=0.0, power_w=IDLE_W - 8 + 4 * _unit(self.seed, i, k, 1),
                          memory_used_bytes=17 * 2**20)
        if st == "compute":
            util = min(1.0, max(0.0, self.level_of(i) + noise))
            power = IDLE_W + util * (LIMIT_W - IDLE_W) * 0.85
            if i == self.sc.slow_gpu and self.sc.slow_cause == "throttled":
                power = LIMIT_W - 4 * _unit(self.seed, i, k, 2)   # held at its cap
        elif st == "dip":
            util = self.sc.dip_level + noise
            power = IDLE_W + util * (LIMIT_W - IDLE_W) * 0.85
        elif st == "spin":
            util = 1.0
            power = SPIN_W + 10 * noise
        elif st == "off":
            util = max(0.0, 0.03 + noise)
            power = IDLE_W + 5 + 10 * noise
        else:  # stalled
            util = 0.0
            power = IDLE_W + 20 + 10 * noise
        return Sample(t, util=util, power_w=power, memory_used_bytes=(62 + (i % 3)) * GIB)

    # --------------------------------------------------------------- Source API

    def poll(self, now: float) -> PollResult:
        if self.t0 is None:
            self.t0 = now
        dt = 0.0 if self.last_t is None else max(0.0, now - self.last_t)
        self.last_t = now
        rel = now - self.t0
        readings = []
        for i in range(self.n):
            if self.sc.lost_gpu == i and rel >= self.sc.lost_after:
                readings.append(Reading(str(i), up=False, error="GPU is lost (simulated XID 79)",
                                        counters={"energy_joules_total": self.energy[i],
                                                  "xid_errors_total": {("79",): 1.0}}))
                continue
            s = self.sample(i, now)
            self.energy[i] += (s.power_w or 0.0) * dt
            idle = (s.util or 0.0) < 0.05
            if idle:
                self.idle_throttle[i] += dt
            temp = 32 + 48 * ((s.power_w or IDLE_W) - IDLE_W) / (LIMIT_W - IDLE_W)
            reading = Reading(
                str(i), samples=[s],
                gauges={
                    "memory_used_bytes": s.memory_used_bytes or 0.0,
                    "memory_total_bytes": float(MEM_TOTAL),
                    "power_watts": s.power_w or 0.0,
                    "power_limit_watts": LIMIT_W,
                    "temperature_celsius": round(temp, 1),
                    "memory_temperature_celsius": round(temp + 4, 1),
                    "sm_clock_hertz": (345 if idle else BOOST_MHZ) * MHZ,
                    "memory_clock_hertz": 2619 * MHZ,
                },
                counters={
                    "energy_joules_total": self.energy[i],
                    "throttle_seconds_total": {("gpu_idle",): self.idle_throttle[i]},
                },
            )
            if self.sc.slow_cause:
                self._slow_signals(i, reading, idle, dt, rel)
            readings.append(reading)
        return PollResult(readings)

    def _slow_signals(self, i: int, r: Reading, idle: bool, dt: float, rel: float) -> None:
        """What the slow GPU of a straggler-cause scenario reports (see module doc)."""
        sc = self.sc
        thr = self.throttle[i]
        thr["gpu_idle"] = self.idle_throttle[i]
        slow = i == sc.slow_gpu
        computing = self.state(i, rel) == "compute"
        if slow and computing:
            for reason in SLOW_REASONS.get(sc.slow_cause, ()):
                thr[reason] += dt
            if sc.slow_cause in SLOW_MHZ:
                r.gauges["sm_clock_hertz"] = SLOW_MHZ[sc.slow_cause] * MHZ
            if sc.slow_cause == "throttled":
                r.gauges["temperature_celsius"] = round(r.gauges["temperature_celsius"] + 8, 1)
        if slow and sc.slow_cause == "link-errors":
            self.replays[i] += PCIE_REPLAYS_PER_S * dt
            self.ecc[i] += ECC_CORRECTED_PER_S * dt
        r.counters["throttle_seconds_total"] = {(k,): v for k, v in thr.items()}
        r.counters["pcie_replays_total"] = float(int(self.replays[i]))
        r.counters["ecc_errors_total"] = {("corrected",): float(int(self.ecc[i])), ("uncorrected",): 0.0}
        r.gauges["remapping_pending"] = 0.0
