"""Benchmark metrics (SugarCrepe, VALSE, AUROC, bootstrap, block-wise recall): hand cases and properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.stats import mannwhitneyu
from sklearn.metrics import roc_auc_score

from vlprobe.stats.metrics import (
    auroc,
    bootstrap_ci,
    bootstrap_indices,
    pair_correct,
    recall_at_k,
    recall_ranks,
    sugarcrepe_accuracy,
    valse_metrics,
    winoground_outcomes,
)

small = st.integers(-3, 3).map(float)  # small integers: ties are frequent
vectors = st.integers(1, 12).flatmap(lambda n: st.tuples(arrays(np.float64, n, elements=small),
                                                          arrays(np.float64, n, elements=small)))


# --- perfect and constant scorers ---------------------------------------------------------------


def test_perfect_scorer_gets_100_everywhere() -> None:
    rng = np.random.default_rng(0)
    n = 50
    # Winoground: the matching pair always scores highest.
    s = rng.uniform(0, 0.5, size=(n, 2, 2)) + np.eye(2)[None]
    assert all(v.all() for v in winoground_outcomes(s).values())
    # Recall: a diagonal-dominant matrix.
    m = rng.uniform(0, 0.5, size=(2 * n, 2 * n)) + np.eye(2 * n)
    assert recall_at_k(m, np.arange(2 * n), ks=(1, 5)) == {1: 1.0, 5: 1.0}
    assert recall_at_k(m.T, np.arange(2 * n), ks=(1,)) == {1: 1.0}
    # SugarCrepe: positives above negatives in every subset and group.
    pos, neg = rng.uniform(0.6, 1, n), rng.uniform(0, 0.4, n)
    subsets = np.array(["replace_obj", "swap_att", "add_att", "replace_rel", "swap_obj"] * 10)
    assert all(v == 1.0 for v, _ in sugarcrepe_accuracy(subsets, pair_correct(pos, neg)).values())
    # VALSE with a match probability: captions above 0.5, foils below.
    got = valse_metrics(pos, neg, threshold=0.5)
    for metric in ("acc_r", "auroc", "caption_tpr", "foil_tnr", "acc", "min_rate", "ppv", "npv", "min_precision"):
        assert got[metric] == 1.0, metric


def test_constant_scorer_gets_zero_on_strict_metrics() -> None:
    s = np.full((20, 2, 2), 0.3)
    out = winoground_outcomes(s)
    for metric in ("text", "image", "group"):
        assert not out[metric].any(), metric
    assert recall_at_k(np.full((6, 6), 1.0), np.arange(6), ks=(1, 5, 6)) == {1: 0.0, 5: 0.0, 6: 1.0}
    c = np.full(10, 0.7)
    assert not pair_correct(c, c).any()
    got = valse_metrics(c, c, threshold=0.5)
    assert got["acc_r"] == 0.0 and got["auroc"] == 0.5  # every pair tied: one half each
    assert got["caption_tpr"] == 1.0 and got["foil_tnr"] == 0.0 and got["acc"] == 0.5


# --- swapping order flips only what it should -----------------------------------------------------


@settings(deadline=None)
@given(vectors)
def test_swapping_positive_and_negative(v: tuple[np.ndarray, np.ndarray]) -> None:
    pos, neg = v
    ties = (pos == neg).mean()
    acc = pair_correct(pos, neg).mean()
    assert pair_correct(neg, pos).mean() == pytest.approx(1 - acc - ties)
    a, b = valse_metrics(pos, neg), valse_metrics(neg, pos)
    assert b["auroc"] == pytest.approx(1 - a["auroc"])
    assert b["acc_r"] == pytest.approx(1 - a["acc_r"] - ties)


@settings(max_examples=40, deadline=None)  # no timing asserts: a shared CPU varies 20x
@given(vectors)
def test_item_order_changes_nothing(v: tuple[np.ndarray, np.ndarray]) -> None:
    pos, neg = v
    perm = np.random.default_rng(len(pos)).permutation(len(pos))
    assert valse_metrics(pos, neg, threshold=0.0) == pytest.approx(valse_metrics(pos[perm], neg[perm], threshold=0.0),
                                                                   nan_ok=True)
    sub = np.array(["swap_obj", "add_att"] * len(pos))[: len(pos)]
    a = sugarcrepe_accuracy(sub, pair_correct(pos, neg))
    b = sugarcrepe_accuracy(sub[perm], pair_correct(pos[perm], neg[perm]))
    assert a == {k: b[k] for k in a}


def test_recall_invariant_to_relabelling_items() -> None:
    rng = np.random.default_rng(1)
    m = rng.normal(size=(30, 30))
    perm = rng.permutation(30)
    assert recall_at_k(m, np.arange(30)) == recall_at_k(m[perm][:, perm], np.arange(30))


# --- recall in blocks ------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)  # no timing asserts: a shared CPU varies 20x
@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 40), st.integers(0, 2**16))
def test_recall_blocks_equal_one_pass(q: int, c: int, block: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    scores = rng.integers(-2, 3, size=(q, c)).astype(np.float32)
    positives = rng.integers(0, c, size=q)
    whole = recall_ranks(scores, positives, block_elements=q * c)
    np.testing.assert_array_equal(recall_ranks(scores, positives, block_elements=block), whole)
    loop = [1 + sum(1 for j in range(c) if j != p and scores[i, j] >= scores[i, p]) for i, p in enumerate(positives)]
    np.testing.assert_array_equal(whole, loop)


def test_recall_keeps_float32_and_finds_nan_in_any_block() -> None:
    m = np.eye(50, dtype=np.float32)
    assert recall_ranks(m, np.arange(50), block_elements=100).tolist() == [1] * 50
    m[47, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        recall_ranks(m, np.arange(50), block_elements=100)


def test_recall_is_monotone_in_k() -> None:
    rng = np.random.default_rng(3)
    got = recall_at_k(rng.integers(0, 4, size=(40, 25)).astype(float), rng.integers(0, 25, size=40), ks=range(1, 26))
    values = list(got.values())
    assert values == sorted(values) and values[-1] == 1.0


# --- AUROC ---------------------------------------------------------------------------------------


@settings(deadline=None)
@given(arrays(np.float64, st.integers(1, 15), elements=small), arrays(np.float64, st.integers(1, 15), elements=small))
def test_auroc_equals_mann_whitney(pos: np.ndarray, neg: np.ndarray) -> None:
    got = float(auroc(pos, neg))
    u = mannwhitneyu(pos, neg, alternative="two-sided", method="asymptotic").statistic
    assert got == pytest.approx(u / (len(pos) * len(neg)))
    pairs = [(1.0 if p > q else 0.5 if p == q else 0.0) for p in pos for q in neg]
    assert got == pytest.approx(np.mean(pairs))
    y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    assert got == pytest.approx(roc_auc_score(y, np.r_[pos, neg]))


def test_auroc_batched_rows_equal_single_calls() -> None:
    rng = np.random.default_rng(2)
    pos, neg = rng.integers(0, 3, size=(4, 7)), rng.integers(0, 3, size=(4, 5))
    np.testing.assert_allclose(auroc(pos, neg), [auroc(p, q) for p, q in zip(pos, neg, strict=True)])


def test_auroc_needs_both_classes() -> None:
    with pytest.raises(ValueError, match="positive and one negative"):
        auroc(np.array([1.0]), np.array([]))


# --- VALSE: hand case as lxmert_valse_eval.py computes it ------------------------------------


def test_valse_metrics_hand_case() -> None:
    # P(match) of caption and foil for 5 items; threshold 0.5.
    cap = np.array([0.9, 0.6, 0.4, 0.7, 0.8])
    foil = np.array([0.2, 0.7, 0.3, 0.5, 0.9])
    got = valse_metrics(cap, foil, threshold=0.5)
    # Item 3's foil score equals the threshold: skipped for the thresholded metrics, as VALSE does.
    fit = [True, True, False, True]           # caption > 0.5
    det = [True, False, True, False]          # foil <= 0.5
    assert got["n"] == 5 and got["n_thresholded"] == 4
    assert got["caption_tpr"] == pytest.approx(np.mean(fit)) == 0.75
    assert got["foil_tnr"] == pytest.approx(np.mean(det)) == 0.5
    assert got["acc"] == pytest.approx(0.625)
    assert got["min_rate"] == pytest.approx(0.5)
    # Precisions: texts called matching = 3 captions + 2 foils; not matching = 1 caption + 2 foils.
    assert got["ppv"] == pytest.approx(3 / 5)
    assert got["npv"] == pytest.approx(2 / 3)
    assert got["min_precision"] == pytest.approx(3 / 5)
    assert got["acc_r"] == pytest.approx(np.mean(cap > foil)) == 0.6  # on all items, raw scores, tie wrong
    assert got["auroc"] == pytest.approx(roc_auc_score(np.r_[np.ones(5), np.zeros(5)], np.r_[cap, foil]))
    kept_all = valse_metrics(cap, foil, threshold=0.5, skip_foil_ties=False)
    assert kept_all["n_thresholded"] == 5 and kept_all["foil_tnr"] == pytest.approx(3 / 5)


def valse_code_acc_r(cap_logits: np.ndarray, foil_logits: np.ndarray) -> float:
    """acc_r as VALSE's lxmert_valse_eval.py computes it, item by item: s = [[caption no-match,
    caption match], [foil no-match, foil match]]; items with s[1,0] == s[1,1] skipped; pair right
    when s[0,1] > s[1,1] (raw logits, a tie wrong)."""
    pairs = []
    for c, f in zip(cap_logits.tolist(), foil_logits.tolist(), strict=True):
        s = [c, f]
        if s[1][0] == s[1][1]:
            continue
        pairs.append(s[0][1] > s[1][1])
    return sum(pairs) / len(pairs)


def test_acc_r_valse_is_valse_codes_acc_r_and_differs_from_the_softmax_ranking() -> None:
    rng = np.random.default_rng(3)
    cap = rng.normal(size=(300, 2))
    foil = rng.normal(size=(300, 2))
    foil[:20, 1] = foil[:20, 0]  # foil-tie items: VALSE skips them
    cap[20:40, 1] = foil[20:40, 1]  # equal match logits: a tie is wrong
    p_cap = np.exp(cap[:, 1]) / np.exp(cap).sum(1)  # P(match), the declared score
    p_foil = np.exp(foil[:, 1]) / np.exp(foil).sum(1)
    got = valse_metrics(p_cap, p_foil, threshold=0.5, caption_logits=cap, foil_logits=foil)
    assert got["acc_r_valse"] == pytest.approx(valse_code_acc_r(cap, foil), abs=1e-15)
    assert got["n_acc_r_valse"] == 280
    assert got["acc_r"] == pytest.approx(np.mean(p_cap > p_foil))  # vlprobe's: every item, P(match)
    # Two definitions: the softmax also depends on the no-match logit, so items flip between them.
    assert ((p_cap > p_foil) != (cap[:, 1] > foil[:, 1])).sum() > 30
    assert "acc_r_valse" not in valse_metrics(p_cap, p_foil)  # no logits, no reference acc_r
    with pytest.raises(ValueError, match="give both or neither"):
        valse_metrics(p_cap, p_foil, caption_logits=cap)
    with pytest.raises(ValueError, match="shape"):
        valse_metrics(p_cap, p_foil, caption_logits=cap[:, :1], foil_logits=foil)


def test_valse_without_threshold_has_ranking_metrics_only() -> None:
    assert set(valse_metrics(np.array([0.3, 0.2]), np.array([0.1, 0.4]))) == {"acc_r", "auroc", "n"}


def test_valse_bad_input() -> None:
    with pytest.raises(ValueError, match="one length"):
        valse_metrics(np.ones(3), np.ones(2))
    with pytest.raises(ValueError, match="NaN"):
        valse_metrics(np.array([np.nan]), np.array([0.0]))


# --- SugarCrepe aggregates ---------------------------------------------------------------------


def test_sugarcrepe_micro_average_matches_the_paper_arithmetic() -> None:
    # ViT-B/32 (SugarCrepe's micro-average): REPLACE = (0.9092*1652 + 0.8008*788 + 0.6920*1406) / 3846 = 80.76.
    sizes = {"replace_obj": 1652, "replace_att": 788, "replace_rel": 1406}
    accs = {"replace_obj": 0.9092, "replace_att": 0.8008, "replace_rel": 0.6920}
    subsets, correct = [], []
    for name, n in sizes.items():
        hits = round(accs[name] * n)
        subsets += [name] * n
        correct += [True] * hits + [False] * (n - hits)
    got = sugarcrepe_accuracy(subsets, np.array(correct))
    assert list(got) == ["replace_obj", "replace_att", "replace_rel", "replace", "all"]
    assert got["replace"][1] == 3846
    assert 100 * got["replace"][0] == pytest.approx(80.76, abs=0.01)
    assert got["replace"][0] != pytest.approx(np.mean([got[s][0] for s in sizes]))  # not a macro mean


def test_pair_correct_ties_are_wrong() -> None:
    assert pair_correct(np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 4.0])).tolist() == [False, True, False]


# --- bootstrap ---------------------------------------------------------------------------------


def test_bootstrap_indices_seeded_and_stratified() -> None:
    strata = np.array(["a"] * 5 + ["b"] * 3)
    a = bootstrap_indices(8, 200, seed=4, strata=strata)
    np.testing.assert_array_equal(a, bootstrap_indices(8, 200, seed=4, strata=strata))
    assert not np.array_equal(a, bootstrap_indices(8, 200, seed=5, strata=strata))
    assert (a[:, :5] < 5).all() and (a[:, 5:] >= 5).all()  # each item resampled within its subset
    assert a.shape == (200, 8)
    assert bootstrap_indices(8, 0).shape == (0, 8)  # 0 resamples: no intervals (--bootstrap 0)
    with pytest.raises(ValueError, match="n_boot"):
        bootstrap_indices(8, -1)


def test_bootstrap_ci_brackets_the_estimate_and_shrinks_with_n() -> None:
    rng = np.random.default_rng(0)
    widths = []
    for n in (100, 10000):
        x = rng.random(n) < 0.3
        idx = bootstrap_indices(n, 500, seed=1)
        low, high = bootstrap_ci(x[idx].mean(axis=1))
        assert low <= x.mean() <= high
        widths.append(high - low)
    assert widths[1] < widths[0] / 5
    assert np.isnan(bootstrap_ci(np.array([np.nan, np.nan]))[0])


def test_recall_transposed_views_stream_in_memory_order() -> None:
    rng = np.random.default_rng(5)
    m = rng.integers(-2, 3, size=(37, 23)).astype(np.float32)
    pos = rng.integers(0, 37, size=23)
    view = m.T  # F-ordered view: counted by accumulating over the C-ordered rows
    assert not view.flags.c_contiguous
    for block in (1, 7, 10_000):
        np.testing.assert_array_equal(recall_ranks(view, pos, block_elements=block),
                                      recall_ranks(np.ascontiguousarray(view), pos))
    m[30, 4] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        recall_ranks(m.T, pos, block_elements=23)
