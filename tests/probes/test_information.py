"""Online code length and conditional V-information on planted data with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from vlprobe.probes.information import (
    block_boundaries,
    conditional_information,
    example_bits,
    logistic_probe,
    online_code_length,
)
from vlprobe.validation import InputError


def _planted(n_items: int = 200, per_item: int = 4, dim: int = 8, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    units = np.repeat(np.arange(n_items), per_item)
    y = rng.integers(0, 2, len(units))
    X = rng.normal(size=(len(units), dim))
    X[:, 0] += 3.0 * (2 * y - 1)  # the label, linearly readable from feature 0
    return X, y, units


def test_block_boundaries_follow_voita_and_titov_and_merge_when_small() -> None:
    assert block_boundaries(400).tolist() == [0, 1, 2, 4, 7, 13, 25, 50, 100, 200, 400]
    assert block_boundaries(10000).tolist() == [0, 10, 20, 40, 80, 160, 320, 625, 1250, 2500, 5000, 10000]
    assert block_boundaries(3).tolist() == [0, 1, 2, 3]
    with pytest.raises(InputError, match="at least 2 units"):
        block_boundaries(1)
    with pytest.raises(InputError, match="end at 1"):
        block_boundaries(10, (0.5,))


def test_online_code_compresses_a_readable_label_and_not_a_random_one() -> None:
    X, y, units = _planted()
    code = online_code_length(X, y, units, seed=0)
    assert code.uniform_bits == pytest.approx(len(y))  # 1 bit per binary label
    assert code.online_bits == pytest.approx(code.block_bits.sum())
    assert code.block_bits[0] == pytest.approx(4.0)  # the first item's 4 labels, uniform code
    assert code.compression > 5.0  # planted: the label is feature 0's sign, margin 3 sd
    noise = np.random.default_rng(1).integers(0, 2, len(y))
    null = online_code_length(X, noise, units, seed=0)
    # nothing to learn: the code cannot beat the uniform one by much (and overfitting costs bits)
    assert null.compression < 1.05
    # seeded: the same seed gives the same code; another seed another order
    assert online_code_length(X, y, units, seed=0).online_bits == pytest.approx(code.online_bits, rel=1e-9)


def test_online_code_never_splits_a_unit_between_training_and_coding() -> None:
    seen: list[tuple[set[int], set[int]]] = []

    class Spy:
        def __init__(self) -> None:
            self.inner = logistic_probe()(0)

        def fit(self, X: np.ndarray, y: np.ndarray) -> Spy:
            self.train_units = set(X[:, -1].astype(int).tolist())
            self.inner.fit(X[:, :-1], y)
            self.classes_ = self.inner.classes_
            return self

        def predict_proba(self, X: np.ndarray) -> np.ndarray:
            seen.append((self.train_units, set(X[:, -1].astype(int).tolist())))
            return self.inner.predict_proba(X[:, :-1])

    X, y, units = _planted(n_items=50)
    online_code_length(np.column_stack([X, units]), y, units, seed=3, make_probe=lambda s: Spy())
    assert seen and all(not (a & b) for a, b in seen)
    assert all(len(b) > 0 for _, b in seen)


def test_single_class_training_block_uses_smoothed_frequencies() -> None:
    bits = example_bits(logistic_probe(), np.zeros((3, 2)), np.array([1, 1, 1]), np.zeros((2, 2)), np.array([1, 0]), 2, 0)
    np.testing.assert_allclose(bits, -np.log2([4 / 5, 1 / 5]))


def test_conditional_information_measures_what_the_layer_adds_over_the_baseline() -> None:
    rng = np.random.default_rng(0)
    n = 800
    a, b = rng.integers(0, 2, n), rng.integers(0, 2, n)
    y = a ^ b  # needs both bits
    B = np.column_stack([2 * a - 1 + 0.1 * rng.normal(size=n), rng.normal(size=n)])
    L_new = np.column_stack([(2 * a - 1) * (2 * b - 1) + 0.1 * rng.normal(size=n)])  # y's sign, beyond B
    train = np.arange(n) < 600
    out = conditional_information(B, L_new, y, train)
    gain = float((out["baseline"] - out["joint"]).mean())
    assert out["baseline"].mean() > 0.9  # the baseline alone knows nothing of the XOR
    assert gain > 0.8  # the layer adds nearly the whole bit
    assert out["joint_correct"].mean() > 0.95
    # a layer that only repeats the baseline adds nothing
    same = conditional_information(B, B.copy(), y, train)
    assert abs(float((same["baseline"] - same["joint"]).mean())) < 0.05
    with pytest.raises(InputError, match="training and test"):
        conditional_information(B, B, y, np.ones(n, bool))
