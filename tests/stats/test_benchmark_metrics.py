"""Each benchmark's metric equals its authors' evaluation code on the same planted scores, ties included.

The reference functions below restate what the authors' code does (ARO's ``evaluate_scores`` and its
notebook, CREPE's ``get_one2many_rank``) with numpy's own argmax/argsort, independently of vlprobe's
vectorised versions.
"""

from __future__ import annotations

import numpy as np
import pytest

from vlprobe.stats.benchmark_metrics import (
    ARO_EXCLUDED_RELATIONS,
    ARO_MIN_ATTRIBUTE_ITEMS,
    first_is_best,
    group_means,
    macro_accuracy,
    pair_right,
    rank_of_first,
)
from vlprobe.validation import InputError


def aro_vg_reference(true: np.ndarray, false: np.ndarray, groups: list[str], *, exclude=(), min_count=0) -> float:
    """ARO's VG evaluate_scores + notebook: argmax over [false, true] == 1, per group, filter, mean."""
    scores = np.stack([false, true], axis=1)[:, None, :]  # N x 1 x 2, the authors' layout
    correct = np.argmax(np.squeeze(scores, axis=1), axis=-1) == 1
    records = []
    g = np.array(groups)
    for name in np.unique(g):
        mask = g == name
        if mask.sum() < min_count:
            continue
        records.append((name, correct[mask].mean()))
    return float(np.mean([acc for name, acc in records if name not in exclude]))


def test_aro_relation_macro_equals_the_authors_code() -> None:
    rng = np.random.default_rng(0)
    relations = ["on", "behind", "near", "in", "wearing", "with"]  # near, with: excluded by the notebook
    groups = [relations[i] for i in rng.integers(0, len(relations), 400)]
    true = rng.integers(0, 4, 400).astype(float)  # few values: many ties
    false = rng.integers(0, 4, 400).astype(float)
    correct = pair_right(np.stack([true, false], axis=1))
    assert ((true == false) & correct).sum() == 0 and (true == false).sum() > 50  # ties are wrong
    value, used = macro_accuracy(correct, groups, exclude=ARO_EXCLUDED_RELATIONS)
    assert set(used) == {"on", "behind", "in", "wearing"}
    assert value == pytest.approx(aro_vg_reference(true, false, groups, exclude=ARO_EXCLUDED_RELATIONS), abs=1e-12)
    # the micro accuracy is another number
    assert correct.mean() != pytest.approx(value)


def test_aro_attribution_macro_keeps_pairs_with_25_items() -> None:
    rng = np.random.default_rng(1)
    groups = ["white_black"] * 30 + ["red_blue"] * 25 + ["big_small"] * 24 + ["wet_dry"] * 3
    true = rng.normal(size=len(groups)).round(1)
    false = rng.normal(size=len(groups)).round(1)
    correct = pair_right(np.stack([true, false], axis=1))
    value, used = macro_accuracy(correct, groups, min_items=ARO_MIN_ATTRIBUTE_ITEMS)
    assert used == ["white_black", "red_blue"]
    assert value == pytest.approx(aro_vg_reference(true, false, groups, min_count=25), abs=1e-12)


def test_order_ties_go_to_the_caption_and_crepe_ranks_as_torch_argsort() -> None:
    s = np.array([
        [1.0, 1.0, 0.0, 0.0, 0.0],  # tie with a perturbation: right (argmax picks the first)
        [0.5, 0.9, 0.1, 0.1, 0.1],
        [2.0, 1.0, 1.0, 1.0, 1.0],
        [0.0, 0.0, 0.0, 0.0, 0.0],
    ])
    assert first_is_best(s).tolist() == (np.argmax(s, axis=1) == 0).tolist() == [True, False, True, True]
    rng = np.random.default_rng(2)
    scores = rng.integers(0, 3, size=(300, 6)).astype(float)
    # CREPE: the caption's position in a stable descending sort (torch's CPU argsort keeps input order)
    order = np.argsort(-scores, axis=1, kind="stable")
    reference = np.argmax(order == 0, axis=1)
    assert rank_of_first(scores).tolist() == reference.tolist()
    ragged = scores.copy()
    ragged[:10, 4:] = np.nan  # items with fewer negatives: absent texts never outrank
    assert (rank_of_first(ragged)[:10] <= 3).all()


def test_vectorised_over_resamples_and_bad_input() -> None:
    rng = np.random.default_rng(3)
    groups = np.array(["a"] * 5 + ["b"] * 7)
    correct = rng.random((4, 12)) < 0.5
    value, _ = macro_accuracy(correct, groups)
    for b in range(4):
        assert value[b] == pytest.approx(np.mean([correct[b, :5].mean(), correct[b, 5:].mean()]))
    assert set(group_means(correct, groups)) == {"a", "b"}
    empty, used = macro_accuracy(correct, groups, exclude=("a", "b"))
    assert used == [] and np.isnan(empty).all()
    with pytest.raises(InputError, match="NaN"):
        pair_right(np.array([[1.0, np.nan]]))
    with pytest.raises(InputError, match="shape"):
        first_is_best(np.ones(3))
