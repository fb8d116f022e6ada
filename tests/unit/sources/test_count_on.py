"""CountOn: counters as a source reports them -> as gpulse exports them. A labelled
family taken a reading at a time (counters(), a log's rows) counts on exactly as the
one-counter call does (dcgm-exporter's series), resets included, per GPU."""
from __future__ import annotations

import random

from gpulse.sources.base import CountOn

LABELS = [("sw_power_cap",), ("hw_slowdown",), ("sw_thermal",)]


def test_a_labelled_family_counts_on_as_each_counter_alone():
    rnd = random.Random(7)
    by_family, one_by_one = CountOn(), CountOn()
    raw = {(g, lab): 0.0 for g in "01" for lab in LABELS}
    for step in range(400):
        gpu = rnd.choice("01")
        reading = {}
        for lab in LABELS:
            x = raw[(gpu, lab)]
            # mostly growing, sometimes flat, now and then a reset (the logger restarted)
            x = rnd.uniform(0, 3) if rnd.random() < 0.05 else x + rnd.choice([0.0, 0.1, 0.25])
            raw[(gpu, lab)] = reading[lab] = x
        got = by_family.counters(gpu, {"throttle_seconds_total": reading, "energy_joules_total": step * 2.0})
        want = {lab: one_by_one((gpu, "throttle_seconds_total", lab), "throttle_seconds_total", x)
                for lab, x in reading.items()}
        assert got["throttle_seconds_total"] == want
        assert got["energy_joules_total"] == one_by_one((gpu, "energy_joules_total"), "energy_joules_total",
                                                        step * 2.0)
        # counted on, a counter never goes backwards however the raw one moved
        assert all(v >= 0 for v in got["throttle_seconds_total"].values())
    resets = by_family.take_resets()
    assert resets == one_by_one.take_resets() and resets["throttle_seconds_total"] > 0
    assert by_family.take_resets() == {}


def test_forget_starts_a_gpu_over_and_keeps_the_others():
    c = CountOn()
    c.counters("0", {"xid_errors_total": {("79",): 5.0}})
    c.counters("1", {"xid_errors_total": {("79",): 5.0}})
    c.forget("0")
    # GPU 0's next reading is its first again: taken as is, no reset
    assert c.counters("0", {"xid_errors_total": {("79",): 2.0}}) == {"xid_errors_total": {("79",): 2.0}}
    # GPU 1 still remembers 5: a 2 is a reset, counted on from 5
    assert c.counters("1", {"xid_errors_total": {("79",): 2.0}}) == {"xid_errors_total": {("79",): 7.0}}
    assert c.take_resets() == {"xid_errors_total": 1}


def test_a_gpu_s_rows_at_once_count_on_as_one_at_a_time():
    """counters_each (a replayed log's rows of one GPU in one call) gives each row's
    counters() and leaves the same state, resets and families that come and go
    included; rows that repeat the row before (a counter that sits still) among them."""
    rnd = random.Random(11)
    batched, single = CountOn(), CountOn()
    raw: dict = {}
    for _ in range(60):
        gpu = rnd.choice("01")
        rows = []
        for _ in range(rnd.randint(0, 9)):
            if rows and rnd.random() < 0.3:
                # the row before again: nothing moved
                rows.append({f: dict(v) if isinstance(v, dict) else v for f, v in rows[-1].items()})
                continue
            row = {}
            for fam in ("throttle_seconds_total", "xid_errors_total", "pcie_replays_total"):
                if rnd.random() < 0.2:
                    continue          # a family missing from a row
                if fam == "pcie_replays_total":
                    x = raw.get((gpu, fam), 0.0)
                    row[fam] = raw[(gpu, fam)] = rnd.uniform(0, 3) if rnd.random() < 0.05 else x + rnd.choice([0, 1])
                    continue
                row[fam] = {}
                for lab in LABELS[:rnd.randint(1, 3)]:
                    x = raw.get((gpu, fam, lab), 0.0)
                    x = rnd.uniform(0, 3) if rnd.random() < 0.05 else x + rnd.choice([0.0, 0.1, 0.25])
                    row[fam][lab] = raw[(gpu, fam, lab)] = x
            rows.append(row)
        got, want = batched.counters_each(gpu, rows), [single.counters(gpu, r) for r in rows]
        # the same values, families and labels in the same order (a row equal to the
        # one before shares its dict)
        assert got == want
        assert [[(f, list(v) if isinstance(v, dict) else v) for f, v in c.items()] for c in got] == \
            [[(f, list(v) if isinstance(v, dict) else v) for f, v in c.items()] for c in want]
    resets = batched.take_resets()
    assert resets == single.take_resets() and sum(resets.values()) > 0
    for gpu in "01":
        last = {"throttle_seconds_total": {lab: 0.0 for lab in LABELS}, "xid_errors_total": {LABELS[0]: 0.0},
                "pcie_replays_total": 0.0}
        assert batched.counters(gpu, last) == single.counters(gpu, last)


def test_a_family_that_sits_still_keeps_the_order_its_reading_gives():
    """A family whose values did not move is given the dict of its last reading
    (shared); one that repeats its values in another order of labels gets them in
    that order, as one that moved would."""
    c = CountOn()
    a, b = ("a",), ("b",)
    first = c.counters("0", {"f": {a: 1.0, b: 2.0}})["f"]
    again = c.counters("0", {"f": {a: 1.0, b: 2.0}})["f"]
    assert again == first and list(again) == [a, b]
    swapped = c.counters("0", {"f": {b: 2.0, a: 1.0}})["f"]
    assert swapped == {a: 1.0, b: 2.0} and list(swapped) == [b, a]
    moved = c.counters("0", {"f": {a: 1.5, b: 2.0}})["f"]
    assert moved == {a: 1.5, b: 2.0} and list(moved) == [a, b]
    still = c.counters("0", {"f": {a: 1.5, b: 2.0}})["f"]
    assert still == moved and list(still) == [a, b]
