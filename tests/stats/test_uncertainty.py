"""Item-level uncertainty: resampled means, the sign-flip test, McNemar, the paired bootstrap."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import binomtest

from vlprobe.stats.metrics import bootstrap_indices
from vlprobe.stats.uncertainty import (
    mcnemar_test,
    paired_bootstrap_test,
    resampled_means,
    seed_means,
    sign_flip_test,
    target_control_rows,
    target_control_rows_batch,
)
from vlprobe.validation import InputError


def test_resampled_means_equal_a_loop_and_skip_nans() -> None:
    rng = np.random.default_rng(3)
    values = rng.normal(size=(3, 9))
    values[1, [2, 5]] = np.nan
    values[2] = np.nan
    idx = bootstrap_indices(9, 40, seed=1)
    got = resampled_means(values, idx)
    assert got.shape == (3, 40)
    for k in range(2):
        for b in range(40):
            picked = values[k, idx[b]]
            # Two summation orders of the same floats: equal to round-off, not bit for bit.
            assert got[k, b] == pytest.approx(np.nanmean(picked), rel=1e-12)
    assert np.isnan(got[2]).all()


def test_seed_means_average_each_item_over_its_finite_seeds() -> None:
    v = np.array([[1.0, np.nan, np.nan], [3.0, 4.0, np.nan]])
    got = seed_means(v)
    assert got[:2].tolist() == [2.0, 4.0] and math.isnan(got[2])
    with pytest.raises(InputError, match="seeds, items"):
        seed_means(np.zeros(3))


def brute_force_sign_flip(d: np.ndarray) -> float:
    obs = abs(d.sum())
    hits = sum(abs((np.array(s) * d).sum()) >= obs - 1e-12 for s in itertools.product((-1, 1), repeat=len(d)))
    return hits / 2 ** len(d)


def test_sign_flip_exact_equals_enumeration() -> None:
    rng = np.random.default_rng(0)
    d = np.stack([rng.normal(0.3, 1, size=8), rng.normal(0, 1, size=8), np.zeros(8)])
    p, method = sign_flip_test(d, n_permutations=256)
    assert method == "exact"
    assert p[0] == pytest.approx(brute_force_sign_flip(d[0]))
    assert p[1] == pytest.approx(brute_force_sign_flip(d[1]))
    assert p[2] == 1.0  # no difference at all: every flip is as extreme


def test_sign_flip_monte_carlo_is_seeded_and_close_to_exact() -> None:
    rng = np.random.default_rng(1)
    d = rng.normal(0.2, 1, size=(1, 14))
    exact, _ = sign_flip_test(d, n_permutations=2**14)
    mc, method = sign_flip_test(d, n_permutations=4000, seed=5)
    assert method == "monte-carlo"
    assert mc[0] == pytest.approx(exact[0], abs=0.02)  # Monte Carlo error of 4000 draws at p ~ 0.07: sd 0.004
    assert sign_flip_test(d, n_permutations=4000, seed=5)[0][0] == mc[0]
    assert sign_flip_test(d, n_permutations=4000, seed=6)[0][0] != mc[0]
    assert mc[0] >= 1 / 4001  # never 0: the observed statistic counts


def test_sign_flip_large_effect_is_significant_and_nans_are_left_out() -> None:
    d = np.full((1, 30), 2.0)
    d[0, :5] = np.nan
    p, _ = sign_flip_test(d, n_permutations=2000, seed=0)
    assert p[0] == pytest.approx(1 / 2001)
    assert math.isnan(sign_flip_test(np.full((1, 4), np.nan))[0][0])


@pytest.mark.parametrize(("a_only", "b_only"), [(0, 5), (3, 9), (10, 4), (0, 0)])
def test_mcnemar_exact_equals_scipys_binomial_test(a_only: int, b_only: int) -> None:
    a = np.array([True] * a_only + [False] * b_only + [True] * 7 + [False] * 3)
    b = np.array([False] * a_only + [True] * b_only + [True] * 7 + [False] * 3)
    res = mcnemar_test(a, b)
    assert (res.a_only, res.b_only, res.n, res.test) == (a_only, b_only, len(a), "mcnemar-exact")
    want = 1.0 if a_only + b_only == 0 else binomtest(a_only, a_only + b_only, 0.5).pvalue
    assert res.p_value == pytest.approx(want, rel=1e-9)


def test_mcnemar_chi_square_with_continuity_correction_for_many_discordant_pairs() -> None:
    a = np.array([True] * 30 + [False] * 10)
    b = np.array([False] * 30 + [True] * 10)
    res = mcnemar_test(a, b)
    assert res.test == "mcnemar-chi2"
    assert res.statistic == pytest.approx((20 - 1) ** 2 / 40)
    from scipy.stats import chi2

    assert res.p_value == pytest.approx(chi2.sf(361 / 40, 1))
    with pytest.raises(InputError, match="one length"):
        mcnemar_test(a, b[:-1])


def test_paired_bootstrap_difference_interval_and_p() -> None:
    rng = np.random.default_rng(2)
    a = rng.normal(size=60)
    same = paired_bootstrap_test(a, a, n_boot=200, seed=0)
    assert (same.difference, same.low, same.high, same.p_value) == (0.0, 0.0, 0.0, 1.0)
    shifted = paired_bootstrap_test(a + 1.0 + 0.1 * rng.normal(size=60), a, n_boot=500, seed=0)
    assert 0.9 < shifted.low < shifted.difference < shifted.high < 1.1
    assert shifted.p_value == pytest.approx(1 / 501)
    assert shifted.test == "paired-bootstrap" and shifted.n == 60
    b = a.copy()
    b[:10] = np.nan
    assert paired_bootstrap_test(a, b, n_boot=50).n == 50


def test_target_control_rows_selectivity_and_its_test() -> None:
    rng = np.random.default_rng(4)
    n = 40
    target = (rng.random((1, n)) < 0.9) * 100.0
    control = (rng.random((3, n)) < 0.5) * 100.0
    idx = bootstrap_indices(n, 300, seed=7)
    base = {"experiment": "x", "model": "m", "layer": 2, "subset": "all"}
    rows, method = target_control_rows(base, "separable", target, control, idx, 7, n_permutations=999, permutation_seed=3)
    assert method == "monte-carlo"
    by = {(r["task"], r["metric"]): r for r in rows}
    sel = by[("selectivity", "separable")]
    assert sel["value"] == pytest.approx(target.mean() - control.mean())
    low, high = by[("selectivity", "separable.ci95_low")]["value"], by[("selectivity", "separable.ci95_high")]["value"]
    assert low < sel["value"] < high
    for task in ("target", "control"):
        lo, hi = by[(task, "separable.ci95_low")]["value"], by[(task, "separable.ci95_high")]["value"]
        assert 0 <= lo <= hi <= 100
        assert by[(task, "separable.ci95_low")]["seed"] is None  # a probe seed column; the bootstrap seed is a setting
    p = by[("selectivity", "separable.p_value")]
    assert p["seed"] is None and 1 / 1000 <= p["value"] < 0.01 and p["n"] == n


def test_batch_gives_each_cells_rows() -> None:
    """One resampling and one sign-flip test for many cells: each cell's rows as alone (NaN cases,
    a cell without any paired case, exact and Monte Carlo tests)."""
    rng = np.random.default_rng(5)
    for n, perms in ((40, 999), (9, 1024)):
        idx = bootstrap_indices(n, 200, seed=2)
        cells = []
        for k in range(6):
            target = rng.normal(size=(1, n)) + k / 3
            control = rng.normal(size=(3, n))
            if k == 2:
                target[0, ::4] = np.nan  # margins of cases that are not separable
            if k == 4:
                target[:] = np.nan  # no case with a value
            cells.append(({"layer": k, "subset": "all"}, f"m{k % 2}", target, control))
        rows, methods = target_control_rows_batch(cells, idx, 2, n_permutations=perms, permutation_seed=3)
        alone = [target_control_rows(*cell, idx, 2, n_permutations=perms, permutation_seed=3) for cell in cells]
        expected = [r for out, _ in alone for r in out]
        assert methods == [m for _, m in alone] and methods[4] is None
        assert [{k: v for k, v in r.items() if k != "value"} for r in rows] == \
            [{k: v for k, v in r.items() if k != "value"} for r in expected]
        # Same resamples and sign vectors; a matrix product over many rows may round differently.
        np.testing.assert_allclose([r["value"] for r in rows], [r["value"] for r in expected], rtol=1e-12,
                                   equal_nan=True)


# -- calibration on seeded simulations ---------------------------------------------------------------
# Each check below is a seeded simulation, so its result is fixed; the bounds say how far from the
# nominal rate the estimate may lie by chance (about 3 binomial standard errors of the number of
# replications), so a change of seed would pass too.


def _planted_accuracies(rng: np.random.Generator, n: int, p: float, seeds: int) -> np.ndarray:
    """(seeds, n) per-item accuracies (%) over 4 examples, items sharing a difficulty across tasks."""
    return rng.binomial(4, p, size=(seeds, n)) / 4 * 100


def test_intervals_cover_a_planted_effect_at_their_nominal_rate() -> None:
    from vlprobe.experiments.mlp_runs import ProbeScore, uncertainty_rows

    rng = np.random.default_rng(2026)
    reps, n, p_target, p_control = 400, 40, 0.75, 0.55
    truth = {"target": 100 * p_target, "control": 100 * p_control, "selectivity": 100 * (p_target - p_control)}
    covered = dict.fromkeys(truth, 0)
    for rep in range(reps):
        hard = rng.uniform(-0.15, 0.15, size=n)  # item difficulty, mean 0: the item means stay the truth
        t = _planted_accuracies(rng, n, p_target + hard, 3)
        c = _planted_accuracies(rng, n, p_control + hard, 3)
        # Through the MLP experiments' own path: scores per seed and task, per-item accuracies.
        items = np.arange(n)
        scores = [ProbeScore(0, task, s, "test", float(v[s].mean()), 4 * n, items, v[s])
                  for task, v in (("target", t), ("control", c)) for s in range(3)]
        rows, _, _ = uncertainty_rows(scores, [{"layer": 0}], {"experiment": "x"}, [f"i{k}" for k in items],
                                      bootstrap=500, bootstrap_seed=rep, permutations=100)
        got = {(r["task"], r["metric"]): r["value"] for r in rows}
        for task, value in truth.items():
            covered[task] += got[(task, "accuracy.ci95_low")] <= value <= got[(task, "accuracy.ci95_high")]
    # 95% nominal; 3 standard errors of 400 replications: 0.033, and percentile intervals on 40
    # items run about 0.01 short of nominal (0.94-0.95 in 2000 replications).
    for task, hits in covered.items():
        assert 0.95 - 0.01 - 0.033 <= hits / reps <= 0.95 + 0.033, (task, hits / reps)


@pytest.mark.parametrize(("n", "permutations", "method"), [(12, 4096, "exact"), (25, 2000, "monte-carlo")])
def test_sign_flip_p_values_are_uniform_under_the_null(n: int, permutations: int, method: str) -> None:
    rng = np.random.default_rng(11)
    reps = 1000
    d = rng.standard_t(3, size=(reps, n))  # symmetric about 0, heavy tails: the null of the test
    p, got = sign_flip_test(d, n_permutations=permutations, seed=4)
    assert got == method
    for alpha in (0.01, 0.05, 0.1, 0.25, 0.5):
        se = math.sqrt(alpha * (1 - alpha) / reps)
        assert abs(np.mean(p <= alpha) - alpha) <= 3 * se + 1 / 2**n, alpha  # + the exact test's atom
    ks = np.max(np.abs(np.sort(p) - np.arange(1, reps + 1) / reps))
    assert ks < 1.63 / math.sqrt(reps)  # Kolmogorov-Smirnov, 1% level


def test_sign_flip_is_not_anti_conservative_on_binary_outcomes_under_the_null() -> None:
    # Separability's shape: one target fit against the mean of three control seeds, 0/100 per
    # case, target and control drawn alike: many ties, so p-values are discrete and the test may
    # only be conservative.
    rng = np.random.default_rng(5)
    reps, n = 600, 40
    p_case = rng.uniform(0.3, 0.9, size=(reps, n))
    t = (rng.random((reps, n)) < p_case) * 100.0
    c = (rng.random((3, reps, n)) < p_case).mean(axis=0) * 100.0
    p, _ = sign_flip_test(t - c, n_permutations=1000, seed=2)
    for alpha in (0.05, 0.1, 0.25):
        assert np.mean(p <= alpha) <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / reps), alpha


# -- against scipy.stats (module docstring of vlprobe.stats.uncertainty: what it uses, and why not) --


def _old_mcnemar_exact_p(a_only: int, b_only: int) -> float:
    """The exact p-value as vlprobe computed it before scipy's binomtest: 2 P(X <= min), capped."""
    from scipy.stats import binom

    k = a_only + b_only
    return 1.0 if k == 0 else min(1.0, 2.0 * float(binom.cdf(min(a_only, b_only), k, 0.5)))


def test_mcnemar_exact_with_binomtest_is_what_it_was() -> None:
    """Every split of fewer than 25 discordant pairs: binomtest's p equals the former formula (the
    symmetric binomial's two-sided p is twice the smaller tail), to float rounding (1e-12)."""
    for k in range(25):
        for a_only in range(k + 1):
            b_only = k - a_only
            a = np.array([True] * a_only + [False] * b_only + [True, False])
            b = np.array([False] * a_only + [True] * b_only + [True, False])
            res = mcnemar_test(a, b)
            assert res.test == "mcnemar-exact"
            assert res.p_value == pytest.approx(_old_mcnemar_exact_p(a_only, b_only), abs=1e-12), (a_only, b_only)


def _scipy_sign_flip(d: np.ndarray, n_resamples: int, seed: int = 0) -> np.ndarray:
    from scipy.stats import permutation_test

    def mean(x: np.ndarray, axis: int) -> np.ndarray:  # NaN-aware: an item without a pair counts in no sum
        return np.nansum(x, axis=axis) / np.maximum(np.isfinite(x).sum(axis=axis), 1)

    res = permutation_test((d,), mean, permutation_type="samples", vectorized=True, n_resamples=n_resamples,
                           axis=-1, alternative="two-sided", rng=np.random.default_rng(seed))
    return np.asarray(res.pvalue, dtype=np.float64)


def test_sign_flip_exact_equals_scipys_permutation_test() -> None:
    """All 2**N sign vectors: the same p-values as scipy.stats.permutation_test (to 1e-12), on
    continuous differences, on the ties of 0/100 outcomes (separability), on zeros and with NaNs."""
    rng = np.random.default_rng(7)
    n = 12
    d = np.stack([rng.normal(0.4, 1, size=n), rng.normal(0, 1, size=n), np.zeros(n),
                  rng.choice([-100.0, 0.0, 100.0], size=n, p=[0.2, 0.4, 0.4]),
                  rng.choice([-100.0, -100 / 3, 0.0, 100 / 3, 100.0], size=n)])
    d[1, [0, 5]] = np.nan
    ours, method = sign_flip_test(d, n_permutations=2**n)
    assert method == "exact"
    np.testing.assert_allclose(ours, _scipy_sign_flip(d, 2**n), rtol=0, atol=1e-12)


def test_sign_flip_monte_carlo_agrees_with_scipy_within_monte_carlo_error() -> None:
    """Random sign vectors (other draws in scipy): p-values agree within 4 standard errors of the
    difference of two independent estimates, sqrt(2 p (1 - p) / B)."""
    rng = np.random.default_rng(8)
    d = rng.normal(0.12, 1, size=(4, 200))
    B = 4000
    ours, method = sign_flip_test(d, n_permutations=B, seed=3)
    theirs = _scipy_sign_flip(d, B, seed=3)
    assert method == "monte-carlo"
    se = np.sqrt(2 * np.maximum(ours, 1 / B) * (1 - np.minimum(ours, 1 - 1 / B)) / B)
    assert (np.abs(ours - theirs) <= 4 * se + 1 / B).all(), (ours, theirs)


def test_paired_bootstrap_equals_scipys_paired_percentile_bootstrap() -> None:
    """Unstratified, the interval equals scipy.stats.bootstrap(paired=True, method="percentile")
    with the same seed, and the p-value the same formula on scipy's bootstrap distribution (to
    1e-12: the same resampled indices, other summation orders). If scipy ever draws its
    resamples otherwise, this fails though both stay right: compare within Monte Carlo error then."""
    from scipy.stats import bootstrap

    rng = np.random.default_rng(9)
    for n, shift in ((12, 0.0), (80, 0.3), (400, 0.05)):
        a = rng.normal(size=n)
        b = a - shift + rng.normal(0, 0.5, size=n)
        ours = paired_bootstrap_test(a, b, n_boot=1000, seed=4)
        res = bootstrap((a, b), lambda x, y, axis: x.mean(axis=axis) - y.mean(axis=axis), paired=True,
                        vectorized=True, n_resamples=1000, method="percentile", confidence_level=0.95,
                        rng=np.random.default_rng(4))
        dist = res.bootstrap_distribution
        diff = a.mean() - b.mean()
        p = (1 + np.sum(np.abs(dist - diff) >= abs(diff) - 1e-12 * max(1.0, abs(diff)))) / (1 + len(dist))
        assert ours.difference == pytest.approx(diff, abs=1e-12)
        assert (ours.low, ours.high) == pytest.approx((res.confidence_interval.low, res.confidence_interval.high),
                                                      abs=1e-12)
        assert ours.p_value == pytest.approx(p, abs=1e-12)
