"""``SVC(kernel="linear").fit`` without its input checks, for data already checked.

Separability fits tens of thousands of SVMs on a dozen points each. For such a problem
``sklearn.svm.SVC.fit`` spends about 15-20 times the CPU of the libsvm solve it wraps on
parameter and input validation (``validate_data``, ``type_of_target``, ``_validate_params``).
:func:`linear_svc_fit` calls the same libsvm routine (``sklearn.svm._libsvm.fit``) with the
arguments ``SVC.fit`` passes it for these inputs, and post-processes its output as ``SVC`` does
(the binary sign flip, ``coef_ = dual_coef_ @ support_vectors_``): the coefficients and intercept
are bit-identical to ``SVC``'s.

That routine is scikit-learn's private API. Before its first use in a process, the direct call
is compared with ``SVC.fit`` on a small problem; if it is missing, its signature moved or its
result differs by a bit, every fit goes through ``SVC.fit`` instead (the same numbers, slower).
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import SVC

__all__ = ["SVCFit", "direct_libsvm_available", "linear_svc_fit"]


@dataclass(frozen=True)
class SVCFit:
    """One linear SVM as ``SVC`` would hold it.

    Attributes
    ----------
    coef : ndarray, shape (n_features,)
        ``SVC.coef_[0]``.
    intercept : float
        ``SVC.intercept_[0]``.
    converged : bool
        False when libsvm stopped at ``max_iter`` (``SVC`` warns ``ConvergenceWarning``).
    n_iter : int
    n_support : int
    """

    coef: np.ndarray
    intercept: float
    converged: bool
    n_iter: int
    n_support: int


def _through_svc(X: np.ndarray, y: np.ndarray, C: float, tol: float, max_iter: int) -> SVCFit:
    """The reference: ``SVC(kernel="linear", C, tol, max_iter).fit``, with every check."""
    svc = SVC(kernel="linear", C=C, tol=tol, max_iter=max_iter)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        svc.fit(X, y)
    return SVCFit(
        coef=np.asarray(svc.coef_, dtype=np.float64).ravel(), intercept=float(svc.intercept_[0]),
        converged=not any(issubclass(w.category, ConvergenceWarning) for w in caught),
        n_iter=int(np.max(svc.n_iter_)), n_support=int(svc.n_support_.sum()),
    )


@functools.cache
def _libsvm() -> tuple[Any, dict[str, Any]]:
    """scikit-learn's libsvm module and ``SVC.fit``'s fixed arguments to it (from ``SVC()``'s defaults)."""
    from sklearn.svm import _libsvm

    svc = SVC(kernel="linear")
    fixed = {
        "svm_type": 0,  # c_svc
        "kernel": "linear",
        "sample_weight": np.empty(0),
        "class_weight": np.ones(2),  # compute_class_weight(None, ...) for two classes
        "nu": svc.nu, "probability": False, "degree": svc.degree, "shrinking": svc.shrinking,
        "cache_size": svc.cache_size, "coef0": svc.coef0, "epsilon": svc.epsilon,
        # The linear kernel never reads gamma (SVC passes 1 / (n_features * X.var()) there); the
        # seed serves probability estimates only (SVC draws it from numpy's global generator).
        "gamma": 1.0, "random_seed": 0,
    }
    return _libsvm, fixed


def _direct(X: np.ndarray, y: np.ndarray, C: float, tol: float, max_iter: int) -> SVCFit | None:
    """libsvm called as ``SVC.fit`` calls it; None when its output is not finite (SVC raises then)."""
    libsvm, fixed = _libsvm()
    libsvm.set_verbosity_wrap(0)
    _, support_vectors, n_class_sv, dual_coef, intercept, _, _, status, n_iter = libsvm.fit(
        np.ascontiguousarray(X, dtype=np.float64), np.ascontiguousarray(y, dtype=np.float64),
        C=float(C), tol=float(tol), max_iter=int(max_iter), **fixed,
    )
    if not (np.isfinite(intercept).all() and np.isfinite(dual_coef).all()):
        return None
    coef = (-dual_coef) @ support_vectors  # SVC flips a binary model's signs, then coef_ = dual_coef_ @ SV
    return SVCFit(coef=coef.ravel(), intercept=float(-intercept[0]), converged=int(status) == 0,
                  n_iter=int(np.max(n_iter)), n_support=int(np.sum(n_class_sv)))


def _same(a: SVCFit, b: SVCFit) -> bool:
    return (np.array_equal(a.coef, b.coef) and a.intercept == b.intercept and a.converged == b.converged
            and a.n_iter == b.n_iter and a.n_support == b.n_support)


@functools.cache
def direct_libsvm_available() -> bool:
    """Whether the direct call exists here and gives ``SVC.fit``'s result, bit for bit (checked
    once per process on a small problem: one class shifted, overlapping points, a bias)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 5))
    X[6:] += 0.8
    y = np.repeat([0.0, 1.0], 6)
    try:
        fits = [_direct(X, y, C, 1e-3, 100_000) for C in (100.0, 0.05)]
    except Exception:  # the private API moved (ImportError, TypeError, ...): use SVC.fit
        return False
    return all(f is not None and _same(f, _through_svc(X, y, C, 1e-3, 100_000))
               for f, C in zip(fits, (100.0, 0.05), strict=True))


def linear_svc_fit(X: np.ndarray, y: np.ndarray, C: float, tol: float, max_iter: int) -> SVCFit:
    """``SVC(kernel="linear", C=C, tol=tol, max_iter=max_iter).fit(X, y)`` on checked data.

    Parameters
    ----------
    X : ndarray, shape (n_samples, n_features)
        Finite float64 (not checked).
    y : ndarray, shape (n_samples,)
        0/1 labels, both present (not checked).
    C, tol, max_iter
        As ``SVC``'s (not checked).

    Returns
    -------
    SVCFit
        Equal, bit for bit, to what ``SVC`` holds after ``fit``.
    """
    if direct_libsvm_available():
        fit = _direct(X, y, C, tol, max_iter)
        if fit is not None:
            return fit
    return _through_svc(X, y, C, tol, max_iter)
