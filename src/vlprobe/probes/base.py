"""What the binary probes share: a base class (``predict`` from the decision function) and input checks."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import validate_data

__all__ = ["BinaryProbe", "binary_target", "check_positive_int", "validated_binary_fit_data"]


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


def check_positive_int(value: Any, name: str, meaning: str = "") -> int:
    """``value`` as an int when it is an integer >= 1 (not a bool); ValueError naming ``name`` otherwise."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer{meaning}, got {value!r}")
    return int(value)


def binary_target(y: np.ndarray, who: str) -> tuple[np.ndarray, np.ndarray]:
    """(classes, 0/1 labels) of a binary target; ValueError otherwise."""
    y_type = type_of_target(y, input_name="y", raise_unknown=True)
    classes, y_idx = np.unique(y, return_inverse=True)
    if y_type != "binary" or len(classes) != 2:
        raise ValueError(
            f"y: Only binary classification is supported by {who} (2 classes); got a {y_type} "
            f"target with {len(classes)} class(es) {classes.tolist()[:5]}"
        )
    return classes, y_idx


def validated_binary_fit_data(estimator: Any, X: Any, y: Any, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """The scikit-learn checks of a binary probe's ``fit``: sets ``n_features_in_`` and ``classes_``.

    Returns
    -------
    X : ndarray, shape (n_samples, n_features), of ``dtype``
    y_idx : ndarray, shape (n_samples,)
        0/1 index of each label into ``estimator.classes_``.
    """
    X, y = validate_data(estimator, X, y, dtype=dtype)
    check_classification_targets(y)
    estimator.classes_, y_idx = binary_target(y, type(estimator).__name__)
    return X, y_idx
