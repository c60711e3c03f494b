"""Metric definitions shared by experiments (vectorised, no loops over items).

Winoground (Thrush et al. 2022), with s[n, k, j] = score of caption k with image j of item n:

* text  = s(C0,I0) > s(C1,I0)  and  s(C1,I1) > s(C0,I1)   (pick the caption, per image)
* image = s(C0,I0) > s(C0,I1)  and  s(C1,I1) > s(C1,I0)   (pick the image, per caption)
* group = text and image
* matching = s00 * s11 > s01 * s10, defined for positive scores only

All comparisons are strict: a tie is a failure. Recall@k over a full score matrix counts ties
against the model: the rank of the positive is 1 + the number of other candidates scoring at
least as high.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["recall_at_k", "winoground_outcomes"]


def winoground_outcomes(s: np.ndarray) -> dict[str, np.ndarray]:
    """Per-item Winoground outcomes.

    Parameters
    ----------
    s : ndarray, shape (N, 2, 2)
        ``s[n, k, j]`` = score of caption k with image j of item n.

    Returns
    -------
    dict of str to ndarray of bool, shape (N,)
        ``text``, ``image``, ``group``, and ``matching`` when every score is positive.
    """
    s = np.asarray(s, dtype=np.float64)
    if s.ndim != 3 or s.shape[1:] != (2, 2):
        raise ValueError(f"scores must have shape (N, 2, 2), got {s.shape}")
    if np.isnan(s).any():
        raise ValueError("scores: some item scores are missing (NaN)")
    c0i0, c0i1, c1i0, c1i1 = s[:, 0, 0], s[:, 0, 1], s[:, 1, 0], s[:, 1, 1]
    text = (c0i0 > c1i0) & (c1i1 > c0i1)
    image = (c0i0 > c0i1) & (c1i1 > c1i0)
    out = {"text": text, "image": image, "group": text & image}
    if (s > 0).all():
        out["matching"] = c0i0 * c1i1 > c0i1 * c1i0
    return out


def recall_at_k(
    scores: np.ndarray, positives: np.ndarray, ks: Sequence[int] = (1, 2, 5, 10)
) -> dict[int, float]:
    """Recall@k of each query row against its one positive column, ties against the model.

    Parameters
    ----------
    scores : ndarray, shape (Q, C)
        One row per query, one column per candidate.
    positives : ndarray of int, shape (Q,)
        Column of each query's positive.
    ks : sequence of int

    Returns
    -------
    dict of int to float
        k -> fraction of queries whose positive ranks within the top k.
    """
    scores = np.asarray(scores, dtype=np.float64)
    positives = np.asarray(positives)
    if scores.ndim != 2 or 0 in scores.shape:
        raise ValueError(f"scores must be a non-empty (Q, C) matrix, got shape {scores.shape}")
    if positives.shape != (scores.shape[0],):
        raise ValueError(f"positives must have shape ({scores.shape[0]},), got {positives.shape}")
    if positives.dtype.kind not in "iu":
        raise ValueError(f"positives must be integer column numbers, got dtype {positives.dtype}")
    if positives.min() < 0 or positives.max() >= scores.shape[1]:
        raise ValueError(
            f"positives must lie in [0, {scores.shape[1]}), got values from {positives.min()} to {positives.max()}"
        )
    if np.isnan(scores).any():
        raise ValueError("scores: the matrix has missing entries (NaN)")
    for k in ks:
        if isinstance(k, bool) or int(k) != k or k < 1:
            raise ValueError(f"ks must be positive integers, got {k!r}")
    pos = scores[np.arange(len(scores)), positives]
    rank = (scores >= pos[:, None]).sum(axis=1)  # counts the positive itself once
    return {int(k): float((rank <= k).mean()) for k in ks}
