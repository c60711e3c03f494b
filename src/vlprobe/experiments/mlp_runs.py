"""Target and control MLP probes over seeds and feature groups, trained as one batched model.

Shared by the task-adaptation (§3.2) and variant-probe (§5.3) experiments: given G feature groups
(layers, modes) of the same examples, an item-level split and seeds, it trains for every group and
seed one probe on the target labels and one on the control labels (the labels of ``n // 2``
items of each split side flipped, drawn per seed by :func:`~vlprobe.probes.splits.control_flips`)
with :func:`~vlprobe.probes.mlp.fit_mlp_ensemble`, and scores each on train and test.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vlprobe.probes.mlp import fit_mlp_ensemble, mlp_dims
from vlprobe.probes.splits import ItemSplit, control_flips, flip_labels

__all__ = ["MLPSettings", "ProbeScore", "train_target_control"]


@dataclass(frozen=True)
class MLPSettings:
    """Hyperparameters of the MLP probes (see :class:`~vlprobe.probes.MLPProbe`)."""

    depth: int
    width: int
    lr: float
    epochs: int
    batch_size: int
    device: str = "cpu"

    def check(self) -> None:
        mlp_dims(1, self.depth, self.width)
        if not isinstance(self.epochs, int) or isinstance(self.epochs, bool) or self.epochs < 1:
            raise ValueError(f"epochs must be a positive integer, got {self.epochs!r}")
        if not isinstance(self.batch_size, int) or isinstance(self.batch_size, bool) or self.batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {self.batch_size!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")


@dataclass(frozen=True)
class ProbeScore:
    """Accuracy (%) of one trained probe on one split side."""

    group: int
    task: str
    seed: int
    split: str
    accuracy: float
    n: int


def train_target_control(
    X: np.ndarray,
    labels: np.ndarray,
    example_items: np.ndarray,
    split: ItemSplit,
    seeds: Sequence[int],
    settings: MLPSettings,
) -> tuple[list[ProbeScore], dict[int, list[int]]]:
    """Train and score target and control probes for every group and seed.

    Parameters
    ----------
    X : ndarray, shape (G, N, D)
        Features of the N examples under each of G groups.
    labels : ndarray of {0, 1}, shape (G, N)
        Target labels per group.
    example_items : ndarray of int, shape (N,)
        Item (index into the split's item numbering) of each example.
    split : ItemSplit
    seeds : sequence of int
    settings : MLPSettings

    Returns
    -------
    scores : list of ProbeScore
    flips : dict
        Seed -> the items its control flipped.
    """
    settings.check()
    G = X.shape[0]
    train = np.flatnonzero(np.isin(example_items, split.train))
    test = np.flatnonzero(np.isin(example_items, split.test))
    flips = {int(s): control_flips(split, int(s)) for s in seeds}
    runs = [(g, task, int(s)) for g in range(G) for task in ("target", "control") for s in seeds]
    y = np.stack([
        labels[g] if task == "target" else flip_labels(labels[g], example_items, flips[s]) for g, task, s in runs
    ])
    ens = fit_mlp_ensemble(
        X[:, train], y[:, train], [s for _, _, s in runs], groups=[g for g, _, _ in runs],
        depth=settings.depth, width=settings.width, lr=settings.lr, epochs=settings.epochs,
        batch_size=settings.batch_size, device=settings.device,
    )
    scores = []
    for side, idx in (("train", train), ("test", test)):
        if not len(idx):
            continue
        hit = ens.predict(X[:, idx]) == y[:, idx]
        for m, (g, task, s) in enumerate(runs):
            scores.append(ProbeScore(g, task, s, side, float(100 * hit[m].mean()), len(idx)))
    return scores, {s: f.tolist() for s, f in flips.items()}


def score_rows(scores: Sequence[ProbeScore], group_fields: Sequence[dict[str, Any]], base: dict[str, Any]) -> list[dict[str, Any]]:
    """Tidy rows (metric ``accuracy``) of :func:`train_target_control` scores."""
    return [
        {**base, **group_fields[sc.group], "task": sc.task, "seed": sc.seed, "split": sc.split,
         "metric": "accuracy", "value": sc.accuracy, "n": sc.n}
        for sc in scores
    ]


def item_split(
    index: Any, items: Sequence[int], test_size: int | float, seed: int, stratify: Sequence[str] | None
) -> tuple[ItemSplit, list[str]]:
    """Stratified split of ``items`` (positions 0..len(items)-1) and the tag families used.

    Parameters
    ----------
    index : CacheIndex
    items : sequence of int
        Item rows taking part (the split numbers them by position).
    """
    from vlprobe.experiments.cache_features import stratum_keys
    from vlprobe.probes.splits import stratified_item_split

    keys, families = stratum_keys(index, items, stratify)
    return stratified_item_split(keys, test_size=test_size, seed=seed), families
