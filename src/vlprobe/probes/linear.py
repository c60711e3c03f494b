"""Linear separability probe: a linear SVM scored on its own training points.

"Why is Winoground Hard?" §5.1 calls a set of points *separable* when a linear SVM with a large
``C`` classifies every training point correctly, and reports the geometric margin ``2 / ||w||``.
The probe fits exactly the paper's ``sklearn.svm.SVC(kernel="linear", C=100, max_iter=100000)``
(libsvm's SMO on the dual, with an unpenalised intercept), so its ``w``, intercept and margin are
libsvm's for the same points, bit for bit: :func:`~vlprobe.probes.svc_fit.linear_svc_fit` makes
the libsvm call ``SVC.fit`` makes, without its input checks. (liblinear's ``LinearSVC`` penalises the intercept like a weight and
gives other margins: a median 1 %, up to 15 % off on caption-variant points.) It does not scale
features: an experiment that wants scaling does it explicitly and records it.

When the two classes offer the SVM nothing to separate (every point identical, or the classes
coinciding), the solver still returns a numerically tiny ``w`` whose ``2 / ||w||`` is huge
(~1e14). Such a fit has *no hyperplane*: the decision values ``w·x + b`` vary by less than
``zero_tol`` over the training points, in units of the functional margin (which the SVM sets to
1 at its support vectors). Its ``w`` is set to 0, its margin to NaN, and it is not separable.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted, validate_data

from vlprobe.probes.base import BinaryProbe, validated_binary_fit_data
from vlprobe.probes.svc_fit import linear_svc_fit

__all__ = ["LinearSeparabilityProbe"]


class LinearSeparabilityProbe(BinaryProbe):
    """Linear SVM that records whether its two classes are linearly separable.

    Parameters
    ----------
    C : float, default=100
        Inverse regularisation strength (the paper's value).
    max_iter : int, default=100_000
        Iterations of libsvm's solver (the paper's value).
    tol : float, default=1e-3
        libsvm's stopping tolerance (``SVC``'s default, as in the paper).
    zero_tol : float, default=1e-6
        A fit whose decision values span less than this over the training points has no
        hyperplane (module docstring).

    Attributes
    ----------
    classes_ : ndarray, shape (2,)
    coef_ : ndarray, shape (n_features,)
        Normal vector ``w`` of the separating hyperplane (0 without a hyperplane).
    intercept_ : float
    has_hyperplane_ : bool
        False when ``w ~ 0`` relative to the points (module docstring).
    train_accuracy_ : float
        Fraction of the training points classified right, in [0, 1].
    separable_ : bool
        ``train_accuracy_ == 1.0`` (never without a hyperplane).
    margin_ : float
        ``2 / ||w||``; NaN without a hyperplane. For a fit that is not separable it is the
        soft-margin width, not a gap between the classes.
    converged_ : bool
        False when the solver stopped at ``max_iter`` (the paper ignored these warnings).
    n_iter_ : int
    n_support_ : int
        Number of support vectors.
    n_features_in_ : int
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "C": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="neither")],
        "zero_tol": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(
        self, C: float = 100.0, max_iter: int = 100_000, tol: float = 1e-3, zero_tol: float = 1e-6,
    ) -> None:
        self.C = C
        self.max_iter = max_iter
        self.tol = tol
        self.zero_tol = zero_tol

    def fit(self, X: Any, y: Any) -> LinearSeparabilityProbe:
        """Fit on ``X`` (n_samples, n_features) with two classes in ``y`` (n_samples,)."""
        X, y_idx = validated_binary_fit_data(self, X, y, np.float64)
        return self._solve(X, y_idx)

    def fit_trusted(self, X: np.ndarray, y: np.ndarray) -> LinearSeparabilityProbe:
        """Fit without input validation, for callers that fit thousands of tiny problems.

        ``X`` must be a finite float64 array (n_samples, n_features) and ``y`` hold 0 and 1, both
        present; ``classes_`` becomes ``[0, 1]``; the hyperparameters are not checked either (the
        caller checked them once). The result equals ``fit`` on the same data. Neither runs
        ``SVC.fit``'s own checks (:mod:`vlprobe.probes.svc_fit`).
        """
        self.classes_ = np.array([0, 1])
        self.n_features_in_ = X.shape[1]
        return self._solve(X, y)

    def _solve(self, X: np.ndarray, y_idx: np.ndarray) -> LinearSeparabilityProbe:
        fit = linear_svc_fit(X, y_idx, self.C, self.tol, self.max_iter)
        self.converged_ = fit.converged
        self.n_iter_ = fit.n_iter
        self.n_support_ = fit.n_support
        coef = fit.coef
        self.intercept_ = fit.intercept
        decision = X @ coef
        self.has_hyperplane_ = bool(decision.max() - decision.min() >= self.zero_tol)
        if not self.has_hyperplane_:
            coef = np.zeros_like(coef)
        self.coef_ = coef
        pred = (X @ coef + self.intercept_ > 0).astype(int)
        self.train_accuracy_ = float(np.mean(pred == y_idx))
        self.separable_ = bool(self.has_hyperplane_ and self.train_accuracy_ == 1.0)
        self.margin_ = 2.0 / float(np.linalg.norm(coef)) if self.has_hyperplane_ else float("nan")
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        """Signed distance times ``||w||``, shape (n_samples,); positive means ``classes_[1]``."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return X @ self.coef_ + self.intercept_
