"""The cause of a straggler (analysis/cause.py): classify() on hand-built span
aggregates and the cumulative vectors it is computed from (every straggler-cause sim
scenario through the engine: integration/cause/test_cause_scenarios.py)."""
import math
import statistics
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulse.analysis import cause
from gpulse.analysis.cause import CAUSES, REMEDIES, Aggregate, Verdict, classify
from gpulse.analysis.integrate import Integrals
from gpulse.analysis.thresholds import value
from gpulse.catalog import THROTTLE_REASONS

NO_THROTTLE = dict.fromkeys(THROTTLE_REASONS, 0.0)
SPAN = 300.0


def peer(**over):
    """A healthy peer over a 300 s span: computes 55 % of each step, spin-waits the rest."""
    base = dict(busy=0.97, active=0.52, spin_wait=0.45, seconds=SPAN, sm_clock_hz=1980e6,
                temperature_c=70.0, power_w=380.0, power_limit_w=700.0, remapping_pending=False,
                pcie_replays=0.0, ecc_uncorrected=0.0, xid=0.0, throttle=dict(NO_THROTTLE))
    base.update(over)
    return Aggregate(**base)


def hot(**over):
    """The straggler computing 90 % of each step, as healthy as its peers unless told."""
    return peer(**{"busy": 0.96, "active": 0.90, "spin_wait": 0.06, "power_w": 540.0, **over})


PEERS = [peer() for _ in range(7)]


def throttle(**reasons):
    return {**NO_THROTTLE, **{r: share * SPAN for r, share in reasons.items()}}


def test_contract_names():
    assert CAUSES == ("throttling", "degraded_hardware", "more_work", "off_gpu", "unknown")
    assert set(REMEDIES) == set(CAUSES)
    assert "rebalance" in REMEDIES["more_work"] and "more GPUs or overclocking will not help" in REMEDIES["more_work"]
    for c in ("throttling", "degraded_hardware"):
        assert "rebalance" not in REMEDIES[c].lower().replace("do not rebalance", "")
    assert "dcgmi diag" in REMEDIES["degraded_hardware"]
    assert Verdict("off_gpu", (), ()).remedy == REMEDIES["off_gpu"]
    assert Verdict("unknown", (), ("sm_clock",)).remedy.endswith("(missing here: sm_clock)")


def test_thermal_throttling_with_its_evidence():
    v = classify(hot(sm_clock_hz=1410e6, temperature_c=88.0, power_w=698.0,
                     throttle=throttle(hw_thermal=0.62)), PEERS)
    assert v.cause == "throttling" and v.missing == ()
    assert "hw_thermal throttle 62% of span" in v.evidence
    assert "sm clock 1410 MHz vs peers 1980 MHz" in v.evidence
    assert any(e.startswith("temperature 88 °C") for e in v.evidence)
    assert any(e.startswith("power 698 W at its 700 W limit") for e in v.evidence)


def test_power_cap_shared_by_every_gpu_is_no_cause_and_no_rebalance():
    # every GPU of the group sits at its power cap half the time: that is the
    # cluster's budget, not what sets this GPU apart; but a GPU held by its cap is
    # never told to rebalance: unknown, naming the signal
    peers = [peer(throttle=throttle(sw_power_cap=0.5)) for _ in range(7)]
    v = classify(hot(throttle=throttle(sw_power_cap=0.55)), peers)
    assert v.cause == "unknown" and v.missing == ()
    assert "sw_power_cap throttle 55% of span, as on its peers" in v.evidence
    assert not v.remedy.startswith("rebalance")


@pytest.mark.parametrize("over, words", [
    (dict(link_width=8.0, link_width_max=16.0), "PCIe link x8 of x16 (peers x16)"),
    (dict(link_gen=4.0, link_gen_max=5.0), "PCIe link gen 4 of gen 5 (peers gen 5)"),
    (dict(nvlink_errors=240.0), "240 NVLink errors in span vs peers 0"),
])
def test_degraded_link_is_hardware_never_more_work(over, words):
    """A GPU computing longer because its link is degraded is no GPU with more work."""
    healthy = dict(link_width=16.0, link_width_max=16.0, link_gen=5.0, link_gen_max=5.0, nvlink_errors=0.0)
    peers = [peer(**healthy) for _ in range(7)]
    v = classify(hot(**{**healthy, **over}), peers)
    assert v.cause == "degraded_hardware" and words in v.evidence, v


def test_idle_gpu_lowering_its_link_generation_is_no_fault():
    # a cold straggler idles: its GPU lowers the PCIe generation to save power
    healthy = dict(link_width=16.0, link_width_max=16.0, link_gen=5.0, link_gen_max=5.0)
    cold = peer(**{**healthy, "busy": 0.4, "active": 0.35, "spin_wait": 0.05, "link_gen": 2.5})
    peers = [peer(**healthy, busy=0.99, spin_wait=0.1) for _ in range(7)]
    assert classify(cold, peers).cause == "more_work"


def test_link_below_its_maximum_on_every_gpu_is_no_cause_and_no_rebalance():
    peers = [peer(link_width=8.0, link_width_max=16.0) for _ in range(7)]
    v = classify(hot(link_width=8.0, link_width_max=16.0), peers)
    assert v.cause == "unknown" and "PCIe link x8 of x16, as on its peers" in v.evidence, v


def test_throttled_gpu_is_never_told_to_rebalance():
    # however much more work it seems to have, and whichever way it deviates
    for s in (hot(throttle=throttle(sw_power_cap=0.3)),
              hot(active=0.99, busy=0.99, throttle=throttle(hw_thermal=0.2)),
              peer(busy=0.4, active=0.3, spin_wait=0.0, throttle=throttle(sw_thermal=0.5)),
              hot(throttle=None, sm_clock_hz=1500e6, power_w=699.0)):
        v = classify(s, PEERS)
        assert v.cause == "throttling", (s, v)
        assert "rebalance" not in REMEDIES[v.cause].lower().replace("do not rebalance", "")


def test_some_reasons_only_are_no_known_reasons():
    # a log with the power cap's Active / Not Active column alone: a GPU held down by
    # heat shows no reason there, and must not read as "no reason set"
    only_power = {"sw_power_cap": 0.0}
    v = classify(hot(throttle=only_power, sm_clock_hz=1410e6, temperature_c=88.0), [peer(throttle=only_power)] * 7)
    assert v.cause == "throttling" and v.missing == ("throttle_reasons",), v
    # and the one column it has is evidence when it holds
    v = classify(hot(throttle={"sw_power_cap": 0.9 * SPAN}, sm_clock_hz=1600e6), [peer(throttle=only_power)] * 7)
    assert v.cause == "throttling" and v.missing == () and "sw_power_cap throttle 90% of span" in v.evidence


def test_throttling_without_throttle_reasons_says_they_are_missing():
    v = classify(hot(throttle=None, sm_clock_hz=1500e6, temperature_c=85.0), [peer(throttle=None)] * 7)
    assert v.cause == "throttling" and v.missing == ("throttle_reasons",)


@pytest.mark.parametrize("over, words", [
    ({"throttle": throttle(hw_slowdown=0.4), "sm_clock_hz": 1200e6}, "hw_slowdown throttle 40% of span"),
    ({"remapping_pending": True}, "row remapping pending"),
    ({"ecc_uncorrected": 2.0}, "2 uncorrectable ECC errors in span"),
    ({"xid": 1.0}, "1 XID errors in span"),
    ({"pcie_replays": 500.0}, "500 PCIe replays in span vs peers 0"),
    ({"sm_clock_hz": 1500e6}, "sm clock 1500 MHz vs peers 1980 MHz, no throttle reason set"),
])
def test_degraded_hardware(over, words):
    v = classify(hot(**over), PEERS)
    assert v.cause == "degraded_hardware" and v.missing == ()
    assert any(e.startswith(words) for e in v.evidence), v.evidence


def test_a_few_replays_every_gpu_sees_are_no_cause():
    peers = [peer(pcie_replays=100.0) for _ in range(7)]
    n = 100 + value("cause_pcie_replays_count") - 1
    assert classify(hot(pcie_replays=n), peers).cause == "more_work"
    assert classify(hot(pcie_replays=n + 1), peers).cause == "degraded_hardware"


def test_more_work_when_clocks_and_health_are_in_line():
    v = classify(hot(), PEERS)
    assert v.cause == "more_work" and v.missing == ()
    assert "active 90% vs peers 52%" in v.evidence
    assert "sm clock 1980 MHz vs peers 1980 MHz" in v.evidence
    assert any(e.startswith("peers spin-wait") for e in v.evidence)


def test_clock_in_line_rules_out_throttling_without_reasons():
    v = classify(hot(throttle=None), [peer(throttle=None)] * 7)
    assert v.cause == "more_work"


def test_hot_straggler_without_clocks_or_reasons_is_unknown_and_says_why():
    v = classify(hot(throttle=None, sm_clock_hz=None), [peer(throttle=None, sm_clock_hz=None)] * 7)
    assert v.cause == "unknown" and v.missing == ("throttle_reasons", "sm_clock")
    # a lower clock without reasons or a limit reached: throttled or degraded, undecided
    v = classify(hot(throttle=None, sm_clock_hz=1500e6), [peer(throttle=None)] * 7)
    assert v.cause == "unknown" and v.missing == ("throttle_reasons",)


def test_cold_straggler_while_peers_spin_wait_is_off_gpu():
    v = classify(peer(busy=0.39, active=0.37, spin_wait=0.0, power_w=75.0, sm_clock_hz=900e6),
                 [peer(busy=0.97, active=0.38, spin_wait=0.59) for _ in range(7)])
    assert v.cause == "off_gpu"
    assert "busy 39% vs peers 97%" in v.evidence
    assert any(e.startswith("peers spin-wait 61%") for e in v.evidence)


def test_cold_straggler_whose_peers_wait_under_half_their_busy_time_is_off_gpu():
    # Alibaba PAI worker 6 off the GPU ~37 % of its slow steps: peers read 100 % busy
    # and spin-wait 42 % of it, under spin_wait_share_ratio, yet they wait out what it
    # lacks; with 1 s-averaged power too (the spin-waits seen are evidence enough)
    peers = [peer(busy=1.0, active=0.58, spin_wait=0.42) for _ in range(9)]
    straggler = peer(busy=0.63, active=0.59, spin_wait=0.04, power_w=311.0)
    assert 0.42 < value("spin_wait_share_ratio")
    for averaged in (False, True):
        v = classify(straggler, peers, power_averaged=averaged)
        assert v.cause == "off_gpu", (averaged, v)
        assert "they wait 42% of the time for its 37% less busy time" in v.evidence


def test_cold_straggler_whose_peers_barely_wait_gets_less_work():
    # the same cold straggler, but its peers compute through what it lacks (they spin
    # only in the all-reduce): peers waiting, not a share of their busy time, decides
    peers = [peer(busy=1.0, active=0.94, spin_wait=0.06) for _ in range(9)]
    v = classify(peer(busy=0.63, active=0.6, spin_wait=0.03, power_w=300.0), peers)
    assert v.cause == "more_work" and v.evidence[-1].endswith("it gets less work")
    # the threshold is the boundary: waiting just under / at half its deficit
    lack, ratio = 1.0 - 0.63, value("cause_peers_wait_ratio")
    for wait, want in (((ratio - 0.01) * lack, "more_work"), (ratio * lack + 1e-9, "off_gpu")):
        ps = [peer(busy=1.0, active=1.0 - wait, spin_wait=wait) for _ in range(9)]
        assert classify(peer(busy=0.63, active=0.6, spin_wait=0.03), ps).cause == want, wait


def test_cold_straggler_whose_peers_compute_gets_less_work():
    # the seed case's other half: peers really compute (no spin-wait) -> work distribution
    peers = [peer(busy=0.99, active=0.99, spin_wait=0.0) for _ in range(7)]
    v = classify(peer(busy=0.12, active=0.12, spin_wait=0.0, power_w=134.0), peers)
    assert v.cause == "more_work"
    # with 1 s-averaged power the peers' spin-waiting may be hidden: say so
    v = classify(peer(busy=0.12, active=0.12, spin_wait=0.0, power_w=134.0), peers, power_averaged=True)
    assert v.cause == "unknown" and v.missing == ("instant_power",)


def test_no_deviation_over_the_span_is_unknown():
    v = classify(peer(), PEERS)
    assert v.cause == "unknown" and v.missing == ()


def test_aggregate_is_the_difference_of_two_vectors():
    g = {"sm_clock_hertz": 1400e6, "temperature_celsius": 80.0, "power_watts": 690.0,
         "power_limit_watts": 700.0, "remapping_pending": 0.0}
    sums = cause.new_sums()
    cause.accumulate(sums, g)
    a = cause.vector(sums, Integrals(10, 8, 1, 0.0, 10), {"throttle_seconds_total": {("hw_thermal",): 5.0},
                                                         "pcie_replays_total": 3.0})
    for _ in range(3):   # three more ticks
        cause.accumulate(sums, {**g, "sm_clock_hertz": 1200e6})
    b = cause.vector(sums, Integrals(40, 30, 5, 0.0, 40), {"throttle_seconds_total": {("hw_thermal",): 20.0},
                                                          "pcie_replays_total": 13.0, "xid_errors_total": {("79",): 1.0}})
    agg = cause.aggregate(a, b)
    assert agg.seconds == 30 and agg.busy == 1.0 and agg.active == pytest.approx(22 / 30)
    assert agg.sm_clock_hz == pytest.approx(1200e6)
    # the reasons the source reports, each; one it does not is unknown, not zero
    assert agg.throttle == {"hw_thermal": 15.0}
    assert agg.pcie_replays == 10.0
    assert agg.xid == 1.0               # first seen within the stretch: counted from zero
    assert agg.ecc_uncorrected is None  # never reported: unknown, not zero
    assert agg.remapping_pending is False
    # a source without throttle reasons leaves them unknown
    assert cause.aggregate(None, cause.vector(cause.new_sums(), Integrals(1, 1, 0, 0, 1), {})).throttle is None
    assert math.isnan(b[cause.SLOTS.index("ecc_uncorrected")])


# ---------------------------------------------------------------- one stretch, many GPUs

# what classify() reads of each peer, spelled on the peer's own Aggregate
PEER_FIGURES = {
    **{f: (lambda f: lambda a: getattr(a, f))(f)
       for f in ("busy", "active", "spin_wait", "sm_clock_hz", "temperature_c", "power_w", "link_width",
                 "link_gen", "pcie_replays", "nvlink_errors")},
    "spin_per_busy": lambda a: a.spin_wait / a.busy if a.spin_wait is not None and a.busy else None,
    **{"share:" + r: (lambda r: lambda a: cause._throttle_share(a, r)
                      if a.throttle is not None and r in a.throttle else None)(r)
       for r in cause.JUDGED_REASONS},
}


def _median_of(xs):
    ys = [x for x in xs if x is not None]
    return statistics.median(ys) if ys else None


def _same(a, b):
    return a == b or (a is not None and b is not None and math.isnan(a) and math.isnan(b))


# a slot's value: mostly a few repeated ones (ties between GPUs), sometimes NaN (a
# family not reported; a gauge read as NaN) or nothing sampled
_values = st.one_of(st.sampled_from([0.0, 1.0, 2.0, 5.0, 7.5]), st.floats(0, 1e4, allow_nan=False),
                    st.just(math.nan))


@st.composite
def _stretches(draw):
    n = draw(st.integers(1, 9))
    pairs = []
    for _ in range(n):
        end = [draw(_values) for _ in cause.SLOTS]
        start = None if draw(st.booleans()) else [min(x, draw(_values)) for x in end]
        pairs.append((start, end))
    return pairs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pairs=_stretches())
def test_a_stretchs_medians_are_the_peers_medians_and_its_verdicts_classifys(pairs):
    """Many GPUs judged over one stretch share its columns (a fleet's job judges a rank
    per node against every GPU): the same median of every figure over the others, and
    the same verdict, as classify() given each peer's aggregate in turn."""
    stretch = cause.Stretch(pairs)
    aggs = [cause.aggregate(s, e) for s, e in pairs]
    for j in range(len(pairs)):
        for name, figure in PEER_FIGURES.items():
            want = _median_of([figure(a) for k, a in enumerate(aggs) if k != j])
            got = stretch.median(name, j)
            assert _same(got, want), (name, j, got, want)
        own = stretch.own(j)
        assert all(_same(getattr(own, f), getattr(aggs[j], f)) for f in Aggregate.__slots__ if f != "throttle")
        assert own.throttle == aggs[j].throttle
        want = classify(aggs[j], [a for k, a in enumerate(aggs) if k != j])
        assert cause.verdict_of(stretch, j) == want


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pairs=_stretches(), data=st.data())
def test_a_stretchs_medians_without_several_gpus_are_the_others_medians(pairs, data):
    """A slow node's GPUs are judged against the other nodes' over one Stretch of the
    whole job: the median of every figure without several GPUs (ties among them and the
    rest, NaN, absent figures) is the median over the GPUs left, and so is the verdict
    of one of them against those."""
    stretch = cause.Stretch(pairs)
    aggs = [cause.aggregate(s, e) for s, e in pairs]
    out = tuple(sorted(data.draw(st.sets(st.integers(0, len(pairs) - 1), min_size=1))))
    for name, figure in PEER_FIGURES.items():
        want = _median_of([figure(a) for k, a in enumerate(aggs) if k not in out])
        got = stretch.median(name, out)
        assert _same(got, want), (name, out, got, want)
    j = out[0]
    want = classify(aggs[j], [a for k, a in enumerate(aggs) if k not in out])
    assert classify(stretch.own(j), cause.Peers(stretch, out)) == want


def test_span_verdict_adds_up_a_gpus_stretches():
    """Two stretches of a straggler's span are one: the same verdict as the whole."""
    def vec(t, busy, active, spin):
        return cause.vector(cause.new_sums(), Integrals(busy * t, active * t, spin * t, 0.0, t), {})
    a0, a1, a2 = vec(0, 0, 0, 0), vec(100, 0.4, 0.38, 0.0), vec(200, 0.4, 0.38, 0.0)
    p0, p1, p2 = vec(0, 0, 0, 0), vec(100, 0.97, 0.5, 0.47), vec(200, 0.97, 0.5, 0.47)
    split = cause.span_verdict([(a0, a1), (a1, a2)], cause.span_peers([[(p0, p1), (p1, p2)]] * 5))
    whole = cause.span_verdict([(a0, a2)], cause.span_peers([[(p0, p2)]] * 5))
    assert split == whole and split.cause == "off_gpu"


_GAUGE_KEYS = [key for _, _, key in cause._GAUGE_SLOTS]
_gauge_value = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 6, 10 ** 6),
                         st.floats(allow_nan=True, allow_infinity=True))


_gauge_keys = st.sampled_from(_GAUGE_KEYS + ["memory_used_bytes"])
# readings of one set of fields (a log's rows, the common case), or of any
_one_set = st.lists(_gauge_keys, unique=True).flatmap(
    lambda keys: st.lists(st.fixed_dictionaries({k: _gauge_value for k in keys}), max_size=30))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_one_set, st.lists(st.dictionaries(_gauge_keys, _gauge_value), max_size=30)),
       st.lists(st.tuples(st.integers(0, 2 ** 40), st.floats(-1e12, 1e12)),
                min_size=len(_GAUGE_KEYS), max_size=len(_GAUGE_KEYS)))
def test_a_readings_instants_summed_at_once_are_the_same_bits_as_one_by_one(readings, start):
    """The engine sums a replayed chunk's instants a slot at a time (accumulate_each): each
    slot's sum and count (a whole number, as it only ever adds ones) must be what
    accumulate() makes of them one reading at a time, to the bit (the findings are
    compared byte for byte across trees), missing values, integers, booleans and NaN
    included."""
    one = cause.new_sums()
    for (n, i, _), (count, total) in zip(cause._GAUGE_SLOTS, start):
        one[n], one[i] = float(count), total
    each = list(one)
    for r in readings:
        cause.accumulate(one, r)
    cause.accumulate_each(each, readings)
    assert [struct.pack("<d", x) for x in each] == [struct.pack("<d", x) for x in one]
