"""Metric definitions shared by experiments (vectorised, no loops over items).

Winoground (Thrush et al. 2022), with s[n, k, j] = score of caption k with image j of item n:

* text  = s(C0,I0) > s(C1,I0)  and  s(C1,I1) > s(C0,I1)   (pick the caption, per image)
* image = s(C0,I0) > s(C0,I1)  and  s(C1,I1) > s(C1,I0)   (pick the image, per caption)
* group = text and image
* matching = s(C0,I0) * s(C1,I1) > s(C0,I1) * s(C1,I0)  (Winoground's "matching score"), defined
  when every score is non-negative (zeros included, as in the human scores): a product of two
  negative scores would reward a model for scoring both wrong pairs low

All comparisons are strict: a tie is a failure. Recall@k over a full score matrix counts ties
against the model: the rank of the positive is 1 + the number of other candidates scoring at
least as high. Ranks are counted in row blocks (no sort at all), so a 10,000 x 10,000 matrix
needs a few MB of working memory beside itself.

SugarCrepe (Hsieh et al. 2023): an item is right when s(image, positive) > s(image, negative),
strictly; Replace / Swap / Add are micro-averages over their subsets' items.

VALSE (Parcalabescu et al. 2022), per item a caption score c and a foil score f:

* ``acc_r``  = mean(c > f) over every item, on the declared score, pairwise ranking accuracy
  (the only VALSE metric for CLIP-like models)
* ``acc_r_valse`` = acc_r as VALSE's ``lxmert_valse_eval.py`` computes it, for a binary matching
  head with raw (no match, match) logits: items whose two foil logits tie are skipped, and the
  caption's *match logit* is compared with the foil's, mean(c_match > f_match) (not the softmax
  probabilities, which also depend on the no-match logits)
* ``auroc``  = pooled AUROC, captions positive, foils negative (= Mann-Whitney U / (n1 n2), ties 0.5)
* with a declared match threshold t (a binary image-text matching head, e.g. P(match) and 0.5),
  as VALSE's ``lxmert_valse_eval.py`` computes them: items whose foil score equals t are skipped,
  caption fits = c > t, foil detected = f <= t, ``caption_tpr`` = VALSE's p_c (a caption true
  positive *rate*, not a precision), ``foil_tnr`` = VALSE's p_f (a foil true negative rate),
  ``acc`` = (p_c + p_f) / 2, ``min_rate`` = min(p_c, p_f); and the true precisions under their
  own names: ``ppv`` = captions among texts called matching, ``npv`` = foils among texts called
  not matching, ``min_precision`` = min(ppv, npv).

Confidence intervals: percentile bootstrap over items, every metric of a run computed on the same
resampled item indices (paired), drawn from ``np.random.default_rng(seed)``; stratified by subset
where subsets are pooled, so each subset keeps its size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vlprobe.validation import InputError, check_int, check_positive_int, check_seed

__all__ = [
    "MATCHING_UNDEFINED",
    "SUGARCREPE_GROUPS",
    "VALSE_THRESHOLDED",
    "auroc",
    "bootstrap_ci",
    "bootstrap_indices",
    "ci95_rows",
    "pair_correct",
    "recall_at_k",
    "recall_ranks",
    "sugarcrepe_accuracy",
    "valse_counts",
    "valse_metrics",
    "winoground_outcomes",
]


#: Why a run has no matching score (its rows then hold NaN; the manifest says this).
MATCHING_UNDEFINED = (
    "some scores are negative: the matching score compares products of scores "
    "(s00*s11 > s01*s10) and is defined for non-negative scores only"
)


def winoground_outcomes(s: np.ndarray) -> dict[str, np.ndarray]:
    """Per-item Winoground outcomes.

    Parameters
    ----------
    s : ndarray, shape (N, 2, 2)
        ``s[n, k, j]`` = score of caption k with image j of item n.

    Returns
    -------
    dict of str to ndarray of bool, shape (N,)
        ``text``, ``image``, ``group``, and ``matching`` when no score is negative (see
        :data:`MATCHING_UNDEFINED`).
    """
    s = np.asarray(s, dtype=np.float64)
    if s.ndim != 3 or s.shape[1:] != (2, 2):
        raise InputError(f"scores must have shape (N, 2, 2), got {s.shape}")
    if np.isnan(s).any():
        raise InputError("scores: some item scores are missing (NaN)")
    c0i0, c0i1, c1i0, c1i1 = s[:, 0, 0], s[:, 0, 1], s[:, 1, 0], s[:, 1, 1]
    text = (c0i0 > c1i0) & (c1i1 > c0i1)
    image = (c0i0 > c0i1) & (c1i1 > c1i0)
    out = {"text": text, "image": image, "group": text & image}
    if (s >= 0).all():
        out["matching"] = c0i0 * c1i1 > c0i1 * c1i0
    return out


def recall_ranks(scores: np.ndarray, positives: np.ndarray, *, block_elements: int = 1 << 20) -> np.ndarray:
    """Rank of each query's positive among all candidates, ties counted against the model.

    rank = number of candidates (the positive included) scoring at least as high as the positive.
    Counted in blocks of about ``block_elements`` comparisons into one reused boolean buffer,
    never sorting: the working memory is one block, whatever the matrix size. A transposed view
    of a C-ordered matrix (I2T from a caption x image matrix) is streamed in its memory order,
    block rows accumulating per-column counts, instead of gathering strided rows.

    Parameters
    ----------
    scores : ndarray, shape (Q, C)
        One row per query, one column per candidate; float32 stays float32 (no copy).
    positives : ndarray of int, shape (Q,)
        Column of each query's positive.

    Returns
    -------
    ndarray of int64, shape (Q,)
        Ranks in 1..C.
    """
    scores = np.asarray(scores)
    if scores.dtype.kind not in "fiub":
        raise InputError(f"scores must be a numeric (Q, C) matrix, got dtype {scores.dtype}")
    if scores.dtype.kind != "f":
        scores = scores.astype(np.float64)
    positives = np.asarray(positives)
    if scores.ndim != 2 or 0 in scores.shape:
        raise InputError(f"scores must be a non-empty (Q, C) matrix, got shape {scores.shape}")
    if positives.shape != (scores.shape[0],):
        raise InputError(f"positives must have shape ({scores.shape[0]},), got {positives.shape}")
    if positives.dtype.kind not in "iu":
        raise InputError(f"positives must be integer column numbers, got dtype {positives.dtype}")
    if positives.min() < 0 or positives.max() >= scores.shape[1]:
        raise InputError(
            f"positives must lie in [0, {scores.shape[1]}), got values from {positives.min()} to {positives.max()}"
        )
    q = scores.shape[0]
    pos_values = scores[np.arange(q), positives]
    transposed = not scores.flags.c_contiguous and scores.T.flags.c_contiguous
    base = scores.T if transposed else scores  # iterate over the rows of the C-ordered array
    n_rows, width = base.shape
    step = max(1, int(block_elements) // width)
    buf = np.empty((min(step, n_rows), width), dtype=bool)
    ranks = np.zeros(q, dtype=np.int64)
    for start in range(0, n_rows, step):
        block = base[start : start + step]
        if np.isnan(block).any():
            raise InputError("scores: the matrix has missing entries (NaN)")
        hit = buf[: len(block)]
        if transposed:  # block rows are candidates, columns are queries
            np.greater_equal(block, pos_values[None, :], out=hit)
            ranks += np.count_nonzero(hit, axis=0)
        else:
            np.greater_equal(block, pos_values[start : start + step, None], out=hit)
            ranks[start : start + step] = np.count_nonzero(hit, axis=1)
    return ranks


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
    for k in ks:
        check_positive_int(k, "ks", " (each k)")
    rank = recall_ranks(scores, positives)
    return {int(k): float((rank <= k).mean()) for k in ks}


def pair_correct(positive: np.ndarray, negative: np.ndarray) -> np.ndarray:
    """Per item: the positive text outscores the negative, strictly (a tie is wrong).

    Parameters
    ----------
    positive, negative : ndarray, shape (N,)

    Returns
    -------
    ndarray of bool, shape (N,)
    """
    pos = np.asarray(positive, dtype=np.float64)
    neg = np.asarray(negative, dtype=np.float64)
    if pos.ndim != 1 or pos.shape != neg.shape:
        raise InputError(f"positive and negative must be 1-D of one length, got shapes {pos.shape} and {neg.shape}")
    if np.isnan(pos).any() or np.isnan(neg).any():
        raise InputError("scores: some item scores are missing (NaN)")
    return pos > neg


#: SugarCrepe's three aggregates (micro-averages over the items of their subsets).
SUGARCREPE_GROUPS: dict[str, tuple[str, ...]] = {
    "replace": ("replace_obj", "replace_att", "replace_rel"),
    "swap": ("swap_obj", "swap_att"),
    "add": ("add_obj", "add_att"),
}


def sugarcrepe_accuracy(subsets: Sequence[str], correct: np.ndarray) -> dict[str, tuple[float, int]]:
    """Accuracy per subset, the micro-averaged Replace / Swap / Add, and ``all`` (micro).

    Parameters
    ----------
    subsets : sequence of str, length N
        Subset of each item (``swap_obj``, ...).
    correct : ndarray of bool, shape (N,)

    Returns
    -------
    dict of str to (accuracy in [0, 1], n)
        Subsets in first-seen order, then the groups that have items, then ``all``.
    """
    sub = np.asarray(subsets)
    ok = np.asarray(correct, dtype=bool)
    if sub.shape != ok.shape or ok.ndim != 1:
        raise InputError(f"subsets and correct must be 1-D of one length, got {sub.shape} and {ok.shape}")
    out: dict[str, tuple[float, int]] = {}
    for name in dict.fromkeys(sub.tolist()):
        mask = sub == name
        out[name] = (float(ok[mask].mean()), int(mask.sum()))
    for group, members in SUGARCREPE_GROUPS.items():
        mask = np.isin(sub, members)
        if mask.any():
            out[group] = (float(ok[mask].mean()), int(mask.sum()))
    if len(ok):
        out["all"] = (float(ok.mean()), len(ok))
    return out


def auroc(positive: np.ndarray, negative: np.ndarray) -> np.ndarray:
    """Area under the ROC curve = Mann-Whitney U / (n1 n2), ties counted one half.

    Parameters
    ----------
    positive : ndarray, shape (..., n1)
        Scores of the positives (VALSE: captions); leading axes are batches (bootstrap).
    negative : ndarray, shape (..., n2)

    Returns
    -------
    ndarray, shape (...)  (a 0-d array for 1-D inputs)
    """
    from scipy.stats import rankdata

    pos = np.asarray(positive, dtype=np.float64)
    neg = np.asarray(negative, dtype=np.float64)
    n1, n2 = pos.shape[-1], neg.shape[-1]
    if n1 == 0 or n2 == 0:
        raise InputError(f"auroc needs at least one positive and one negative, got {n1} and {n2}")
    ranks = rankdata(np.concatenate([pos, neg], axis=-1), method="average", axis=-1)
    u = ranks[..., :n1].sum(axis=-1) - n1 * (n1 + 1) / 2.0
    return u / (n1 * n2)


def _valse_from(
    c: np.ndarray, f: np.ndarray, threshold: float | None, skip_foil_ties: bool,
    c_logits: np.ndarray | None = None, f_logits: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """VALSE metrics over the items axis (batched for the bootstrap); see the module docstring."""
    out = {"acc_r": (c > f).mean(axis=-1), "auroc": auroc(c, f)}
    if c_logits is not None and f_logits is not None:
        keep = f_logits[..., 0] != f_logits[..., 1]
        hit = (c_logits[..., 1] > f_logits[..., 1]) & keep
        with np.errstate(invalid="ignore", divide="ignore"):
            out["acc_r_valse"] = hit.sum(axis=-1) / keep.sum(axis=-1)
    if threshold is None:
        return out
    keep = (f != threshold) if skip_foil_ties else np.ones_like(f, dtype=bool)
    n = keep.sum(axis=-1)
    fit = (c > threshold) & keep          # caption called matching: true positive
    det = (f <= threshold) & keep         # foil called not matching: true negative
    miss = (c <= threshold) & keep        # caption called not matching: false negative
    false_hit = (f > threshold) & keep    # foil called matching: false positive
    with np.errstate(invalid="ignore", divide="ignore"):
        tpr = fit.sum(-1) / n
        tnr = det.sum(-1) / n
        ppv = fit.sum(-1) / (fit.sum(-1) + false_hit.sum(-1))
        npv = det.sum(-1) / (det.sum(-1) + miss.sum(-1))
    out.update({
        "caption_tpr": tpr, "foil_tnr": tnr, "acc": (tpr + tnr) / 2, "min_rate": np.minimum(tpr, tnr),
        "ppv": ppv, "npv": npv, "min_precision": np.minimum(ppv, npv),
    })
    return out


def valse_metrics(
    caption: np.ndarray, foil: np.ndarray, *, threshold: float | None = None, skip_foil_ties: bool = True,
    caption_logits: np.ndarray | None = None, foil_logits: np.ndarray | None = None,
) -> dict[str, float]:
    """VALSE metrics of one set of items (see the module docstring for each name).

    Parameters
    ----------
    caption, foil : ndarray, shape (N,)
        Score of the image with its caption and with its foil.
    threshold : float, optional
        Match threshold of a binary matching score (P(match): 0.5; a logit margin: 0). Without
        it only ``acc_r`` and ``auroc`` are defined.
    skip_foil_ties : bool
        Leave items whose foil score equals the threshold out of the thresholded metrics, as
        VALSE's code does (``n_thresholded`` says how many remain).
    caption_logits, foil_logits : ndarray, shape (N, 2), optional
        Raw (no match, match) logits of a binary matching head: give both for ``acc_r_valse``
        (``n_acc_r_valse`` says how many items it keeps).

    Returns
    -------
    dict of str to float
        Fractions in [0, 1] (NaN where undefined, e.g. no text called matching), plus ``n`` and,
        with a threshold, ``n_thresholded``.
    """
    c = np.asarray(caption, dtype=np.float64)
    f = np.asarray(foil, dtype=np.float64)
    if c.ndim != 1 or c.shape != f.shape or not len(c):
        raise InputError(f"caption and foil must be non-empty 1-D of one length, got shapes {c.shape} and {f.shape}")
    if np.isnan(c).any() or np.isnan(f).any():
        raise InputError("scores: some item scores are missing (NaN)")
    cl, fl = _check_logits(caption_logits, foil_logits, len(c))
    out = {k: float(v) for k, v in _valse_from(c, f, threshold, skip_foil_ties, cl, fl).items()}
    out["n"] = float(len(c))
    if fl is not None:
        out["n_acc_r_valse"] = float((fl[:, 0] != fl[:, 1]).sum())
    if threshold is not None:
        out["n_thresholded"] = float(((f != threshold) if skip_foil_ties else np.ones_like(f, bool)).sum())
    return out


def valse_counts(
    foil: np.ndarray, *, threshold: float | None = None, skip_foil_ties: bool = True,
    foil_logits: np.ndarray | None = None,
) -> dict[str, int]:
    """How many items each VALSE metric's value is computed over (the ``n`` of its row).

    Parameters
    ----------
    foil : ndarray, shape (N,)
        Score of the image with its foil.
    threshold, skip_foil_ties : as in :func:`valse_metrics`
        With ``skip_foil_ties``, items whose foil score equals the threshold are not counted for
        the thresholded metrics (``caption_tpr``, ``foil_tnr``, ``acc``, ``min_rate``, ``ppv``,
        ``npv``, ``min_precision``), as they are left out of their values.
    foil_logits : ndarray, shape (N, 2), optional
        ``acc_r_valse`` counts the items whose two foil logits differ.

    Returns
    -------
    dict of str to int
        Metric name -> items (``acc_r`` and ``auroc``: every item).
    """
    f = np.asarray(foil, dtype=np.float64)
    out = {"acc_r": len(f), "auroc": len(f)}
    if foil_logits is not None:
        fl = np.asarray(foil_logits, np.float64)
        out["acc_r_valse"] = int((fl[..., 0] != fl[..., 1]).sum())
    if threshold is not None:
        kept = int((f != threshold).sum()) if skip_foil_ties else len(f)
        out.update(dict.fromkeys(VALSE_THRESHOLDED, kept))
    return out


#: The VALSE metrics that need a match threshold.
VALSE_THRESHOLDED = ("caption_tpr", "foil_tnr", "acc", "min_rate", "ppv", "npv", "min_precision")


def valse_metrics_batched(
    caption: np.ndarray, foil: np.ndarray, *, threshold: float | None = None, skip_foil_ties: bool = True,
    caption_logits: np.ndarray | None = None, foil_logits: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """:func:`valse_metrics` over the items axis of (B, N) scores and (B, N, 2) logits (one row per
    bootstrap resample)."""
    return _valse_from(np.asarray(caption, np.float64), np.asarray(foil, np.float64), threshold, skip_foil_ties,
                       None if caption_logits is None else np.asarray(caption_logits, np.float64),
                       None if foil_logits is None else np.asarray(foil_logits, np.float64))


def _check_logits(
    caption: np.ndarray | None, foil: np.ndarray | None, n: int
) -> tuple[np.ndarray | None, np.ndarray | None]:
    if (caption is None) != (foil is None):
        raise InputError("caption_logits and foil_logits: give both or neither")
    if caption is None or foil is None:
        return None, None
    cl, fl = np.asarray(caption, np.float64), np.asarray(foil, np.float64)
    if cl.shape != (n, 2) or fl.shape != (n, 2):
        raise InputError(f"caption_logits and foil_logits must have shape ({n}, 2), got {cl.shape} and {fl.shape}")
    if not (np.isfinite(cl).all() and np.isfinite(fl).all()):
        raise InputError("caption_logits and foil_logits must be finite")
    return cl, fl


def bootstrap_indices(
    n: int, n_boot: int = 1000, seed: int = 0, strata: Sequence[Any] | np.ndarray | None = None,
) -> np.ndarray:
    """Resampled item indices, shared by every metric of a run (a paired bootstrap).

    Parameters
    ----------
    n : int
        Number of items.
    n_boot : int
        Number of resamples (0: none, an empty array; no interval rows follow, see :func:`ci95_rows`).
    seed : int
        Seed of ``np.random.default_rng``; the same (n, n_boot, seed, strata) give the same indices,
        so two models scored on the same items are resampled alike.
    strata : sequence, length n, optional
        Resample within each stratum (subset), keeping its items' positions.

    Returns
    -------
    ndarray of int64, shape (n_boot, n)
    """
    check_int(n_boot, "n_boot", low=0)
    if n_boot == 0:
        return np.empty((0, max(n, 0)), dtype=np.int64)
    if n < 1:
        raise InputError(f"bootstrap needs at least one item, got {n}")
    rng = np.random.default_rng(check_seed(seed))
    if strata is None:
        return rng.integers(0, n, size=(n_boot, n))
    labels = np.asarray(strata)
    if labels.shape != (n,):
        raise InputError(f"strata must have length {n}, got shape {labels.shape}")
    idx = np.empty((n_boot, n), dtype=np.int64)
    for value in dict.fromkeys(labels.tolist()):
        members = np.flatnonzero(labels == value)
        idx[:, members] = members[rng.integers(0, len(members), size=(n_boot, len(members)))]
    return idx


def bootstrap_ci(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of a statistic's bootstrap values.

    Parameters
    ----------
    values : ndarray, shape (B,)
        The statistic on each resample (NaNs, e.g. an undefined precision, are ignored).
    level : float
        Coverage, in (0, 1).

    Returns
    -------
    (low, high) : tuple of float
    """
    if not 0 < level < 1:
        raise InputError(f"level must lie in (0, 1), got {level!r}")
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if not len(v):
        return float("nan"), float("nan")
    alpha = (1 - level) / 2
    low, high = np.quantile(v, [alpha, 1 - alpha])
    return float(low), float(high)


def ci95_rows(base: dict[str, Any], metric: str, values: np.ndarray) -> list[dict[str, Any]]:
    """The tidy rows ``<metric>.ci95_low`` and ``<metric>.ci95_high`` of a statistic's bootstrap values.

    Parameters
    ----------
    base : dict
        The row's other columns (experiment, model, subset, n, ...).
    values : ndarray, shape (B,)
        The statistic on each resample, already in the reported unit (e.g. percent).

    Returns
    -------
    list of dict
        Empty when there are no resamples (``bootstrap`` = 0: no intervals). The ``seed`` column
        is ``base``'s (a probe's seed, or none): the bootstrap's seed is the ``bootstrap_seed``
        setting column.
    """
    if not len(values):
        return []
    low, high = bootstrap_ci(values)
    return [{"seed": None, **base, "metric": f"{metric}.ci95_{bound}", "value": value}
            for bound, value in (("low", low), ("high", high))]
