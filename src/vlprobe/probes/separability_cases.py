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

__all__ = ["FIELDS", "Case", "control_labels", "fit_cases", "held_out_accuracy"]


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
FIELDS = ("separable", "margin", "train_accuracy", "converged", "has_hyperplane", "heldout_accuracy", "heldout_n")


def held_out_accuracy(X: np.ndarray, y: np.ndarray, params: dict[str, Any]) -> tuple[float, int]:
    """Leave-one-out accuracy over the points: each point is predicted by an SVM fitted on the others.

    A point whose class has no other point cannot be held out (the rest has one class) and is
    not tested. A fit without a hyperplane predicts its constant side (``w`` is 0), as the
    training-accuracy version counts it.

    Parameters
    ----------
    X : ndarray, shape (n, H)
    y : ndarray, shape (n,)
        0/1 labels.
    params : dict
        :class:`LinearSeparabilityProbe` parameters.

    Returns
    -------
    accuracy : float
        Fraction of the tested points predicted right (NaN when none could be tested).
    n : int
        Points tested.
    """
    counts = np.bincount(y, minlength=2)
    hits, tested = 0, 0
    keep = np.ones(len(y), dtype=bool)
    for p in range(len(y)):
        if counts[y[p]] < 2:
            continue
        keep[p] = False
        probe = LinearSeparabilityProbe(**params).fit_trusted(X[keep], y[keep])
        keep[p] = True
        hits += int((float(X[p] @ probe.coef_ + probe.intercept_) > 0) == bool(y[p]))
        tested += 1
    return (hits / tested if tested else float("nan")), tested


def _fit_one(X: np.ndarray, y: np.ndarray, params: dict[str, Any], held_out: bool) -> tuple[float, ...]:
    p = LinearSeparabilityProbe(**params).fit_trusted(X, y)
    heldout, n = held_out_accuracy(X, y, params) if held_out else (float("nan"), 0)
    return (float(p.separable_), p.margin_, p.train_accuracy_, float(p.converged_), float(p.has_hyperplane_),
            heldout, float(n))


def fit_cases(
    states: np.ndarray, cases: Sequence[Case], seeds: Sequence[int], params: dict[str, Any],
    held_out: bool = False,
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
    held_out : bool
        Also compute the leave-one-out accuracy (:func:`held_out_accuracy`; one more fit per point).

    Returns
    -------
    ndarray, shape (len(cases), 1 + len(seeds), len(FIELDS))
        Per case, target then one control per seed, the :data:`FIELDS`: separable (0/1), margin
        (``2 / ||w||``, NaN without a hyperplane), train accuracy (a fraction), converged (0/1),
        has a hyperplane (0/1), held-out accuracy (a fraction; NaN unless ``held_out``) and the
        number of held-out points tested.
    """
    out = np.empty((len(cases), 1 + len(seeds), len(FIELDS)))
    for c, case in enumerate(cases):
        X = states[case.rows].astype(np.float64)
        if not np.isfinite(X).all():
            raise InputError(f"cache: states of {case.name} hold NaN or infinite values")
        out[c, 0] = _fit_one(X, case.labels, params, held_out)
        for s, seed in enumerate(seeds):
            out[c, 1 + s] = _fit_one(X, control_labels(case, seed), params, held_out)
    return out
