"""What the binary probes share: a base class (``predict`` from the decision function) and input checks.

Hyperparameters are declared as scikit-learn ``_parameter_constraints`` on each probe and checked
at the start of ``fit``; a bad one raises :class:`ProbeParameterError`, which is both scikit-learn's
``InvalidParameterError`` (naming the probe's class) and vlprobe's :class:`~vlprobe.validation.InputError`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import validate_data

from vlprobe.validation import InputError

__all__ = ["BinaryProbe", "ProbeParameterError", "binary_target", "validated_binary_fit_data"]


class ProbeParameterError(InputError, InvalidParameterError):
    """A probe hyperparameter outside its declared constraints ("The 'C' parameter of
    LinearSeparabilityProbe must be a float in the range (0.0, inf). Got -1 instead.")."""


class BinaryProbe(ClassifierMixin, BaseEstimator):
    """Base of the two-class probes: subclasses define ``fit`` and ``decision_function``."""

    classes_: np.ndarray

    def decision_function(self, X: Any) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def predict(self, X: Any) -> np.ndarray:
        """Class labels, shape (n_samples,): ``classes_[1]`` where the decision function is > 0."""
        positive = self.decision_function(X) > 0
        return self.classes_[positive.astype(int)]

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags


def binary_target(y: np.ndarray, who: str) -> tuple[np.ndarray, np.ndarray]:
    """(classes, 0/1 labels) of a binary target; InputError otherwise."""
    y_type = type_of_target(y, input_name="y", raise_unknown=True)
    classes, y_idx = np.unique(y, return_inverse=True)
    if y_type != "binary" or len(classes) != 2:
        raise InputError(
            f"y: Only binary classification is supported by {who} (2 classes); got a {y_type} "
            f"target with {len(classes)} class(es) {classes.tolist()[:5]}"
        )
    return classes, y_idx


def validated_binary_fit_data(estimator: Any, X: Any, y: Any, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """The scikit-learn checks of a binary probe's ``fit``: its hyperparameters against
    ``_parameter_constraints`` (:class:`ProbeParameterError`), then the data; sets
    ``n_features_in_`` and ``classes_``.

    Returns
    -------
    X : ndarray, shape (n_samples, n_features), of ``dtype``
    y_idx : ndarray, shape (n_samples,)
        0/1 index of each label into ``estimator.classes_``.
    """
    try:
        estimator._validate_params()
    except InvalidParameterError as exc:
        raise ProbeParameterError(str(exc)) from None
    X, y = validate_data(estimator, X, y, dtype=dtype)
    check_classification_targets(y)
    estimator.classes_, y_idx = binary_target(y, type(estimator).__name__)
    return X, y_idx
