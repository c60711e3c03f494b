"""MLPProbe and the batched ensemble: same init and order give the same model; errors."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from vlprobe.probes.base import ProbeParameterError
from vlprobe.probes.ensemble import (
    ensemble_memory,
    epoch_orders,
    fit_mlp_ensemble,
    init_mlp_params,
    iter_mlp_ensemble,
    mlp_dims,
    models_per_chunk,
)
from vlprobe.probes.mlp import MLPProbe
from vlprobe.validation import InputError

SMALL = {"depth": 3, "width": 12, "lr": 1e-2, "epochs": 15, "batch_size": 16}


def xor_data(n: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4)).astype(np.float32)
    return X, ((X[:, 0] > 0) ^ (X[:, 1] > 0)).astype(int)


def test_learns_a_nonlinear_rule_with_logits_above_zero() -> None:
    X, y = xor_data(300)
    p = MLPProbe(depth=3, width=32, lr=1e-2, epochs=60, batch_size=32, random_state=1).fit(X, y)
    Xt, yt = xor_data(200, seed=1)
    assert p.score(Xt, yt) > 0.9
    np.testing.assert_array_equal(p.predict(Xt), (p.decision_function(Xt) > 0).astype(int))
    proba = p.predict_proba(Xt)
    assert proba.shape == (200, 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert p.loss_curve_[-1] < p.loss_curve_[0] and p.n_iter_ == 60


def test_same_seed_same_model_other_seed_other_model() -> None:
    X, y = xor_data(64)
    a = MLPProbe(**SMALL, random_state=3).fit(X, y)
    b = MLPProbe(**SMALL, random_state=3).fit(X, y)
    c = MLPProbe(**SMALL, random_state=4).fit(X, y)
    np.testing.assert_array_equal(a.coefs_[0], b.coefs_[0])
    assert not np.allclose(a.coefs_[0], c.coefs_[0])


def test_init_and_orders_are_per_seed() -> None:
    p3, p3b, p4 = init_mlp_params(3, [5, 4, 1]), init_mlp_params(3, [5, 4, 1]), init_mlp_params(4, [5, 4, 1])
    assert [w.shape for w, _ in p3] == [(5, 4), (4, 1)]
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(p3, p3b, strict=True))
    assert not np.array_equal(p3[0][0], p4[0][0])
    bound = 1 / np.sqrt(5)
    assert float(p3[0][0].abs().max()) <= bound
    o = epoch_orders(7, 10)
    first, second = next(o), next(o)
    assert sorted(first) == list(range(10)) and not np.array_equal(first, second)


def test_ensemble_matches_training_each_model_alone() -> None:
    """3 seeds x 2 feature groups x 2 label sets, batched, against 12 separate MLPProbe fits."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2, 50, 4)).astype(np.float32)  # 2 groups ("layers"), 50 rows (not a multiple of 16)
    rule = (X[..., 0] > 0).astype(int)  # (2, 50)
    runs = [(g, task, s) for g in range(2) for task in (0, 1) for s in (5, 6, 7)]
    y = np.stack([rule[g] if task == 0 else 1 - rule[g] * (np.arange(50) % 2) for g, task, _ in runs])
    ens = fit_mlp_ensemble(X, y, [s for *_, s in runs], groups=[g for g, *_ in runs], **SMALL)
    logits = ens.decision_function(X)
    for m, (g, _, s) in enumerate(runs):
        alone = MLPProbe(**SMALL, random_state=s).fit(X[g], y[m])
        np.testing.assert_allclose(logits[m], alone.decision_function(X[g]), atol=2e-4)
        # Predictions of two paths (stacked weights vs one model) agree where the logit is clear of
        # the threshold by more than the logits' tolerance; a logit within it may round either way.
        clear = np.abs(logits[m]) > 1e-3
        assert clear.mean() > 0.5
        np.testing.assert_array_equal(ens.predict(X)[m][clear], alone.predict(X[g])[clear])
        np.testing.assert_allclose(ens.loss_curves[m], alone.loss_curve_, rtol=1e-4, atol=1e-6)
        np.testing.assert_array_equal(MLPProbe.from_ensemble(ens, m).predict(X[g])[clear], ens.predict(X)[m][clear])


def test_ensemble_result_does_not_depend_on_chunking() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(2, 40, 3)).astype(np.float32)
    y = np.stack([(X[g, :, 0] > 0).astype(int) for g in (0, 0, 1, 1, 1)])
    kw = dict(groups=[0, 0, 1, 1, 1], **SMALL)
    seeds = [0, 1, 2, 3, 4]
    whole = fit_mlp_ensemble(X, y, seeds, **kw)
    dims = mlp_dims(3, SMALL["depth"], SMALL["width"])
    budget = ensemble_memory(2, dims, SMALL["batch_size"])  # room for two models at a time
    assert models_per_chunk(dims, SMALL["batch_size"], "cpu", budget) == 2
    ticks: list[int] = []
    chunks = list(iter_mlp_ensemble(X, y, seeds, memory_budget=budget, progress=ticks.append, **kw))
    assert [(sl.start, sl.stop) for sl, _ in chunks] == [(0, 2), (2, 4), (4, 5)]
    assert sum(ticks) == len(seeds) * SMALL["epochs"]  # one tick per chunk and epoch, model-epochs in all
    # Each model trains alone whatever shares its chunk; only the batched products' rounding differs.
    for sl, ens in chunks:
        np.testing.assert_array_equal(ens.seeds, seeds[sl])
        np.testing.assert_allclose(ens.decision_function(X), whole.decision_function(X)[sl], atol=1e-5)
        np.testing.assert_allclose(ens.loss_curves, whole.loss_curves[sl], rtol=1e-5, atol=1e-7)
    one = fit_mlp_ensemble(X, y, seeds, memory_budget=1, **kw)  # below one model: one at a time
    np.testing.assert_allclose(one.decision_function(X), whole.decision_function(X), atol=1e-5)
    with pytest.raises(ValueError, match="memory_budget must be a positive integer"):
        fit_mlp_ensemble(X, y, seeds, memory_budget=0, **kw)


def test_memory_estimate_counts_parameters_adam_state_and_activations() -> None:
    dims = [96, 1024, 1024, 1]  # the variant probe's MLP on 32-d states
    n_params = 96 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 + 1
    assert ensemble_memory(1, dims, 128) == 4 * (4 * n_params + 4 * 128 * sum(dims))
    assert ensemble_memory(3, dims, 128) == 3 * ensemble_memory(1, dims, 128)
    assert models_per_chunk(dims, 128, "cpu", 10 * ensemble_memory(1, dims, 128)) == 10


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"seeds": []}, "seeds must be"),
        ({"seeds": [-1, 0]}, "seeds must be"),
        ({"groups": [0, 5]}, "groups must be"),
        ({"y": np.full((2, 10), 2)}, "0/1 labels"),
        ({"y": np.zeros((3, 10))}, "y must have shape"),
        ({"X": np.zeros((10, 3))}, "shape (groups, samples, features)"),
        ({"X": np.full((1, 10, 3), np.nan)}, "NaN"),
        ({"epochs": 0}, "epochs must be"),
        ({"depth": 0}, "depth must be"),
        ({"lr": -1.0}, "lr must be"),
        ({"device": "tpu"}, "device must be"),
    ],
)
def test_ensemble_bad_input(kwargs: dict, needle: str) -> None:
    args = {"X": np.zeros((1, 10, 3)), "y": np.zeros((2, 10), int), "seeds": [0, 1], "groups": [0, 0]}
    args.update(kwargs)
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        fit_mlp_ensemble(args.pop("X"), args.pop("y"), args.pop("seeds"), **args)


def test_probe_bad_hyperparameters() -> None:
    X, y = xor_data(20)
    with pytest.raises(ProbeParameterError, match=r"The 'width' parameter of MLPProbe must be an int in the range \[1, inf\)\. Got 0"):
        MLPProbe(width=0).fit(X, y)
    with pytest.raises(InputError, match="'random_state' parameter of MLPProbe must be"):
        MLPProbe(random_state=-3, **{k: v for k, v in SMALL.items()}).fit(X, y)
    with pytest.raises(InvalidParameterError, match=r"'lr' parameter of MLPProbe must be a float in the range \(0\.0, inf\)"):
        MLPProbe(lr=float("nan")).fit(X, y)
    with pytest.raises(ValueError, match="Only binary classification"):
        MLPProbe(**SMALL).fit(X, np.arange(20) % 3)


def test_planted_rule_versus_item_level_control() -> None:
    """Four examples per item; the control flips every label of half the items on each side."""
    from vlprobe.probes.splits import control_flips, flip_labels, stratified_item_split

    rng = np.random.default_rng(2)
    n_items = 120
    X = rng.normal(size=(n_items * 4, 6)).astype(np.float32)
    y = ((X[:, 0] > 0) ^ (X[:, 1] > 0)).astype(int)
    items = np.repeat(np.arange(n_items), 4)
    split = stratified_item_split(["x"] * n_items, seed=0)
    train, test = np.isin(items, split.train), np.isin(items, split.test)
    y_control = flip_labels(y, items, control_flips(split, seed=0))
    hp = {"depth": 3, "width": 32, "lr": 1e-2, "epochs": 60, "batch_size": 32, "random_state": 0}
    target = MLPProbe(**hp).fit(X[train], y[train]).score(X[test], y[test])
    control = MLPProbe(**hp).fit(X[train], y_control[train]).score(X[test], y_control[test])
    assert target > 0.85
    assert 0.3 <= control <= 0.7
