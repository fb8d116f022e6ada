"""XIDs are drained from NVML's event queue on the polling thread, at each read,
through the real pynvml ctypes path against the fake libnvidia-ml: no thread of
their own, and a storm larger than one drain is counted over the following reads
with none lost (the driver queues events until they are read)."""
from __future__ import annotations

import threading

from gpulse.sources.nvml import events as nvml_events
from nvmlfixtures import fake, nvml, readings  # noqa: F401 (fake, nvml: fixtures)


def total(reading) -> float:
    return sum((reading.counters.get("xid_errors_total") or {}).values())


def test_xids_are_drained_by_the_polling_thread(nvml):  # noqa: F811
    before = threading.active_count()
    o = nvml("gpus 2\nxid 1 at=0.2 code=79\nxid 1 at=0.3 code=48\n")
    assert threading.active_count() == before, "opening the source started a thread"
    res = o.drive(2.6)
    assert threading.active_count() == before
    last = {x.gpu: x for x in res[-1].readings}
    assert last["1"].counters["xid_errors_total"] == {("79",): 1, ("48",): 1}
    assert "xid_errors_total" not in last["0"].counters


def test_a_storm_larger_than_one_drain_is_counted_over_the_next_reads(nvml, monkeypatch):  # noqa: F811
    monkeypatch.setattr(nvml_events, "MAX_PER_DRAIN", 100)
    storm = "\n".join(f"xid 0 at=0 code={(13, 31, 43, 79)[i % 4]}" for i in range(256))   # the fake's maximum
    o = nvml(f"gpus 1\n{storm}\n")
    res = o.drive(3.6)
    seen = [total(r) for r in readings(res, "0")]
    counted = sorted(set(seen) - {0})
    assert counted[:3] == [100, 200, 256] and counted[-1] == 256, seen
    last = readings(res, "0")[-1].counters["xid_errors_total"]
    assert last == {("13",): 64, ("31",): 64, ("43",): 64, ("79",): 64}
