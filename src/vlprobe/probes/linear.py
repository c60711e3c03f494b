"""Linear separability probe: a hard-margin-like linear SVM scored on its own training points.

"Why is Winoground Hard?" §5.1 calls a set of points *separable* when a linear SVM with a large
``C`` classifies every training point correctly, and reports the geometric margin ``2 / ||w||``.
The probe wraps :class:`sklearn.svm.LinearSVC` (hinge loss, dual coordinate descent); it does not
scale features: an experiment that wants scaling does it explicitly and records it.
"""

from __future__ import annotations

import warnings
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from vlprobe.probes.base import BinaryProbe, validated_binary_fit_data

__all__ = ["LinearSeparabilityProbe"]


class LinearSeparabilityProbe(BinaryProbe):
    """Linear SVM that records whether its two classes are linearly separable.

    Parameters
    ----------
    C : float, default=100
        Inverse regularisation strength (the paper's value).
    max_iter : int, default=100_000
        Iterations of the dual coordinate descent.
    loss : {"hinge", "squared_hinge"}, default="hinge"
        ``hinge`` is the classical SVM (as in the paper's ``SVC(kernel="linear")``).
    tol : float, default=1e-4
    fit_intercept : bool, default=True
    random_state : int, RandomState or None, default=0
        Order of the coordinate descent (the solution is unique; the path is not).

    Attributes
    ----------
    classes_ : ndarray, shape (2,)
    coef_ : ndarray, shape (n_features,)
        Normal vector ``w`` of the separating hyperplane.
    intercept_ : float
    train_accuracy_ : float
        Accuracy on the training points.
    separable_ : bool
        ``train_accuracy_ == 1.0``.
    margin_ : float
        ``2 / ||w||``; ``inf`` when ``w = 0`` (all points identical along every direction the
        SVM could use: nothing is separated).
    converged_ : bool
        False when the solver stopped at ``max_iter`` (the paper ignored these warnings).
    n_iter_ : int
    n_features_in_ : int
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "C": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "loss": [StrOptions({"hinge", "squared_hinge"})],
        "tol": [Interval(Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        C: float = 100.0,
        max_iter: int = 100_000,
        loss: str = "hinge",
        tol: float = 1e-4,
        fit_intercept: bool = True,
        random_state: Any = 0,
    ) -> None:
        self.C = C
        self.max_iter = max_iter
        self.loss = loss
        self.tol = tol
        self.fit_intercept = fit_intercept
        self.random_state = random_state

    def fit(self, X: Any, y: Any) -> LinearSeparabilityProbe:
        """Fit on ``X`` (n_samples, n_features) with two classes in ``y`` (n_samples,)."""
        X, y_idx = validated_binary_fit_data(self, X, y, np.float64)
        return self._solve(X, y_idx)

    def fit_trusted(self, X: np.ndarray, y: np.ndarray) -> LinearSeparabilityProbe:
        """Fit without input validation, for callers that fit thousands of tiny problems.

        ``X`` must be a finite float64 array (n_samples, n_features) and ``y`` hold 0 and 1, both
        present; ``classes_`` becomes ``[0, 1]``; the hyperparameters are not checked either (the
        caller checked them once). The result equals ``fit`` on the same data.
        """
        self.classes_ = np.array([0, 1])
        self.n_features_in_ = X.shape[1]
        return self._solve(X, y)

    def _solve(self, X: np.ndarray, y_idx: np.ndarray) -> LinearSeparabilityProbe:
        svc = LinearSVC(
            C=self.C, loss=self.loss, dual=True, tol=self.tol, max_iter=self.max_iter,
            fit_intercept=self.fit_intercept, random_state=self.random_state,
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            svc.fit(X, y_idx)
        self.converged_ = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
        self.n_iter_ = int(svc.n_iter_)
        self.coef_ = svc.coef_.ravel().copy()
        self.intercept_ = float(np.ravel(svc.intercept_)[0]) if self.fit_intercept else 0.0
        pred = (X @ self.coef_ + self.intercept_ > 0).astype(int)
        self.train_accuracy_ = float(np.mean(pred == y_idx))
        self.separable_ = bool(self.train_accuracy_ == 1.0)
        norm = float(np.linalg.norm(self.coef_))
        self.margin_ = 2.0 / norm if norm > 0 else float("inf")
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        """Signed distance times ``||w||``, shape (n_samples,); positive means ``classes_[1]``."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return X @ self.coef_ + self.intercept_


