"""linear_svc_fit: libsvm without SVC.fit's input checks, bit-identical to SVC, with its fallback.

Exact equality is asserted on purpose here: the direct call runs the same libsvm routine on the
same float64 arrays with the same arguments as ``SVC.fit`` and the same post-processing, so any
difference, even in the last bit, means the two are not the same computation.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import SVC

from vlprobe.probes import svc_fit
from vlprobe.probes.linear import LinearSeparabilityProbe
from vlprobe.probes.svc_fit import direct_libsvm_available, linear_svc_fit


def _problems() -> Iterator[tuple[str, np.ndarray, np.ndarray, float, int]]:
    """(name, X, y, C, max_iter): separable, overlapping, degenerate, hitting max_iter; the
    separability experiment's shapes (caption variants of two captions in 512 dims, / 100)."""
    rng = np.random.default_rng(7)
    for k in range(30):
        n0, n1 = int(rng.integers(1, 12)), int(rng.integers(1, 12))
        X = rng.normal(size=(n0 + n1, int(rng.choice([2, 16, 512]))))
        X[n0:, 0] += rng.choice([0.0, 0.5, 4.0])
        y = np.r_[np.zeros(n0), np.ones(n1)]
        yield f"random-{k}", X / rng.choice([1.0, 100.0]), rng.permutation(y) if k % 3 == 0 else y, \
            float(rng.choice([100.0, 1.0, 0.01])), 100_000
    same = np.tile(np.array([0.3, -1.2, 5.0]), (6, 1))
    yield "identical points", same, np.array([0.0, 1, 0, 1, 0, 1]), 100.0, 100_000
    X = rng.normal(size=(40, 3))
    yield "max_iter reached", X, (X[:, 0] * X[:, 1] > 0).astype(float), 1e4, 3


def _svc(X: np.ndarray, y: np.ndarray, C: float, max_iter: int) -> tuple[SVC, bool]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        svc = SVC(kernel="linear", C=C, max_iter=max_iter).fit(X, y)
    return svc, not any(issubclass(w.category, ConvergenceWarning) for w in caught)


@pytest.mark.parametrize(("name", "X", "y", "C", "max_iter"), [pytest.param(*p, id=p[0]) for p in _problems()])
def test_bit_identical_to_svc(name: str, X: np.ndarray, y: np.ndarray, C: float, max_iter: int) -> None:
    assert direct_libsvm_available()
    fit = linear_svc_fit(X, y.astype(int), C, 1e-3, max_iter)
    svc, converged = _svc(X, y, C, max_iter)
    np.testing.assert_array_equal(fit.coef, svc.coef_[0])  # exact: the same computation (module docstring)
    assert fit.intercept == svc.intercept_[0]
    assert (fit.converged, fit.n_iter, fit.n_support) == (converged, int(svc.n_iter_[0]), int(svc.n_support_.sum()))
    if name == "max_iter reached":
        assert not fit.converged


def test_fit_trusted_skips_svc_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fit_trusted`` runs none of SVC.fit's checks (it used to call SVC.fit on every fit)."""
    assert direct_libsvm_available()  # the once-per-process check, which does call SVC.fit
    calls = []
    real = SVC.fit
    monkeypatch.setattr(SVC, "fit", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    rng = np.random.default_rng(0)
    for _ in range(5):
        LinearSeparabilityProbe().fit_trusted(rng.normal(size=(10, 6)), np.repeat([0, 1], 5))
    assert calls == []


@pytest.fixture
def fresh_check() -> Iterator[None]:
    direct_libsvm_available.cache_clear()
    svc_fit._libsvm.cache_clear()
    yield
    direct_libsvm_available.cache_clear()
    svc_fit._libsvm.cache_clear()


class _Moved:
    """scikit-learn's libsvm module as a later release might have it."""

    def __init__(self, fit: Any) -> None:
        self.fit = fit

    @staticmethod
    def set_verbosity_wrap(level: int) -> None:
        pass


def _renamed(*args: Any, **kwargs: Any) -> Any:
    raise TypeError("fit() got an unexpected keyword argument 'svm_type'")


def _other_signs(*args: Any, **kwargs: Any) -> Any:
    from sklearn.svm import _libsvm

    out = list(_libsvm.fit(*args, **kwargs))
    out[3], out[4] = -out[3], -out[4]  # dual coefficients and intercept in the other convention
    return tuple(out)


def _gone() -> Any:
    raise ImportError("cannot import name '_libsvm' from 'sklearn.svm'")


@pytest.mark.parametrize("moved", ["gone", "signature", "convention"])
def test_falls_back_to_svc_when_the_private_api_moves(moved: str, fresh_check: None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    fixed = {"svm_type": 0}
    if moved == "gone":
        monkeypatch.setattr(svc_fit, "_libsvm", _gone)
    else:
        module = _Moved(_renamed if moved == "signature" else _other_signs)
        real_fixed = svc_fit._libsvm()[1]
        fixed = dict(real_fixed)
        monkeypatch.setattr(svc_fit, "_libsvm", lambda: (module, fixed))
    assert not direct_libsvm_available()
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(12, 4)), np.repeat([0, 1], 6)
    X[6:] += 1.0
    p = LinearSeparabilityProbe().fit_trusted(X, y)
    svc, _ = _svc(X, y.astype(float), 100.0, 100_000)
    np.testing.assert_array_equal(p.coef_, svc.coef_[0])  # exact: this is SVC.fit itself
    assert p.intercept_ == svc.intercept_[0]
