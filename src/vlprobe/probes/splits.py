"""Item-level train/test splits and control tasks.

Splits are made over *items*, so every example built from an item (its four image-caption
pairs, all its caption variants) lands on one side; nothing of a test item is seen in training.
The split is stratified: each stratum (items with the same tag key) contributes to the test side
in proportion to its size, with the rounding remainders given out by largest remainder, ties
broken by the seeded generator. For Winoground's 400 items the default test size, a quarter,
gives the paper's 300/100.

A control task (Hewitt & Liang 2019) keeps the inputs and breaks the link between inputs and
labels: :func:`control_flips` picks ``n // 2`` items of each split (floor of half; 150 of 300 and
50 of 100) and every label of a picked item is flipped. Flipping by item, not by example or
pair position, is what keeps the control a task with the target's label balance and structure
(the paper's code flipped by pair position). :func:`selectivity` is target
minus control.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from vlprobe.validation import InputError, check_probability, check_seed

__all__ = [
    "DEFAULT_TEST_FRACTION",
    "ItemSplit",
    "control_flips",
    "flip_labels",
    "selectivity",
    "stratified_item_split",
]

#: 100 of Winoground's 400 items.
DEFAULT_TEST_FRACTION = 0.25


@dataclass(frozen=True)
class ItemSplit:
    """Disjoint, sorted item indices.

    Attributes
    ----------
    train, test : ndarray of int
    seed : int
        The split's seed (-1 for lists read from a split file).
    strata : dict of str to int
        Stratum key -> number of items (what the split was balanced on).
    """

    train: np.ndarray
    test: np.ndarray
    seed: int
    strata: dict[str, int]


def stratified_item_split(
    strata: Sequence[Hashable],
    *,
    test_size: int | float = DEFAULT_TEST_FRACTION,
    seed: int = 0,
) -> ItemSplit:
    """Split items into train and test, stratified on a key per item.

    Parameters
    ----------
    strata : sequence, length n_items
        A hashable key per item (e.g. its tags joined); items with equal keys form a stratum.
    test_size : int or float, default=0.25
        Number of test items, or a fraction of the items (rounded to the nearest integer).
    seed : int
        Seeds ``numpy.random.default_rng``.

    Returns
    -------
    ItemSplit
    """
    seed = check_seed(seed)
    n = len(strata)
    if n < 2:
        raise InputError(f"strata: a split needs at least 2 items, got {n}")
    if isinstance(test_size, bool) or not isinstance(test_size, (int, float, np.integer, np.floating)):
        raise InputError(f"test_size must be an int or a float, got {type(test_size).__name__}")
    if isinstance(test_size, (float, np.floating)):
        check_probability(test_size, "test_size", open_interval=True, meaning=" as a fraction")
        n_test = int(np.floor(test_size * n + 0.5))
    else:
        n_test = int(test_size)
    n_test = min(max(n_test, 1), n - 1)
    if isinstance(test_size, (int, np.integer)) and not 1 <= test_size <= n - 1:
        raise InputError(f"test_size must be between 1 and {n - 1} items, got {test_size!r}")

    rng = np.random.default_rng(seed)
    keys = [str(k) for k in strata]
    names = sorted(set(keys))
    members = {k: np.flatnonzero(np.asarray(keys, dtype=object) == k) for k in names}
    quota = {k: n_test * len(members[k]) / n for k in names}
    take = {k: int(np.floor(q)) for k, q in quota.items()}
    left = n_test - sum(take.values())
    # Largest remainder first; the seeded draw orders equal remainders.
    tiebreak = rng.permutation(len(names))
    order = sorted(range(len(names)), key=lambda i: (-(quota[names[i]] - take[names[i]]), tiebreak[i]))
    for i in order[:left]:
        take[names[i]] += 1
    test = []
    for k in names:
        test.extend(rng.permutation(members[k])[: take[k]].tolist())
    test_arr = np.sort(np.asarray(test, dtype=np.int64))
    train_arr = np.setdiff1d(np.arange(n), test_arr)
    return ItemSplit(train_arr, test_arr, seed, {k: len(members[k]) for k in names})


def control_flips(split: ItemSplit, seed: int) -> np.ndarray:
    """Items whose labels a control task flips: ``n // 2`` of each split side, seeded.

    Parameters
    ----------
    split : ItemSplit
    seed : int
        Seeds ``numpy.random.default_rng``; the same seed gives the same items.

    Returns
    -------
    ndarray of int
        Sorted item indices (from both sides).
    """
    seed = check_seed(seed)
    rng = np.random.default_rng(seed)
    picked = []
    for side in (split.train, split.test):
        picked.extend(rng.choice(side, size=len(side) // 2, replace=False).tolist())
    return np.sort(np.asarray(picked, dtype=np.int64))


def flip_labels(labels: np.ndarray, example_items: np.ndarray, flipped_items: np.ndarray) -> np.ndarray:
    """Control labels: ``1 - y`` for every example of a flipped item, ``y`` elsewhere.

    Parameters
    ----------
    labels : ndarray of {0, 1}, shape (N,)
    example_items : ndarray of int, shape (N,)
        Item index of each example.
    flipped_items : ndarray of int
    """
    labels = np.asarray(labels)
    flip = np.isin(np.asarray(example_items), np.asarray(flipped_items))
    return np.where(flip, 1 - labels, labels)


def selectivity(target: float, control: float) -> float:
    """Hewitt–Liang selectivity: target accuracy minus control accuracy."""
    return float(target) - float(control)
