"""analysis.verdict.imbalance_explained: the one rule by which stragglers, not
imbalance, explain a group's spread (the report's finding and the live gauge)."""
from gpulse.analysis.verdict import imbalance_explained

EVEN = {"0": 0.95, "1": 0.96, "2": 0.94, "3": 0.95}


def test_one_slow_gpu_explains_the_spread():
    acts = {**EVEN, "3": 0.40}
    assert imbalance_explained(acts, {"3"})
    assert not imbalance_explained(acts, {"0"})     # a GPU on the busy side does not
    assert not imbalance_explained(acts, set())     # nor does nobody


def test_hot_gpus_explain_the_spread_from_above():
    acts = {"0": 0.60, "1": 0.62, "2": 0.61, "3": 0.98, "4": 0.97}
    assert imbalance_explained(acts, ["3", "4"])
    assert not imbalance_explained(acts, ["3"])      # 4 is as hot and no straggler


def test_two_halves_are_imbalance_whoever_deviates():
    # the seed case's shape: two at 99 %, two under 15 %; one of them is not the spread
    acts = {"0": 0.99, "1": 0.99, "2": 0.15, "3": 0.12}
    assert not imbalance_explained(acts, {"3"})
    assert imbalance_explained(acts, {"2", "3"})    # both low GPUs stragglers: theirs


def test_no_spread_is_never_explained():
    assert not imbalance_explained({"0": 0.5, "1": 0.5, "2": 0.5}, {"1"})
    assert not imbalance_explained({}, {"1"})
