"""The per-GPU telemetry families a source may report, declared once.

Sources fill Reading.gauges / Reading.counters with these keys; the collector turns
each into `gpulse_gpu_<key>` with the per-GPU labels plus the extra labels listed
here. A source reports only what its device supports; a family with no values is
simply absent. docs/metrics.md documents every one (a test keeps them in step).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    key: str                       # metric is gpulse_gpu_<key>
    help: str
    labels: tuple[str, ...] = ()   # extra labels beyond node/gpu(/attribution)


GAUGES: dict[str, Family] = {f.key: f for f in (
    Family("memory_used_bytes", "Framebuffer memory in use."),
    Family("memory_total_bytes", "Framebuffer memory in total."),
    Family("power_watts", "Power draw."),
    Family("power_limit_watts", "Enforced power limit."),
    Family("temperature_celsius", "GPU die temperature."),
    Family("memory_temperature_celsius", "HBM/memory temperature."),
    Family("sm_clock_hertz", "SM clock frequency."),
    Family("memory_clock_hertz", "Memory clock frequency."),
    Family("fan_speed_ratio", "Fan speed as a fraction of its maximum."),
    Family("remapped_rows", "Rows remapped by the memory controller since boot.", ("type",)),
    Family("remapping_pending", "1 when a row remapping waits for a GPU reset."),
    Family("sm_active_ratio", "Fraction of time an SM had at least one warp resident, averaged over SMs (DCGM profiling)."),
    Family("tensor_active_ratio", "Fraction of cycles the tensor pipes were active (DCGM profiling)."),
    Family("dram_active_ratio", "Fraction of cycles the device memory interface was sending or receiving data (DCGM profiling)."),
    Family("memory_copy_utilization_ratio", "Fraction of time device memory was being read or written (DCGM_FI_DEV_MEM_COPY_UTIL)."),
    Family("gr_engine_active_ratio", "Fraction of time the graphics/compute engine was active (DCGM profiling)."),
    Family("pcie_link_generation", "PCIe link generation in use (the GPU lowers it while idle)."),
    Family("pcie_link_max_generation", "Highest PCIe link generation the GPU and its slot can reach."),
    Family("pcie_link_width", "PCIe lanes in use."),
    Family("pcie_link_max_width", "PCIe lanes the GPU and its slot can use."),
)}

COUNTERS: dict[str, Family] = {f.key: f for f in (
    Family("energy_joules_total", "Energy consumed since the driver loaded."),
    Family("throttle_seconds_total", "Time clocks were held down, by reason.", ("reason",)),
    Family("xid_errors_total", "XID errors reported by the driver, by XID code.", ("xid",)),
    Family("ecc_errors_total", "ECC errors since the driver loaded, by type (corrected/uncorrected).", ("type",)),
    Family("pcie_bytes_total", "Bytes moved over PCIe, by direction (tx/rx).", ("direction",)),
    Family("pcie_replays_total", "PCIe replay (retry) events."),
    Family("nvlink_bytes_total", "Bytes moved over NVLink, by direction (tx/rx).", ("direction",)),
    Family("nvlink_errors_total", "NVLink errors summed over the GPU's links, by type (crc_flit, crc_data, replay, "
                                  "recovery).", ("type",)),
)}

# NVLink error types, named after NVML's per-link error counters (nvmlNvLinkErrorCounter_t)
NVLINK_ERRORS = ("replay", "recovery", "crc_flit", "crc_data")

# Throttle reasons, named after NVML's clock-event reasons (nvmlClocksEventReason*).
THROTTLE_REASONS = (
    "gpu_idle", "applications_clocks", "sw_power_cap", "hw_slowdown", "sync_boost",
    "sw_thermal", "hw_thermal", "hw_power_brake", "display_clocks",
)
