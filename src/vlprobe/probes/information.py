"""Information-theoretic probing: online (prequential) code length and conditional V-information.

Both measure a label's information in a representation by how well a probe family predicts it,
in bits of cross-entropy, instead of by a probe's accuracy:

* :func:`online_code_length` (Voita & Titov 2020, "Information-Theoretic Probing with Minimum
  Description Length"): the examples are sent block by block; the first block with the uniform
  code (``log2 K`` bits per label), every later block with a probe trained on all the blocks
  before it. Easy-to-extract information gives a short code; a representation that only lets a
  probe memorise gives a code near the uniform one. ``compression = uniform / online``.
* :func:`conditional_information` (Hewitt, Ethayarajh, Liang & Manning 2021, "Conditional
  probing: measuring usable information beyond a baseline"): ``I_V(L -> Y | B) = H_V(Y | B) -
  H_V(Y | B ⊕ L)``, the cross-entropy a probe on the baseline ``B`` loses when the layer ``L`` is
  concatenated to it, on held-out examples.

The probe family is a small MLP on standardised features (:func:`mlp_probe`; the variant task's
label, "which option shares the reference's caption", is an XOR of the options' sides, which no
linear probe on the concatenated states can read) or logistic regression (:func:`logistic_probe`);
examples are grouped by *unit* (an item: its examples are never split between what a probe is
trained on and what it codes). Every random step is seeded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vlprobe.validation import InputError

__all__ = [
    "PROBE_FAMILIES",
    "VOITA_FRACTIONS",
    "OnlineCode",
    "block_boundaries",
    "conditional_information",
    "example_bits",
    "logistic_probe",
    "make_probe_factory",
    "mlp_probe",
    "online_code_length",
    "probe_record",
]

#: Block ends as fractions of the data (Voita & Titov 2020: 0.1%, 0.2%, ..., 50%, 100%).
VOITA_FRACTIONS = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.0625, 0.125, 0.25, 0.5, 1.0)
#: Smallest probability a probe may give the true label: a probe's 0 would make the code infinite.
MIN_PROBABILITY = 1e-12

ProbeFactory = Callable[[int], Any]


def logistic_probe(C: float = 1.0, max_iter: int = 1000) -> ProbeFactory:
    """A factory ``seed -> estimator``: standardised features, then L2 logistic regression (lbfgs).

    The estimator is scikit-learn's; ``predict_proba`` gives the code's probabilities.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    def make(seed: int) -> Any:
        return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=max_iter, random_state=seed))

    return make


def mlp_probe(depth: int = 2, width: int = 128, lr: float = 1e-3, epochs: int = 50, batch_size: int = 64,
              device: str = "cpu") -> ProbeFactory:
    """A factory ``seed -> estimator``: standardised features, then :class:`~vlprobe.probes.MLPProbe`
    seeded with ``seed`` (weights and example order)."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from vlprobe.probes.mlp import MLPProbe

    def make(seed: int) -> Any:
        return make_pipeline(StandardScaler(), MLPProbe(depth=depth, width=width, lr=lr, epochs=epochs,
                                                         batch_size=batch_size, random_state=seed, device=device))

    return make


#: Probe families of the information-theoretic experiments.
PROBE_FAMILIES = ("mlp", "logistic")


def make_probe_factory(probe: str, config: Any) -> ProbeFactory:
    """The factory of ``probe`` (one of :data:`PROBE_FAMILIES`) with a config's ``C`` or MLP fields."""
    from vlprobe.validation import check_choice

    check_choice(probe, "probe", PROBE_FAMILIES)
    if probe == "logistic":
        return logistic_probe(C=config.C)
    return mlp_probe(depth=config.depth, width=config.width, lr=config.lr, epochs=config.epochs,
                     batch_size=config.batch_size, device=config.device)


def probe_record(config: Any) -> dict[str, Any]:
    """What a manifest records of the probe family of a config (its ``probe`` and settings)."""
    if config.probe == "logistic":
        return {"name": "logistic", "C": config.C, "features": "standardised on the training examples",
                "solver": "scikit-learn LogisticRegression(lbfgs)"}
    from vlprobe.devices import resolve_device

    return {"name": "mlp", "depth": config.depth, "width": config.width, "lr": config.lr, "epochs": config.epochs,
            "batch_size": config.batch_size, "device": str(resolve_device(config.device)),
            "features": "standardised on the training examples",
            "model": "vlprobe MLPProbe (ReLU, BCE on logits, Adam), seeded per fit"}


def example_bits(
    make_probe: ProbeFactory, X_train: np.ndarray, y_train: np.ndarray, X_test: np.ndarray, y_test: np.ndarray,
    n_classes: int, seed: int,
) -> np.ndarray:
    """``-log2 p(y | x)`` of every test example under a probe trained on the training examples.

    With a single class (or none) among the training labels no probe can be fitted: the code is
    then the Laplace-smoothed class frequencies of the training labels.

    Parameters
    ----------
    X_train : ndarray, shape (n, H)
    y_train : ndarray, shape (n,)
        Labels in ``0 .. n_classes - 1``.
    X_test : ndarray, shape (m, H)
    y_test : ndarray, shape (m,)

    Returns
    -------
    ndarray, shape (m,)
        Bits per test example.
    """
    counts = np.bincount(y_train, minlength=n_classes)
    if (counts > 0).sum() < 2:
        p = (counts + 1.0) / (counts.sum() + n_classes)
        return -np.log2(p[y_test])
    probe = make_probe(seed).fit(X_train, y_train)
    proba = np.zeros((len(y_test), n_classes))
    proba[:, np.asarray(probe.classes_, dtype=np.int64)] = probe.predict_proba(X_test)
    return -np.log2(np.maximum(proba[np.arange(len(y_test)), y_test], MIN_PROBABILITY))


def block_boundaries(n_units: int, fractions: Sequence[float] = VOITA_FRACTIONS) -> np.ndarray:
    """Block ends in units: ``ceil(f * n_units)`` per fraction, at least 1, strictly increasing.

    With few units the smallest fractions round to the same end and merge (400 Winoground items:
    1, 2, 4, 7, 13, 25, 50, 100, 200, 400).

    Returns
    -------
    ndarray, shape (n_blocks + 1,)
        ``0`` then the end of every block; the last is ``n_units``.
    """
    if n_units < 2:
        raise InputError(f"the online code needs at least 2 units (items), got {n_units}")
    fr = sorted(float(f) for f in fractions)
    if not fr or fr[0] <= 0 or fr[-1] != 1.0:
        raise InputError(f"block fractions must be in (0, 1] and end at 1, got {list(fractions)!r}")
    ends = sorted({max(1, int(np.ceil(f * n_units))) for f in fr})
    return np.asarray([0, *ends], dtype=np.int64)


@dataclass(frozen=True)
class OnlineCode:
    """The online code of one label sequence.

    Attributes
    ----------
    online_bits, uniform_bits : float
        Total code lengths in bits.
    compression : float
        ``uniform_bits / online_bits``.
    block_bits : ndarray, shape (n_blocks,)
        Bits of each block (the first under the uniform code).
    boundaries : ndarray, shape (n_blocks + 1,)
        Block ends in units (:func:`block_boundaries`).
    n_examples : int
    """

    online_bits: float
    uniform_bits: float
    compression: float
    block_bits: np.ndarray
    boundaries: np.ndarray
    n_examples: int


def online_code_length(
    X: np.ndarray, y: np.ndarray, units: np.ndarray, *, n_classes: int | None = None, seed: int = 0,
    fractions: Sequence[float] = VOITA_FRACTIONS, make_probe: ProbeFactory | None = None,
) -> OnlineCode:
    """Prequential code length of ``y`` given ``X`` (Voita & Titov 2020).

    The units (items) are put in the order ``default_rng(seed).permutation``; block ``b`` holds the
    examples of the units between ``boundaries[b]`` and ``boundaries[b + 1]``. The first block is
    sent with the uniform code; block ``b > 0`` with a probe (``make_probe(seed)``) trained on
    blocks ``0 .. b-1``.

    Parameters
    ----------
    X : ndarray, shape (n, H)
    y : ndarray, shape (n,)
        Integer labels in ``0 .. n_classes - 1``.
    units : ndarray, shape (n,)
        The unit (item) of each example.
    n_classes : int, optional
        Default ``y.max() + 1`` (at least 2).
    seed : int
    fractions : sequence of float
        Block ends as fractions of the units (:func:`block_boundaries`).
    make_probe : callable, optional
        ``seed -> estimator`` with ``fit``, ``predict_proba`` and ``classes_``; default
        :func:`logistic_probe`.
    """
    X, y, units = np.asarray(X), np.asarray(y, dtype=np.int64), np.asarray(units)
    if not (len(X) == len(y) == len(units)):
        raise InputError(f"X, y and units must have one row per example, got {len(X)}, {len(y)}, {len(units)}")
    K = max(2, int(y.max()) + 1) if n_classes is None else int(n_classes)
    if len(y) and (y.min() < 0 or y.max() >= K):
        raise InputError(f"y: labels must lie in 0..{K - 1}, got {int(y.min())}..{int(y.max())}")
    make = make_probe or logistic_probe()
    unique = np.unique(units)
    order = unique[np.random.default_rng(seed).permutation(len(unique))]
    rank = np.empty(len(unique), dtype=np.int64)
    rank[np.searchsorted(unique, order)] = np.arange(len(unique))
    pos = rank[np.searchsorted(unique, units)]  # each example's unit position in the sending order
    bounds = block_boundaries(len(unique), fractions)
    block_bits = np.empty(len(bounds) - 1)
    for b in range(len(bounds) - 1):
        sent = (pos >= bounds[b]) & (pos < bounds[b + 1])
        if b == 0:
            block_bits[b] = float(sent.sum()) * np.log2(K)
            continue
        known = pos < bounds[b]
        block_bits[b] = float(example_bits(make, X[known], y[known], X[sent], y[sent], K, seed).sum())
    online = float(block_bits.sum())
    uniform = float(len(y) * np.log2(K))
    return OnlineCode(online, uniform, uniform / online if online > 0 else float("inf"), block_bits, bounds, len(y))


def conditional_information(
    B: np.ndarray, L: np.ndarray, y: np.ndarray, train: np.ndarray, *, n_classes: int | None = None,
    seed: int = 0, make_probe: ProbeFactory | None = None,
) -> dict[str, np.ndarray]:
    """Held-out cross-entropies for conditional probing (Hewitt et al. 2021).

    Parameters
    ----------
    B : ndarray, shape (n, Hb)
        Baseline features of every example.
    L : ndarray, shape (n, Hl)
        Layer features of every example.
    y : ndarray, shape (n,)
        Integer labels.
    train : ndarray of bool, shape (n,)
        Examples the probes are trained on; the others are tested.
    n_classes : int, optional
    seed : int
        The probes' random state.
    make_probe : callable, optional
        Default :func:`logistic_probe`.

    Returns
    -------
    dict of ndarray, each shape (n_test,)
        Bits per test example: ``prior`` (the training labels' smoothed frequencies, no features),
        ``baseline`` (a probe on ``B``), ``layer`` (on ``L``) and ``joint`` (on ``B ⊕ L``); and
        ``*_correct`` (0/1) for the three probes' argmax predictions. ``I_V(L -> Y | B)`` is the mean
        of ``baseline - joint``.
    """
    y = np.asarray(y, dtype=np.int64)
    train = np.asarray(train, dtype=bool)
    test = ~train
    if not train.any() or not test.any():
        raise InputError("conditional probing needs both training and test examples")
    K = max(2, int(y.max()) + 1) if n_classes is None else int(n_classes)
    make = make_probe or logistic_probe()
    counts = np.bincount(y[train], minlength=K)
    prior = (counts + 1.0) / (counts.sum() + K)
    out: dict[str, np.ndarray] = {"prior": -np.log2(prior[y[test]])}
    for name, feats in (("baseline", B), ("layer", L), ("joint", np.concatenate([B, L], axis=1))):
        bits = example_bits(make, feats[train], y[train], feats[test], y[test], K, seed)
        out[name] = bits
        # argmax of a probability is right when the true label has p > 1/2 (two classes)
        out[f"{name}_correct"] = (bits < 1.0).astype(np.float64) if K == 2 else np.full(len(bits), np.nan)
    return out
