"""Worker side of the separability experiment: fit every case's SVMs on one layer.

Kept apart from the experiment module so that joblib workers import only numpy and
scikit-learn (not torch or h5py) and start quickly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vlprobe.probes.linear import LinearSeparabilityProbe
from vlprobe.validation import InputError

__all__ = ["FIELDS", "Case", "control_labels", "fit_cases"]


@dataclass(frozen=True)
class Case:
    """The points of one item (under one image condition): stream rows and 0/1 labels."""

    item: int
    image: int  # image number within the item, -1 for a text stream
    name: str
    rows: np.ndarray
    labels: np.ndarray


def control_labels(case: Case, seed: int) -> np.ndarray:
    """The case's labels permuted by ``default_rng([seed, item, image + 1])`` (same on every layer)."""
    return np.random.default_rng([seed, case.item, case.image + 1]).permutation(case.labels)


#: The per-fit fields :func:`fit_cases` returns, in order.
FIELDS = ("separable", "margin", "train_accuracy", "converged", "has_hyperplane")


def _fit_one(X: np.ndarray, y: np.ndarray, params: dict[str, Any]) -> tuple[float, ...]:
    p = LinearSeparabilityProbe(**params).fit_trusted(X, y)
    return float(p.separable_), p.margin_, p.train_accuracy_, float(p.converged_), float(p.has_hyperplane_)


def fit_cases(
    states: np.ndarray, cases: Sequence[Case], seeds: Sequence[int], params: dict[str, Any]
) -> np.ndarray:
    """Fit target and control SVMs of every case on one layer.

    Parameters
    ----------
    states : ndarray, shape (R, H)
        The layer's states of every stream row.
    cases : sequence of Case
    seeds : sequence of int
        Control seeds.
    params : dict
        :class:`LinearSeparabilityProbe` parameters.

    Returns
    -------
    ndarray, shape (len(cases), 1 + len(seeds), len(FIELDS))
        Per case, target then one control per seed, the :data:`FIELDS`: separable (0/1), margin
        (``2 / ||w||``, NaN without a hyperplane), train accuracy (a fraction), converged (0/1),
        has a hyperplane (0/1).
    """
    out = np.empty((len(cases), 1 + len(seeds), len(FIELDS)))
    for c, case in enumerate(cases):
        X = states[case.rows].astype(np.float64)
        if not np.isfinite(X).all():
            raise InputError(f"cache: states of {case.name} hold NaN or infinite values")
        out[c, 0] = _fit_one(X, case.labels, params)
        for s, seed in enumerate(seeds):
            out[c, 1 + s] = _fit_one(X, control_labels(case, seed), params)
    return out
