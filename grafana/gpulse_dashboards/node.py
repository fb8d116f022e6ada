"""Everything gpulse knows about the GPUs of one node."""
from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from gpulse import rulenames as R

from . import queries as Q
from .common import (CLUSTER, BYTES, BYTES_PER_SECOND, CELSIUS, COUNT, HERTZ, JOULES, RATIO, WATTS, alerts_annotation,
                     label_variable, new_dashboard, query)
from .panels import merge_table, state_timeline, table_panel, time_series, value_text

UID = "gpulse-node-detail"
SEL = f'{CLUSTER}, node="$node", gpu=~"$gpu"'


def _rate(metric: str, by: str = "node, gpu") -> str:
    return f"sum by ({by}) (rate({metric}{{{SEL}}}[$__rate_interval]))"


def build() -> db.Dashboard:
    d = (new_dashboard(UID, "GPU node detail",
                       "Utilisation, memory, power, temperature, clocks, throttling and errors of the "
                       "GPUs of one node.", time_from="now-3h")
         .with_variable(label_variable("node", "Node", 'label_values(gpulse_gpu_up{cluster=~"$cluster"}, node)',
                                       multi=False, include_all=False))
         .with_variable(label_variable("gpu", "GPU", 'label_values(gpulse_gpu_up{cluster=~"$cluster", node="$node"}, gpu)'))
         .annotation(alerts_annotation('node="$node"')))

    d = (d
         .with_panel(table_panel(
             "GPUs", "Identity of each GPU (model, UUID, PCI bus id, driver, MIG profile) and whether "
             "its last poll succeeded.", COUNT,
             query(f"gpulse_gpu_info{{{SEL}}}", "", "A", instant=True, table=True),
             query(f"gpulse_gpu_up{{{SEL}}}", "", "B", instant=True, table=True),
             transformations=merge_table({"Value #B": "up"}, hide=("Time", "__name__", "instance", "job",
                                                                    "Value #A", "node")),
             h=6, w=24)))

    d = (d.with_row(db.Row("Utilisation"))
         .with_panel(time_series(
             "Busy ratio and SM activity",
             "Busy = a kernel was running (NVML utilisation); active = real work. A GPU busy but not "
             "active is spinning in a collective, waiting for another rank.", RATIO,
             query(f"{R.GPU_BUSY_1M}{{{SEL}}}", "{{gpu}} busy", "A"),
             query(f"{R.GPU_ACTIVE_1M}{{{SEL}}}", "{{gpu}} active", "B"),
             min_val=0, max_val=1))
         .with_panel(state_timeline(
             "GPU up", "Whether each GPU could be read (green) or not (red: lost, hung, erroring).", COUNT,
             query(f"gpulse_gpu_up{{{SEL}}}", "GPU {{gpu}}"),
             mappings=value_text({"1": ("up", "green"), "0": ("down", "red")}))))

    d = (d.with_row(db.Row("Memory and power"))
         .with_panel(time_series(
             "Memory used", "Framebuffer memory in use per GPU. Memory held with no activity is a job "
             "that is loaded but not running.", BYTES,
             query(f"gpulse_gpu_memory_used_bytes{{{SEL}}}", "GPU {{gpu}}", "A"),
             query(f'max(gpulse_gpu_memory_total_bytes{{{SEL}}})', "capacity", "B"),
             min_val=0, w=8))
         .with_panel(time_series(
             "Power", "Power draw per GPU and the lowest enforced limit. Real compute draws near the "
             "limit; a GPU at 100 % busy and idle-level power is spin-waiting.", WATTS,
             query(f"gpulse_gpu_power_watts{{{SEL}}}", "GPU {{gpu}}", "A"),
             query(f"min(gpulse_gpu_power_limit_watts{{{SEL}}})", "limit", "B"),
             min_val=0, w=8))
         .with_panel(table_panel(
             "Energy in range", "Energy each GPU consumed over the selected time range.", JOULES,
             query(f"sum by (cluster, gpu) (increase(gpulse_gpu_energy_joules_total{{{SEL}}}[$__range]))", "",
                   instant=True, table=True),
             transformations=merge_table({"Value": "energy"}), w=8)))

    d = (d.with_row(db.Row("Thermals and clocks"))
         .with_panel(time_series(
             "Temperature", "GPU die and memory (HBM) temperature. Thermal slowdown starts in the high 80s "
             "(die) and mid 90s (HBM); a GPU much hotter than its neighbours will straggle.", CELSIUS,
             query(f"gpulse_gpu_temperature_celsius{{{SEL}}}", "GPU {{gpu}} die", "A"),
             query(f"gpulse_gpu_memory_temperature_celsius{{{SEL}}}", "GPU {{gpu}} memory", "B"),
             w=8))
         .with_panel(time_series(
             "Clocks", "SM and memory clock frequencies. SM clocks dropping under load go with the "
             "throttle reasons next to this panel.", HERTZ,
             query(f"gpulse_gpu_sm_clock_hertz{{{SEL}}}", "GPU {{gpu}} SM", "A"),
             query(f"gpulse_gpu_memory_clock_hertz{{{SEL}}}", "GPU {{gpu}} memory", "B"),
             min_val=0, w=8))
         .with_panel(time_series(
             "Throttle reasons", "Share of time the clocks were held down, by reason, averaged over the "
             "selected GPUs. gpu_idle is harmless; sw_power_cap, hw_slowdown and the thermal reasons "
             "under load slow training.", RATIO,
             query(f"avg by (cluster, reason) (rate(gpulse_gpu_throttle_seconds_total{{{SEL}}}[$__rate_interval]))",
                   "{{reason}}"),
             min_val=0, max_val=1, w=8)))

    d = (d.with_row(db.Row("Errors"))
         .with_panel(time_series(
             "XID errors", "Driver XID errors by GPU and code per step. 79 = GPU fell off the bus, "
             "48/63/64/94/95 = memory errors, 13/31/43 = application faults.", COUNT,
             query(f"sum by (cluster, gpu, xid) (increase(gpulse_gpu_xid_errors_total{{{SEL}}}[$__rate_interval]))",
                   "GPU {{gpu}} XID {{xid}}"),
             bars=True, min_val=0))
         .with_panel(time_series(
             "ECC errors", "Corrected and uncorrected ECC errors per step. Uncorrected errors need a "
             "GPU reset; a steady stream of corrected ones precedes row remapping.", COUNT,
             query(f"sum by (cluster, gpu, type) (increase(gpulse_gpu_ecc_errors_total{{{SEL}}}[$__rate_interval]))",
                   "GPU {{gpu}} {{type}}"),
             bars=True, min_val=0)))

    d = (d.with_row(db.Row("Interconnect"))
         .with_panel(time_series(
             "PCIe throughput", "Bytes per second over PCIe per GPU and direction (host ↔ GPU "
             "transfers, input data, checkpoints).", BYTES_PER_SECOND,
             query(_rate("gpulse_gpu_pcie_bytes_total", "cluster, gpu, direction"), "GPU {{gpu}} {{direction}}"),
             min_val=0))
         .with_panel(time_series(
             "NVLink throughput", "Bytes per second over NVLink per GPU and direction: the all-reduce "
             "traffic of data-parallel training. It stops during a sync stall.", BYTES_PER_SECOND,
             query(_rate("gpulse_gpu_nvlink_bytes_total", "cluster, gpu, direction"), "GPU {{gpu}} {{direction}}"),
             min_val=0)))
    return d
