"""LinearSeparabilityProbe: separability, margin, convergence record, input errors."""

from __future__ import annotations

import numpy as np
import pytest

from vlprobe.probes.linear import LinearSeparabilityProbe


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


@pytest.mark.parametrize("point", [np.zeros(3), np.array([0.3, -1.2, 5.0]), np.full(768, 0.02)])
def test_identical_points_have_no_hyperplane(point: np.ndarray) -> None:
    # Caption 0 and caption 1 at the same point (CLIP's layer 0 for a word swap): the solver's
    # w is round-off (its 2/||w|| ~ 1e14 was once reported as a margin).
    X = np.tile(point, (6, 1))
    p = LinearSeparabilityProbe().fit(X, np.array([0, 1, 0, 1, 0, 1]))
    assert not p.has_hyperplane_ and not p.separable_
    assert np.isnan(p.margin_) and not p.coef_.any()
    assert p.train_accuracy_ == 0.5  # a constant prediction


def test_classes_made_of_the_same_points_have_no_hyperplane() -> None:
    # Every point of class 0 is also a point of class 1 (distinct points otherwise): w = 0 is the
    # SVM's optimum, and the solver's w is round-off.
    points = np.random.default_rng(5).normal(size=(5, 12)) * 3 + 10
    X = np.vstack([points, points[::-1]])
    p = LinearSeparabilityProbe().fit(X, np.repeat([0, 1], 5))
    assert not p.has_hyperplane_ and not p.separable_ and np.isnan(p.margin_)


def test_coinciding_pairs_beside_distinct_points_still_have_a_hyperplane() -> None:
    # The originals coincide (one of them must be misclassified) but the variants differ.
    rng = np.random.default_rng(4)
    same = rng.normal(size=8)
    X = np.vstack([same, same, rng.normal(size=(6, 8)) + np.repeat([[-2.0], [2.0]], 3, axis=0)])
    y = np.array([0, 1, 0, 0, 0, 1, 1, 1])
    p = LinearSeparabilityProbe().fit(X, y)
    assert p.has_hyperplane_ and not p.separable_ and np.isfinite(p.margin_)


def caption_like_cases(n_cases: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Point sets shaped like caption-variant families: 4..24 points in 8..96 dimensions, some
    separable and some not, some with a dominant shared offset (as hidden states have)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_cases):
        n0, n1 = rng.integers(2, 13, size=2)
        d = int(rng.integers(8, 97))
        shift = rng.normal(size=d) * rng.choice([0.0, 0.3, 3.0])
        offset = rng.normal(size=d) * rng.choice([0.0, 10.0])
        X = np.vstack([rng.normal(size=(n0, d)) - shift, rng.normal(size=(n1, d)) + shift]) + offset
        y = np.repeat([0, 1], [n0, n1])
        out.append((X * rng.choice([0.01, 1.0, 30.0]), y))
    return out


def test_margins_equal_the_papers_svc() -> None:
    from sklearn.svm import SVC

    seen = {True: 0, False: 0}
    for X, y in caption_like_cases(60, seed=7):
        p = LinearSeparabilityProbe().fit(X, y)
        ref = SVC(kernel="linear", C=100, max_iter=100_000).fit(X, y)  # the paper's call
        ref_w = ref.coef_.ravel()
        assert p.has_hyperplane_
        # Same solver on the same points; a tolerance rather than bit equality (the products may
        # be rounded differently by another build of the library).
        np.testing.assert_allclose(p.margin_, 2 / np.linalg.norm(ref_w), rtol=1e-9)
        np.testing.assert_allclose(p.coef_, ref_w, rtol=1e-9, atol=1e-12 * np.abs(ref_w).max())
        assert p.intercept_ == pytest.approx(float(ref.intercept_[0]), rel=1e-9, abs=1e-12)
        assert p.separable_ == (ref.score(X, y) == 1.0)
        seen[p.separable_] += 1
    assert min(seen.values()) >= 5, seen  # both kinds of case were exercised


def hard_margin(X: np.ndarray, y: np.ndarray) -> float:
    """2/||w|| of the hard-margin SVM, by scipy's SLSQP on the primal (independent of libsvm):
    min ||w||^2 / 2 subject to s_i (w.x_i + b) >= 1."""
    from scipy.optimize import minimize

    # The margin moves with translations (not at all) and scalings (by the factor) of the points:
    # solve on centred, unit-scale points for a well-conditioned problem.
    centre = X.mean(axis=0)
    scale = float(np.abs(X - centre).max())
    X = (X - centre) / scale
    s = 2.0 * y - 1.0
    d = X.shape[1]
    cons = {"type": "ineq", "fun": lambda v: s * (X @ v[:d] + v[d]) - 1.0,
            "jac": lambda v: s[:, None] * np.hstack([X, np.ones((len(X), 1))])}
    res = minimize(lambda v: 0.5 * v[:d] @ v[:d], np.zeros(d + 1), jac=lambda v: np.r_[v[:d], 0.0],
                   constraints=[cons], method="SLSQP", options={"ftol": 1e-12, "maxiter": 1000})
    assert res.success, res.message
    return scale * 2.0 / float(np.linalg.norm(res.x[:d]))


def test_separable_margins_equal_the_hard_margin_solution() -> None:
    checked = 0
    for X, y in caption_like_cases(40, seed=9):
        p = LinearSeparabilityProbe(C=1e8, tol=1e-8).fit(X, y)  # C large: the hard margin
        if not p.separable_:
            continue
        # libsvm stops at tol and SLSQP at ftol: two approximations of one optimum, within 0.1%
        assert p.margin_ == pytest.approx(hard_margin(X, y), rel=1e-3)
        checked += 1
    assert checked >= 10


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
        ({"zero_tol": -1.0}, np.array([0, 1, 0, 1]), "The 'zero_tol' parameter of LinearSeparabilityProbe must be a float"),
        ({"tol": 0.0}, np.array([0, 1, 0, 1]), r"The 'tol' parameter of LinearSeparabilityProbe must be a float in the range \(0\.0, inf\)"),
        ({"C": 0.0}, np.array([0, 1, 0, 1]), r"The 'C' parameter of LinearSeparabilityProbe must be a float in the range \(0\.0, inf\)"),
        ({"max_iter": 1.5}, np.array([0, 1, 0, 1]), "The 'max_iter' parameter of LinearSeparabilityProbe must be an int"),
    ],
)
def test_bad_input_names_the_problem(params: dict, y: np.ndarray, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        LinearSeparabilityProbe(**params).fit(np.arange(8.0).reshape(4, 2), y)


def test_fit_trusted_equals_fit() -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(16, 8))
    y = np.repeat([0, 1], 8)
    a, b = LinearSeparabilityProbe().fit(X, y), LinearSeparabilityProbe().fit_trusted(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert (a.margin_, a.separable_, a.intercept_) == (b.margin_, b.separable_, b.intercept_)
