"""Winoground outcomes and recall@k (vlprobe.stats.metrics): hand cases and properties."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from vlprobe.stats.metrics import recall_at_k, winoground_outcomes

# s[n, k, j] = score of caption k with image j. Small integers make ties frequent.
int_items = arrays(np.float64, st.tuples(st.integers(1, 6), st.just(2), st.just(2)),
                   elements=st.integers(-3, 3).map(float))
real_items = arrays(np.float64, st.tuples(st.integers(1, 6), st.just(2), st.just(2)),
                    elements=st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False))


def item(c0i0: float, c0i1: float, c1i0: float, c1i1: float) -> np.ndarray:
    """One item as a (1, 2, 2) array, in reading order s[k, j]."""
    return np.array([[[c0i0, c0i1], [c1i0, c1i1]]], dtype=np.float64)


def outcome(s: np.ndarray) -> dict[str, bool]:
    return {k: bool(v[0]) for k, v in winoground_outcomes(s).items()}


# --- winoground_outcomes: hand-built cases ---------------------------------------------------


def test_all_pass() -> None:
    assert outcome(item(0.9, 0.1, 0.2, 0.8)) == {"text": True, "image": True, "group": True, "matching": True}


def test_text_only() -> None:
    # Per image the right caption wins (0.5 > 0.1, 0.9 > 0.6), but caption 0 prefers image 1.
    s = item(c0i0=0.5, c0i1=0.6, c1i0=0.1, c1i1=0.9)
    assert outcome(s) == {"text": True, "image": False, "group": False, "matching": True}


def test_image_only() -> None:
    # Per caption the right image wins; image 0 prefers caption 1.
    s = item(c0i0=0.5, c0i1=0.1, c1i0=0.6, c1i1=0.9)
    assert outcome(s) == {"text": False, "image": True, "group": False, "matching": True}


def test_neither() -> None:
    s = item(c0i0=0.1, c0i1=0.9, c1i0=0.8, c1i1=0.2)
    assert outcome(s) == {"text": False, "image": False, "group": False, "matching": False}


def test_half_right_fails_both() -> None:
    # Caption 0 / image 0 dominate everything: image 1 and caption 1 both pick the wrong partner.
    s = item(c0i0=0.9, c0i1=0.5, c1i0=0.5, c1i1=0.1)
    assert outcome(s) == {"text": False, "image": False, "group": False, "matching": False}


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        # c0i0 == c1i0: image 0 cannot choose -> text fails; image still passes.
        (item(0.5, 0.1, 0.5, 0.9), {"text": False, "image": True, "group": False}),
        # c1i1 == c1i0: caption 1 cannot choose -> image fails; text still passes.
        (item(0.9, 0.1, 0.5, 0.5), {"text": True, "image": False, "group": False}),
        # All equal: everything fails, including matching (00*11 == 01*10).
        (item(0.3, 0.3, 0.3, 0.3), {"text": False, "image": False, "group": False, "matching": False}),
    ],
)
def test_ties_are_failures(s: np.ndarray, expected: dict[str, bool]) -> None:
    got = outcome(s)
    for key, value in expected.items():
        assert got[key] is value, key


def test_matching_only_for_non_negative_scores() -> None:
    assert "matching" in winoground_outcomes(item(0.9, 0.1, 0.2, 0.8))
    # Zeros are scores like any other (the human scores are 0/1): 0.9 * 0.8 > 0 * 0.2.
    assert winoground_outcomes(item(0.9, 0.0, 0.2, 0.8))["matching"].tolist() == [True]
    assert winoground_outcomes(item(0.0, 0.0, 0.0, 0.0))["matching"].tolist() == [False]  # a tie fails
    out = winoground_outcomes(item(0.9, -0.1, 0.2, 0.8))
    assert set(out) == {"text", "image", "group"}
    # One negative score anywhere leaves matching undefined for the whole batch.
    batch = np.concatenate([item(0.9, 0.1, 0.2, 0.8), item(0.9, 0.1, 0.2, -1.0)])
    assert "matching" not in winoground_outcomes(batch)


def test_matching_of_human_like_binary_scores_against_a_loop() -> None:
    # 0/1 judgements, as Winoground's human scores are: every score either 0 or 1.
    rng = np.random.default_rng(11)
    s = rng.integers(0, 2, size=(500, 2, 2)).astype(float)
    want = []
    for n in range(len(s)):  # the definition, one item at a time, in plain Python
        (c0i0, c0i1), (c1i0, c1i1) = s[n].tolist()
        want.append(c0i0 * c1i1 > c0i1 * c1i0)
    assert winoground_outcomes(s)["matching"].tolist() == want


def test_matching_values() -> None:
    # 0.9 * 0.8 > 0.1 * 0.2 although text and image fail for the second item.
    s = np.concatenate([item(0.9, 0.1, 0.2, 0.8), item(0.9, 0.5, 0.95, 0.8), item(1, 2, 3, 4)])
    np.testing.assert_array_equal(winoground_outcomes(s)["matching"], [True, True, False])


def test_vectorised_per_item() -> None:
    s = np.concatenate([
        item(0.9, 0.1, 0.2, 0.8),  # group
        item(0.5, 0.6, 0.1, 0.9),  # text only
        item(0.5, 0.1, 0.6, 0.9),  # image only
        item(0.1, 0.9, 0.8, 0.2),  # none
    ])
    out = winoground_outcomes(s)
    np.testing.assert_array_equal(out["text"], [True, True, False, False])
    np.testing.assert_array_equal(out["image"], [True, False, True, False])
    np.testing.assert_array_equal(out["group"], [True, False, False, False])
    assert all(v.dtype == bool and v.shape == (4,) for v in out.values())


def test_accepts_lists_and_ints() -> None:
    out = winoground_outcomes([[[2, 0], [1, 3]]])
    assert out["group"].tolist() == [True]


def test_nan_raises() -> None:
    s = item(0.9, 0.1, 0.2, 0.8)
    s[0, 1, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        winoground_outcomes(s)


@pytest.mark.parametrize("shape", [(2, 2), (4,), (3, 2, 3), (3, 3, 2), (1, 2, 2, 1), ()])
def test_wrong_shape_raises(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=r"\(N, 2, 2\)"):
        winoground_outcomes(np.ones(shape))


# --- winoground_outcomes: properties ----------------------------------------------------------


@given(int_items)
def test_group_is_text_and_image(s: np.ndarray) -> None:
    out = winoground_outcomes(s)
    np.testing.assert_array_equal(out["group"], out["text"] & out["image"])


def _reference(s: np.ndarray) -> dict[str, list[bool]]:
    """The definitions (Thrush et al. 2022), one item at a time."""
    text, image = [], []
    for m in s:
        (c0i0, c0i1), (c1i0, c1i1) = m
        text.append(bool(c0i0 > c1i0 and c1i1 > c0i1))
        image.append(bool(c0i0 > c0i1 and c1i1 > c1i0))
    return {"text": text, "image": image}


@given(int_items)
def test_matches_loop_definition(s: np.ndarray) -> None:
    out, ref = winoground_outcomes(s), _reference(s)
    assert out["text"].tolist() == ref["text"]
    assert out["image"].tolist() == ref["image"]


@given(int_items)
def test_swapping_images_or_captions_reverses_outcomes(s: np.ndarray) -> None:
    """Swapping one side's pair turns each outcome's two comparisons into their reverses.

    So an item can never pass the same outcome before and after such a swap; with ties it may
    fail both. (Swapping both sides is checked below.)
    """
    out = winoground_outcomes(s)
    for swapped in (s[:, :, ::-1], s[:, ::-1, :]):
        new = winoground_outcomes(swapped)
        for key in ("text", "image", "group"):
            assert not (out[key] & new[key]).any(), key
        # Exactly: text' = s01 > s11 and s10 > s00 (images swapped), and the analogues.
    img = winoground_outcomes(s[:, :, ::-1])
    np.testing.assert_array_equal(img["text"], (s[:, 0, 1] > s[:, 1, 1]) & (s[:, 1, 0] > s[:, 0, 0]))
    np.testing.assert_array_equal(img["image"], (s[:, 0, 1] > s[:, 0, 0]) & (s[:, 1, 0] > s[:, 1, 1]))
    cap = winoground_outcomes(s[:, ::-1, :])
    np.testing.assert_array_equal(cap["text"], (s[:, 1, 0] > s[:, 0, 0]) & (s[:, 0, 1] > s[:, 1, 1]))
    np.testing.assert_array_equal(cap["image"], (s[:, 1, 0] > s[:, 1, 1]) & (s[:, 0, 1] > s[:, 0, 0]))


@given(int_items)
def test_swapping_one_side_without_ties_is_an_exact_reversal(s: np.ndarray) -> None:
    s = s + np.arange(4.0).reshape(1, 2, 2) * 1e-3  # break every tie within an item
    out = winoground_outcomes(s)
    ref = {"text": ((s[:, 0, 0] > s[:, 1, 0]), (s[:, 1, 1] > s[:, 0, 1])),
           "image": ((s[:, 0, 0] > s[:, 0, 1]), (s[:, 1, 1] > s[:, 1, 0]))}
    for swapped in (s[:, :, ::-1], s[:, ::-1, :]):
        new = winoground_outcomes(swapped)
        for key, (a, b) in ref.items():
            np.testing.assert_array_equal(out[key], a & b)
            np.testing.assert_array_equal(new[key], ~a & ~b)


@given(real_items)
def test_swapping_images_and_captions_leaves_outcomes_unchanged(s: np.ndarray) -> None:
    out = winoground_outcomes(s)
    both = winoground_outcomes(s[:, ::-1, ::-1])
    assert set(out) == set(both)
    for key in out:
        np.testing.assert_array_equal(out[key], both[key], err_msg=key)


@given(int_items)
def test_transposing_exchanges_text_and_image(s: np.ndarray) -> None:
    out = winoground_outcomes(s)
    tr = winoground_outcomes(np.swapaxes(s, 1, 2))
    np.testing.assert_array_equal(tr["text"], out["image"])
    np.testing.assert_array_equal(tr["image"], out["text"])
    np.testing.assert_array_equal(tr["group"], out["group"])


@given(int_items, st.integers(1, 5), st.integers(-10, 10))
def test_invariant_to_increasing_affine_maps(s: np.ndarray, a: int, b: int) -> None:
    out, mapped = winoground_outcomes(s), winoground_outcomes(a * s + b)
    for key in ("text", "image", "group"):
        np.testing.assert_array_equal(out[key], mapped[key])


@given(
    arrays(np.float64, st.tuples(st.integers(1, 6), st.just(2), st.just(2)),
           elements=st.floats(-100, 100, allow_nan=False)),
    st.floats(0.001, 50),
)
def test_diagonal_dominant_items_pass_everything(s: np.ndarray, margin: float) -> None:
    # Raise both diagonal entries above every off-diagonal entry of their item.
    off = np.maximum(s[:, 0, 1], s[:, 1, 0])
    s = s.copy()
    s[:, 0, 0] = np.maximum(s[:, 0, 0], off + margin)
    s[:, 1, 1] = np.maximum(s[:, 1, 1], off + margin)
    out = winoground_outcomes(s)
    for key in ("text", "image", "group"):
        assert out[key].all(), key


# --- recall_at_k --------------------------------------------------------------------------------


def test_recall_hand_case() -> None:
    scores = np.array([
        [0.9, 0.1, 0.2],  # positive 0 ranks 1
        [0.5, 0.4, 0.3],  # positive 2 ranks 3
        [0.1, 0.7, 0.3],  # positive 0 ranks 3
        [0.2, 0.8, 0.1],  # positive 1 ranks 1
    ])
    got = recall_at_k(scores, np.array([0, 2, 0, 1]), ks=(1, 2, 3))
    assert got == {1: 0.5, 2: 0.5, 3: 1.0}


def test_recall_default_ks_and_types() -> None:
    got = recall_at_k(np.eye(12), np.arange(12))
    assert list(got) == [1, 2, 5, 10]
    assert all(isinstance(k, int) and isinstance(v, float) for k, v in got.items())


def test_recall_identity_is_perfect() -> None:
    n = 20
    rng = np.random.default_rng(0)
    scores = rng.uniform(0, 0.5, size=(n, n)) + np.eye(n)
    assert recall_at_k(scores, np.arange(n), ks=(1,)) == {1: 1.0}
    perm = rng.permutation(n)  # positives need not be on the diagonal
    assert recall_at_k(scores[:, np.argsort(perm)], perm, ks=(1,)) == {1: 1.0}


def test_recall_ties_count_against_the_model() -> None:
    # Query 0's positive (column 0) ties with column 2: not a hit at k=1, a hit at k=2.
    scores = np.array([[0.7, 0.1, 0.7], [0.0, 0.9, 0.2]])
    got = recall_at_k(scores, np.array([0, 1]), ks=(1, 2, 3))
    assert got == {1: 0.5, 2: 1.0, 3: 1.0}
    # A three-way tie at the top ranks the positive 3rd.
    got = recall_at_k(np.array([[1.0, 1.0, 1.0, 0.0]]), np.array([1]), ks=(1, 2, 3))
    assert got == {1: 0.0, 2: 0.0, 3: 1.0}


def test_recall_k_beyond_candidates_is_one() -> None:
    assert recall_at_k(np.array([[0.0, 1.0]]), np.array([0]), ks=(1, 2, 50)) == {1: 0.0, 2: 1.0, 50: 1.0}


def _rank_loop(scores: np.ndarray, positives: np.ndarray) -> list[int]:
    ranks = []
    for row, p in zip(scores, positives, strict=True):
        ranks.append(1 + sum(1 for c, v in enumerate(row) if c != p and v >= row[p]))
    return ranks


@st.composite
def score_problems(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    q = draw(st.integers(1, 8))
    c = draw(st.integers(1, 8))
    scores = draw(arrays(np.float64, (q, c), elements=st.integers(-2, 2).map(float)))
    positives = np.array(draw(st.lists(st.integers(0, c - 1), min_size=q, max_size=q)), dtype=np.int64)
    return scores, positives


@given(score_problems())
def test_recall_matches_loop_and_is_monotone(problem: tuple[np.ndarray, np.ndarray]) -> None:
    scores, positives = problem
    c = scores.shape[1]
    ks = tuple(range(1, c + 1))
    got = recall_at_k(scores, positives, ks=ks)
    ranks = np.array(_rank_loop(scores, positives))
    for k in ks:
        assert got[k] == pytest.approx(float((ranks <= k).mean()))
    values = [got[k] for k in ks]
    assert all(a <= b for a, b in itertools.pairwise(values))
    assert got[c] == 1.0


@settings(max_examples=50)
@given(score_problems(), st.floats(0.5, 3), st.floats(-5, 5))
def test_recall_invariant_to_increasing_affine_maps(
    problem: tuple[np.ndarray, np.ndarray], a: float, b: float
) -> None:
    scores, positives = problem
    ks = (1, 2, 3)
    assert recall_at_k(scores, positives, ks) == recall_at_k(a * scores + b, positives, ks)


def test_recall_nan_raises() -> None:
    scores = np.eye(3)
    scores[1, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        recall_at_k(scores, np.arange(3))


@pytest.mark.parametrize(
    ("scores", "positives", "match"),
    [
        (np.eye(3), np.arange(2), "positives"),
        (np.eye(3), np.arange(3).reshape(3, 1), "positives"),
        (np.ones(3), np.arange(3), "scores"),
        (np.ones((2, 2, 2)), np.arange(2), "scores"),
        (np.float64(1.0), np.array([0]), "scores"),
        (np.zeros((0, 3)), np.zeros(0, dtype=int), "scores"),
        (np.zeros((2, 0)), np.zeros(2, dtype=int), "scores"),
        (np.eye(3), np.array([0, 1, 3]), "positives"),
        (np.eye(3), np.array([0, 1, -1]), "positives"),
        (np.eye(3), np.array([0.0, 1.0, 2.0]), "positives"),
    ],
)
def test_recall_bad_inputs(scores: np.ndarray, positives: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        recall_at_k(scores, positives)


@pytest.mark.parametrize("ks", [(0,), (1, -2), (1.5,), (True,)])
def test_recall_bad_ks(ks: tuple[object, ...]) -> None:
    with pytest.raises(ValueError, match="ks"):
        recall_at_k(np.eye(3), np.arange(3), ks=ks)  # type: ignore[arg-type]
