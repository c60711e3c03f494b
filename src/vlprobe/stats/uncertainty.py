"""Uncertainty over items: bootstrap intervals, target-vs-control permutation tests, paired tests.

Everything here resamples *items* (the cases of an experiment: Winoground items, SugarCrepe
pairs, separability cases, the test items of an MLP probe) with the one bootstrap of
:mod:`vlprobe.stats.metrics` (:func:`~vlprobe.stats.metrics.bootstrap_indices`,
:func:`~vlprobe.stats.metrics.bootstrap_ci`): every statistic of a run is computed on the
same resampled indices, so differences (target minus control, model A minus model B) are paired.
Seeds of a probe (initialisation, control labels) are a separate source of variation: per item,
values are first averaged over seeds, then items are resampled; the min–max over seeds stays in
the tidy rows beside.

* :func:`resampled_means` — the mean over items of each row on each resample (NaN-aware: a
  case without a value, e.g. the margin of a case that is not separable, is left out).
* :func:`sign_flip_test` — target vs control per layer: the paired differences ``d_i`` of the
  items, statistic ``mean(d)``, null distribution from flipping the sign of each ``d_i``
  (exact over all ``2**N`` sign vectors when ``2**N <= n_permutations``, else ``n_permutations``
  random ones from ``np.random.default_rng(seed)``); two-sided p = (1 + #{|T*| >= |T|}) /
  (1 + #permutations) (exact: #{|T*| >= |T|} / 2**N).
* :func:`mcnemar_test` — two models' binary outcomes on the same items: exact binomial test on
  the discordant pairs (``scipy.stats.binomtest``) when there are fewer than ``exact_below``
  (25), else the chi-square test with continuity correction.
* :func:`paired_bootstrap_test` — two models' continuous outcomes on the same items: the
  difference of means with its percentile interval and the two-sided p-value of the centred
  bootstrap, p = (1 + #{|D* - D| >= |D|}) / (1 + B).

What scipy.stats does and these do not use, and why (``tests/stats/test_uncertainty.py`` checks
that they compute the same):

* ``scipy.stats.permutation_test(..., permutation_type="samples")`` on one sample is the same
  sign-flip test. Exact (all ``2**N`` sign vectors) its p-values equal :func:`sign_flip_test`'s
  (its two-sided p, twice the smaller one-sided p, equals #{|T*| >= |T|} / 2**N because the
  null distribution is symmetric). Monte Carlo, it draws other sign vectors, so a recorded
  p-value would change by Monte Carlo error (and with scipy's internals), and it is about 20
  times slower: 13 layers x 400 items x 10,000 sign vectors take 4.1 s there, 0.18 s here (one
  matrix product per block of sign vectors shared by every layer).
* ``scipy.stats.bootstrap(..., paired=True, method="percentile")`` gives the same interval of a
  difference of means (it happens to draw ``rng.integers(0, N, (B, N))``, as
  :func:`~vlprobe.stats.metrics.bootstrap_indices` does), but every interval of a run must come
  from the one set of resampled indices (differences between statistics are paired through
  them), resampled within strata where asked, with NaN-aware means; scipy's draws are its
  implementation detail, and it offers no strata. :func:`paired_bootstrap_test` therefore
  resamples with :func:`~vlprobe.stats.metrics.bootstrap_indices` like everything else.
* McNemar's test is not in scipy.stats; its exact form is ``binomtest`` on the discordant
  pairs (used), its chi-square form ``chi2.sf`` of the corrected statistic (used).
* :func:`target_control_rows` — the tidy rows a probing experiment adds per layer: 95% intervals
  of the target and of the seed-mean control, selectivity with its paired interval, and the
  permutation test's p-value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vlprobe.stats.metrics import bootstrap_ci, bootstrap_indices, ci95_rows
from vlprobe.validation import InputError, check_positive_int, check_seed

__all__ = [
    "MCNEMAR_EXACT_BELOW",
    "PERMUTATION_TEST",
    "McNemarResult",
    "PairedBootstrapResult",
    "mcnemar_test",
    "paired_bootstrap_test",
    "resampled_means",
    "seed_means",
    "sign_flip_test",
    "target_control_rows",
    "target_control_rows_batch",
]

#: Discordant pairs below which McNemar's test is the exact binomial test.
MCNEMAR_EXACT_BELOW = 25
#: How the permutation test is described in manifests.
PERMUTATION_TEST = (
    "paired sign-flip test over items: d_i = target_i - mean over control seeds_i, statistic mean(d), "
    "two-sided; exact over all 2^N sign vectors when 2^N <= n_permutations"
)
_BLOCK = 1 << 22  # elements per resampling block: bounds the working memory (32 MB of float64)


def seed_means(values: np.ndarray) -> np.ndarray:
    """Per item, the mean over seeds (NaN where every seed is NaN).

    Parameters
    ----------
    values : ndarray, shape (S, N)
        One row per seed, one column per item.

    Returns
    -------
    ndarray, shape (N,)
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or v.shape[0] == 0:
        raise InputError(f"values must have shape (seeds, items) with at least one seed, got {v.shape}")
    finite = np.isfinite(v)
    count = finite.sum(axis=0)
    total = np.where(finite, v, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def resampled_means(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Mean over items of each row on each bootstrap resample, NaNs left out.

    Parameters
    ----------
    values : ndarray, shape (K, N)
        K statistics' per-item values.
    idx : ndarray of int, shape (B, N)
        Resampled item indices (:func:`~vlprobe.stats.metrics.bootstrap_indices`).

    Returns
    -------
    ndarray, shape (K, B)
        NaN where a resample holds no finite value of the row.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or idx.ndim != 2 or idx.shape[1] != v.shape[1]:
        raise InputError(f"values (K, N) and idx (B, N) must share N, got {v.shape} and {idx.shape}")
    finite = np.isfinite(v)
    filled = np.where(finite, v, 0.0)
    out = np.empty((v.shape[0], idx.shape[0]))
    step = max(1, _BLOCK // max(1, v.shape[0] * v.shape[1]))
    for start in range(0, idx.shape[0], step):
        block = idx[start : start + step]
        total = filled[:, block].sum(axis=-1)
        count = finite[:, block].sum(axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, start : start + step] = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return out


def _nanmean(v: np.ndarray) -> float:
    finite = v[np.isfinite(v)]
    return float(finite.mean()) if len(finite) else float("nan")


def sign_flip_test(differences: np.ndarray, n_permutations: int = 10_000, seed: int = 0) -> tuple[np.ndarray, str]:
    """Two-sided paired sign-flip test of ``mean(d) = 0`` for each row (module docstring).

    Exact, the same p-values as ``scipy.stats.permutation_test(..., permutation_type="samples")``;
    not computed with it for its other Monte Carlo draws and its speed (module docstring).

    Parameters
    ----------
    differences : ndarray, shape (K, N)
        Per-item paired differences of K statistics (layers); NaN = the item has no pair (left
        out of that row's mean).
    n_permutations : int
        Random sign vectors (fewer when all ``2**N`` are enumerated).
    seed : int
        Seed of ``np.random.default_rng``; the same sign vectors serve every row.

    Returns
    -------
    p : ndarray, shape (K,)
        NaN for a row without any finite difference.
    method : str
        ``"exact"`` or ``"monte-carlo"``.
    """
    check_positive_int(n_permutations, "n_permutations")
    check_seed(seed)
    d = np.asarray(differences, dtype=np.float64)
    if d.ndim != 2 or d.shape[1] == 0:
        raise InputError(f"differences must have shape (K, N) with N >= 1, got {d.shape}")
    finite = np.isfinite(d)
    n_valid = finite.sum(axis=1)
    filled = np.where(finite, d, 0.0)
    n = d.shape[1]
    exact = n < 63 and 2**n <= n_permutations
    total = 2**n if exact else n_permutations
    # Sums are compared (the n_valid divisor is shared), with a relative slack for round-off: a
    # flip that reproduces |T| exactly in real arithmetic must count.
    obs_sum = np.abs(filled.sum(axis=1))
    slack = 1e-9 * np.abs(filled).sum(axis=1)
    hits = np.zeros(d.shape[0], dtype=np.int64)
    rng = np.random.default_rng(seed)
    step = max(1, _BLOCK // max(1, n))
    for start in range(0, total, step):
        m = min(step, total - start)
        if exact:
            codes = np.arange(start, start + m, dtype=np.int64)[:, None]
            signs = np.where((codes >> np.arange(n)) & 1, -1.0, 1.0)
        else:
            signs = rng.choice(np.array([-1.0, 1.0]), size=(m, n))
        stat = np.abs(signs @ filled.T)  # (m, K)
        hits += (stat >= obs_sum[None, :] - slack[None, :]).sum(axis=0)
    p = hits / total if exact else (1.0 + hits) / (1.0 + total)
    p = np.where(n_valid > 0, np.minimum(p, 1.0), np.nan)
    return p, ("exact" if exact else "monte-carlo")


@dataclass(frozen=True)
class McNemarResult:
    """McNemar's test of two paired binary outcomes.

    Attributes
    ----------
    a_only, b_only : int
        Items right under A and wrong under B, and the reverse (the discordant pairs).
    n : int
        Paired items.
    statistic : float
        Exact test: ``min(a_only, b_only)``; chi-square: ``(|a_only - b_only| - 1)**2 / (a_only + b_only)``.
    p_value : float
    test : str
        ``mcnemar-exact`` or ``mcnemar-chi2``.
    """

    a_only: int
    b_only: int
    n: int
    statistic: float
    p_value: float
    test: str


def mcnemar_test(a: np.ndarray, b: np.ndarray, *, exact_below: int = MCNEMAR_EXACT_BELOW) -> McNemarResult:
    """McNemar's test on the same items' binary outcomes under A and B (module docstring).

    Parameters
    ----------
    a, b : ndarray of bool, shape (N,)
    exact_below : int
        Fewer discordant pairs than this: the exact two-sided binomial test.
    """
    from scipy.stats import binomtest, chi2

    x, y = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if x.ndim != 1 or x.shape != y.shape:
        raise InputError(f"a and b must be 1-D of one length, got shapes {x.shape} and {y.shape}")
    a_only, b_only = int((x & ~y).sum()), int((~x & y).sum())
    k = a_only + b_only
    if k < exact_below:
        stat = float(min(a_only, b_only))
        p = 1.0 if k == 0 else float(binomtest(a_only, k, 0.5, alternative="two-sided").pvalue)
        return McNemarResult(a_only, b_only, len(x), stat, p, "mcnemar-exact")
    stat = (abs(a_only - b_only) - 1.0) ** 2 / k
    return McNemarResult(a_only, b_only, len(x), float(stat), float(chi2.sf(stat, 1)), "mcnemar-chi2")


@dataclass(frozen=True)
class PairedBootstrapResult:
    """Difference of two paired means with its bootstrap interval and p-value."""

    difference: float
    low: float
    high: float
    p_value: float
    n: int
    test: str = "paired-bootstrap"


def paired_bootstrap_test(
    a: np.ndarray, b: np.ndarray, *, n_boot: int = 1000, seed: int = 0, strata: Any = None,
) -> PairedBootstrapResult:
    """Mean of A minus mean of B over the same items, resampled together (module docstring).

    Unstratified, the same interval as ``scipy.stats.bootstrap(..., paired=True,
    method="percentile")`` with the same seed; it resamples with the project's one bootstrap
    (strata, shared indices, NaN-aware means), not with scipy's (module docstring).

    Parameters
    ----------
    a, b : ndarray, shape (N,)
        Per-item values; an item missing (NaN) under either is left out of both.
    n_boot, seed, strata
        As :func:`~vlprobe.stats.metrics.bootstrap_indices`.
    """
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape:
        raise InputError(f"a and b must be 1-D of one length, got shapes {x.shape} and {y.shape}")
    both = np.isfinite(x) & np.isfinite(y)
    x, y = np.where(both, x, np.nan), np.where(both, y, np.nan)
    diff = _nanmean(x) - _nanmean(y)
    idx = bootstrap_indices(len(x), n_boot, seed, strata=strata)
    boot = resampled_means(np.stack([x, y]), idx)
    delta = boot[0] - boot[1]
    low, high = bootstrap_ci(delta)
    finite = delta[np.isfinite(delta)]
    p = (1.0 + np.sum(np.abs(finite - diff) >= abs(diff) - 1e-12 * max(1.0, abs(diff)))) / (1.0 + len(finite))
    return PairedBootstrapResult(diff, low, high, float(min(p, 1.0)) if len(finite) else float("nan"), int(both.sum()))


def target_control_rows(
    base: Mapping[str, Any], metric: str, target: np.ndarray, control: np.ndarray, idx: np.ndarray,
    bootstrap_seed: int, *, n_permutations: int = 10_000, permutation_seed: int = 0,
) -> tuple[list[dict[str, Any]], str | None]:
    """Interval, selectivity and permutation-test rows of one metric of one layer (module docstring).

    Parameters
    ----------
    base : mapping
        The rows' other tidy columns (experiment, model, stream, layer, pooling, probe, split, subset).
    target : ndarray, shape (S_t, N)
        Per-seed, per-item target values (a probe without target seeds: S_t = 1).
    control : ndarray, shape (S_c, N)
        Per-seed, per-item control values.
    idx : ndarray, shape (B, N)
        Resampled item indices shared by every layer of the run.
    bootstrap_seed : int
        Unused: ``idx`` holds the resamples already, and no row records a seed (every row's
        ``seed`` is None; the run records its seeds with its settings).
    n_permutations, permutation_seed
        Of :func:`sign_flip_test`.

    Returns
    -------
    rows : list of dict
        ``task`` = target | control: ``<metric>.ci95_low/high`` (control: of the seed-mean);
        ``task`` = selectivity: ``<metric>`` (target mean minus control mean), its interval and
        ``<metric>.p_value``. ``n`` = the items with a value.
    method : str or None
        The permutation test's method (None without any paired item).
    """
    rows, methods = target_control_rows_batch([(base, metric, target, control)], idx, bootstrap_seed,
                                              n_permutations=n_permutations, permutation_seed=permutation_seed)
    return rows, methods[0]


def target_control_rows_batch(
    cells: Sequence[tuple[Mapping[str, Any], str, np.ndarray, np.ndarray]], idx: np.ndarray, bootstrap_seed: int,
    *, n_permutations: int = 10_000, permutation_seed: int = 0,
) -> tuple[list[dict[str, Any]], list[str | None]]:
    """:func:`target_control_rows` of many cells (layers, metrics) over the same items at once.

    One resampling and one permutation test serve every cell (the same resamples and sign
    vectors as cell by cell, so the same values; far less work than a call per cell).

    Parameters
    ----------
    cells : sequence of (base, metric, target, control)
        As :func:`target_control_rows`' arguments; every ``target`` and ``control`` has N items.
    idx, bootstrap_seed, n_permutations, permutation_seed
        As :func:`target_control_rows`'.

    Returns
    -------
    rows : list of dict
        Each cell's rows, in the order of ``cells``.
    methods : list of str or None
        Each cell's permutation-test method.
    """
    if not cells:
        return [], []
    t = np.stack([seed_means(target) for _, _, target, _ in cells])  # (K, N)
    c = np.stack([seed_means(control) for _, _, _, control in cells])
    boot = resampled_means(np.concatenate([t, c]), idx)  # (2K, B)
    paired = np.isfinite(t) & np.isfinite(c)
    tested = np.flatnonzero(paired.any(axis=1))
    p = np.full(len(cells), np.nan)
    method = None
    if len(tested):
        p[tested], method = sign_flip_test(np.where(paired, t - c, np.nan)[tested], n_permutations,
                                           permutation_seed)
    rows: list[dict[str, Any]] = []
    for k, (base, metric, _, _) in enumerate(cells):
        for task, values, b in (("target", t[k], boot[k]), ("control", c[k], boot[len(cells) + k])):
            rows += ci95_rows({**base, "task": task, "n": int(np.isfinite(values).sum())}, metric, b)
        sel = {**base, "task": "selectivity", "n": int(paired[k].sum())}
        rows.append({**sel, "metric": metric, "value": _nanmean(t[k]) - _nanmean(c[k]), "seed": None})
        rows += ci95_rows(sel, metric, boot[k] - boot[len(cells) + k])
        rows.append({**sel, "metric": f"{metric}.p_value", "value": float(p[k]), "seed": None})
    return rows, [method if paired[k].any() else None for k in range(len(cells))]
