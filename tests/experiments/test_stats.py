"""Item-level uncertainty: resampled means, the sign-flip test, McNemar, the paired bootstrap."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import binomtest

from vlprobe.experiments.metrics import bootstrap_indices
from vlprobe.experiments.stats import (
    mcnemar_test,
    paired_bootstrap_test,
    resampled_means,
    seed_means,
    sign_flip_test,
    target_control_rows,
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
        assert by[(task, "separable.ci95_low")]["seed"] == 7
    p = by[("selectivity", "separable.p_value")]
    assert p["seed"] == 3 and 1 / 1000 <= p["value"] < 0.01 and p["n"] == n
