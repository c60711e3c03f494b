"""LinearSeparabilityProbe: separability, margin, convergence record, input errors."""

from __future__ import annotations

import numpy as np
import pytest

from vlprobe.probes.linear import LinearSeparabilityProbe
from vlprobe.registry import PROBES


def test_margin_is_the_gap_between_separable_classes() -> None:
    # Classes at x = -2 and x = +2: the hard-margin hyperplane is x = 0, w = (0.5, 0), margin 4.
    X = np.array([[-2.0, 0.0], [-2.0, 1.0], [2.0, 0.0], [2.0, 1.0]])
    y = np.array([0, 0, 1, 1])
    p = LinearSeparabilityProbe().fit(X, y)
    assert p.separable_ and p.train_accuracy_ == 1.0 and p.converged_
    assert p.margin_ == pytest.approx(4.0, rel=1e-3)
    assert p.margin_ == pytest.approx(2 / np.linalg.norm(p.coef_))
    assert p.coef_.shape == (2,) and list(p.classes_) == [0, 1]
    np.testing.assert_array_equal(p.predict(X), y)


def test_xor_is_not_separable() -> None:
    X = np.array([[0.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    p = LinearSeparabilityProbe().fit(X, np.array([0, 0, 1, 1]))
    assert not p.separable_ and p.train_accuracy_ < 1.0


def test_string_labels_keep_their_names() -> None:
    X = np.array([[-1.0], [-2.0], [1.0], [2.0]])
    p = LinearSeparabilityProbe().fit(X, np.array(["c0", "c0", "c1", "c1"]))
    assert list(p.predict(np.array([[-3.0], [3.0]]))) == ["c0", "c1"]


def test_identical_points_have_no_direction() -> None:
    X = np.zeros((4, 3))
    p = LinearSeparabilityProbe().fit(X, np.array([0, 1, 0, 1]))
    assert not p.separable_
    assert np.isinf(p.margin_) or p.margin_ > 0


def test_unconverged_fit_is_recorded_not_hidden() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 5))
    y = rng.integers(0, 2, 60)
    assert not LinearSeparabilityProbe(max_iter=2).fit(X, y).converged_


@pytest.mark.parametrize(
    ("params", "y", "needle"),
    [
        ({}, np.array([0, 1, 2, 0]), "Only binary classification"),
        ({}, np.array([1, 1, 1, 1]), "Only binary classification"),
        ({"loss": "log"}, np.array([0, 1, 0, 1]), "The 'loss' parameter of LinearSeparabilityProbe must be a str among"),
        ({"C": 0.0}, np.array([0, 1, 0, 1]), r"The 'C' parameter of LinearSeparabilityProbe must be a float in the range \(0\.0, inf\)"),
        ({"max_iter": 1.5}, np.array([0, 1, 0, 1]), "The 'max_iter' parameter of LinearSeparabilityProbe must be an int"),
        ({"random_state": -1}, np.array([0, 1, 0, 1]), "The 'random_state' parameter of LinearSeparabilityProbe"),
    ],
)
def test_bad_input_names_the_problem(params: dict, y: np.ndarray, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        LinearSeparabilityProbe(**params).fit(np.arange(8.0).reshape(4, 2), y)


def test_registered_under_probes() -> None:
    assert PROBES.get("linear-separability") is LinearSeparabilityProbe
    assert "margin" in PROBES.describe("linear-separability")


def test_fit_trusted_equals_fit() -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(16, 8))
    y = np.repeat([0, 1], 8)
    a, b = LinearSeparabilityProbe().fit(X, y), LinearSeparabilityProbe().fit_trusted(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert (a.margin_, a.separable_, a.intercept_) == (b.margin_, b.separable_, b.intercept_)
