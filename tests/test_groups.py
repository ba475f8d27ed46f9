"""pilothouse.gui.groups: runs grouped by a config key or a name pattern; a group's mean and min/max band."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pilothouse.gui.groups import UNSET, band, group_runs


def reference(series):
    """band() the slow way: a dict per x of each run's last value there."""
    per_x: dict[float, list[float]] = {}
    for xs, ys in series:
        last = dict(zip(map(float, xs), map(float, ys)))
        for x, y in last.items():
            per_x.setdefault(x, []).append(y)
    xs = sorted(per_x)
    finite = [[v for v in per_x[x] if math.isfinite(v)] for x in xs]
    mean = [sum(v) / len(v) if v else math.nan for v in finite]
    lo = [min(v) if v else math.nan for v in finite]
    hi = [max(v) if v else math.nan for v in finite]
    return xs, mean, lo, hi, [len(v) for v in finite]


def check(series):
    got = band(series)
    want = reference(series)
    np.testing.assert_array_equal(got[0], want[0])
    for g, w in zip(got[1:4], want[1:4]):
        np.testing.assert_allclose(g, w, rtol=1e-12, equal_nan=True)
    np.testing.assert_array_equal(got[4], want[4])
    return got


values = st.one_of(st.floats(-1e6, 1e6), st.sampled_from([math.nan, math.inf, -math.inf]))


@st.composite
def runs(draw):
    """Runs on steps (every step, every k-th, with resumed duplicates) or on arbitrary float x."""
    out = []
    shared = draw(st.integers(1, 4))  # most runs log every `shared` steps; some every other number
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.booleans()):
            start, every = draw(st.integers(-5, 20)), draw(st.sampled_from([shared, shared, 1, 2, 3]))
            xs = [float(start + every * i) for i in range(draw(st.integers(0, 30)))]
            if xs and draw(st.booleans()):  # resumed from a checkpoint: old steps logged again
                xs += xs[draw(st.integers(0, len(xs) - 1)):]
        else:
            xs = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.25, 3.0, 10.0, 1e9]), max_size=20))
            if draw(st.booleans()):
                xs.sort()  # in order, with repeats
        out.append((np.array(xs), np.array(draw(st.lists(values, min_size=len(xs), max_size=len(xs))))))
    return out


@settings(max_examples=100, deadline=None)
@given(runs())
def test_band_matches_a_brute_force_reference(series):
    check(series)


def test_band_skips_nonfinite_values_of_one_run():
    xs, mean, lo, hi, count = check([(np.arange(3.0), np.array([1.0, np.nan, np.inf])),
                                     (np.arange(3.0), np.array([3.0, 5.0, np.nan]))])
    assert mean.tolist()[:2] == [2.0, 5.0] and np.isnan(mean[2]) and np.isnan(lo[2]) and np.isnan(hi[2])
    assert count.tolist() == [2, 1, 0] and lo[0] == 1.0 and hi[0] == 3.0


def test_band_of_nothing_and_of_one_run():
    assert all(len(a) == 0 for a in band([]))
    assert all(len(a) == 0 for a in band([(np.empty(0), np.empty(0))]))
    xs, mean, lo, hi, count = band([(np.array([5.0, 7.0]), np.array([1.0, 2.0]))])
    assert xs.tolist() == [5.0, 7.0] and mean.tolist() == lo.tolist() == hi.tolist() == [1.0, 2.0]
    assert count.tolist() == [1, 1]


def test_a_resumed_run_counts_with_its_last_value():
    xs, mean, _, _, count = check([(np.array([0.0, 1.0, 2.0, 1.0, 2.0, 3.0]), np.array([0, 10, 20, 11, 21, 31.0])),
                                   (np.array([0.0, 1.0]), np.array([1.0, 1.0]))])
    assert xs.tolist() == [0, 1, 2, 3] and mean.tolist() == [0.5, 6.0, 21.0, 31.0] and count.tolist() == [2, 2, 1, 1]


def test_band_of_runs_logging_every_kth_step_and_of_float_x():
    check([(np.arange(0, 1000, 10.0), np.arange(100.0)), (np.arange(0, 1000, 15.0), -np.arange(67.0)),
           (np.array([500.0]), np.array([7.0]))])
    check([(np.linspace(0, 1, 50), np.ones(50)), (np.linspace(0, 1, 7) + 1e-3, np.zeros(7))])
    xs, *_ = check([(np.arange(10.0), np.ones(10)), (np.arange(10.0), np.ones(10)), (np.arange(12.0, 15), np.ones(3))])
    assert xs.tolist() == [*range(10), 12, 13, 14]  # no steps 10 and 11: nobody logged them


def test_band_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="differ in length"):
        band([(np.arange(3.0), np.arange(2.0))])


A, B, C, D = ("a", "r1"), ("a", "r2"), ("b", "r3"), ("b", "r4")


def test_group_by_nested_config_key_in_order_of_first_appearance():
    configs = {A: {"opt": {"lr": 1e-3}}, B: {"opt": {"lr": 3e-3}}, C: {"opt": {"lr": 1e-3}}, D: {"seed": 1}}
    names = {B: "b", A: "a", C: "c", D: "d"}
    assert group_runs(names, configs, "config:opt.lr") == {
        "opt.lr=0.003": [B], "opt.lr=0.001": [A, C], f"opt.lr={UNSET}": [D]}
    assert UNSET == "(unset)"


def test_group_by_config_keeps_bool_and_int_apart_and_one_and_one_point_oh_together():
    configs = {A: {"x": True}, B: {"x": 1}, C: {"x": 1.0}, D: {"x": "1"}}
    groups = group_runs({k: "" for k in configs}, configs, "config:x")
    assert groups == {"x=true": [A], "x=1": [B, C], "x='1'": [D]}
    nan = group_runs({A: "", B: "", C: ""}, {A: {"x": math.nan}, B: {"x": float("nan")}, C: {}}, "config:x")
    assert nan == {"x=nan": [A, B], "x=(unset)": [C]}
    lists = group_runs({A: "", B: ""}, {A: {"x": [1, 2]}, B: {"x": [1, 2]}}, "config:x")
    assert lists == {"x=[1, 2]": [A, B]}


def test_group_by_name_pattern_removes_the_match():
    names = {A: "lr3e-3-seed1", B: "lr1e-3-seed1", C: "lr3e-3-seed2", D: ""}
    assert group_runs(names, {}, r"name:-seed\d+") == {"lr3e-3": [A, C], "lr1e-3": [B], "r4": [D]}
    assert group_runs({A: "seed1"}, {}, r"name:seed\d") == {"(empty)": [A]}


@pytest.mark.parametrize("by, message", [("name:lr(", "bad name pattern 'lr\\('"), ("config:", "needs a key"),
                                         ("lr", "config:<key>"), ("tag:x", "config:<key>")])
def test_bad_group_by_is_a_clear_error(by, message):
    with pytest.raises(ValueError, match=message):
        group_runs({A: "x"}, {A: {}}, by)
