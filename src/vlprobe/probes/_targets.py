"""Target validation shared by the binary probes."""

from __future__ import annotations

import numpy as np
from sklearn.utils.multiclass import type_of_target

__all__ = ["binary_target"]


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

