"""Item splits and control tasks: property tests."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlprobe.probes.splits import (
    control_flips,
    flip_labels,
    selectivity,
    stratified_item_split,
)
from vlprobe.validation import InputError

strata_lists = st.lists(st.sampled_from(["Object", "Relation", "Both", "Object|2"]), min_size=2, max_size=120)


@settings(max_examples=60, deadline=None)
@given(strata=strata_lists, seed=st.integers(0, 2**31 - 1))
def test_split_is_a_partition_of_the_items(strata: list[str], seed: int) -> None:
    split = stratified_item_split(strata, seed=seed)
    assert not set(split.train) & set(split.test)  # no item on both sides
    assert sorted([*split.train, *split.test]) == list(range(len(strata)))
    assert len(split.test) == min(max(int(np.floor(0.25 * len(strata) + 0.5)), 1), len(strata) - 1)
    again = stratified_item_split(strata, seed=seed)
    np.testing.assert_array_equal(split.test, again.test)


@settings(max_examples=60, deadline=None)
@given(strata=strata_lists, seed=st.integers(0, 2**31 - 1), seed2=st.integers(0, 2**31 - 1))
def test_control_flips_exactly_half_of_each_side(strata: list[str], seed: int, seed2: int) -> None:
    split = stratified_item_split(strata, seed=0)
    flips = control_flips(split, seed)
    assert len(set(flips) & set(split.train)) == len(split.train) // 2
    assert len(set(flips) & set(split.test)) == len(split.test) // 2
    assert len(set(flips)) == len(flips)
    np.testing.assert_array_equal(flips, control_flips(split, seed))  # same seed, same flips
    if seed2 != seed and len(split.train) >= 8:
        # 8 items choose 4 = 70 outcomes per side: a collision is possible but rare; compare many.
        assert any(not np.array_equal(control_flips(split, s), flips) for s in (seed2, seed2 + 1, seed2 + 2))


def test_winoground_sizes_and_stratification() -> None:
    # 400 items in three strata of 200/120/80: 300/100 with test shares 50/30/20.
    strata = ["Object"] * 200 + ["Relation"] * 120 + ["Both"] * 80
    split = stratified_item_split(strata, seed=7)
    assert (len(split.train), len(split.test)) == (300, 100)
    test_keys = [strata[i] for i in split.test]
    assert (test_keys.count("Object"), test_keys.count("Relation"), test_keys.count("Both")) == (50, 30, 20)
    assert len(control_flips(split, 0)) == 150 + 50
    other = stratified_item_split(strata, seed=8)
    assert not np.array_equal(split.test, other.test)
    assert split.strata == {"Both": 80, "Object": 200, "Relation": 120}


def test_largest_remainder_keeps_the_total() -> None:
    strata = ["a"] * 3 + ["b"] * 3 + ["c"] * 3 + ["d"]  # quotas 0.75 each + 0.25
    for seed in range(20):
        split = stratified_item_split(strata, test_size=3, seed=seed)
        assert len(split.test) == 3
        keys = [strata[i] for i in split.test]
        assert "d" not in keys and len(set(keys)) == 3


def test_flip_labels_flips_every_example_of_a_flipped_item() -> None:
    labels = np.array([0, 1, 1, 0, 0, 1, 1, 0])
    items = np.array([0, 0, 0, 0, 1, 1, 1, 1])  # four examples per item, like Winoground pairs
    out = flip_labels(labels, items, np.array([1]))
    np.testing.assert_array_equal(out, [0, 1, 1, 0, 1, 0, 0, 1])
    assert selectivity(90.0, 55.0) == pytest.approx(35.0)


@pytest.mark.parametrize(
    ("kwargs", "exc", "needle"),
    [
        ({"strata": ["a"]}, ValueError, "at least 2 items"),
        ({"test_size": 1.5}, InputError, r"test_size must be a number in \(0, 1\) as a fraction, got 1.5"),
        ({"test_size": 0}, ValueError, "between 1 and"),
        ({"test_size": "10"}, InputError, "int or a float"),
        ({"seed": -1}, InputError, r"seed must be an integer in \[0, 2\*\*32\), got -1"),
    ],
)
def test_bad_split_input(kwargs: dict, exc: type, needle: str) -> None:
    args = {"strata": ["a", "b", "a", "b"], **kwargs}
    with pytest.raises(exc, match=needle):
        stratified_item_split(args.pop("strata"), **args)
