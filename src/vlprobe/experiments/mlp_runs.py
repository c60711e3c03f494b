"""Target and control MLP probes over seeds and feature groups, trained as one batched model.

Shared by the task-adaptation (§3.2) and variant-probe (§5.3) experiments, whose configs carry
the MLP settings (:class:`~vlprobe.runs.option_groups.MLPOptions`) and the item split
(:class:`~vlprobe.runs.option_groups.SplitOptions`). :func:`plan_items` splits the usable
items; :func:`train_probes` trains and returns what the run writes. Given G feature
groups (layers, modes) of the same examples, an item-level split and seeds, it trains for every
group and seed one probe on the target labels and one on the control labels (the labels of
``n // 2`` items of each split side flipped, drawn per seed by
:func:`~vlprobe.probes.splits.control_flips`) with :func:`~vlprobe.probes.ensemble.fit_mlp_ensemble`,
and scores each on train and test: overall, and per item (accuracy over the item's examples).
From the per-item accuracies, per group and side: 95% item-bootstrap intervals of the target and
of the control (each averaged over seeds per item; the min–max over seeds stays in the per-seed
rows), the selectivity (target minus control, ``task`` selectivity) with its paired interval,
and ``accuracy.p_value`` of the paired sign-flip permutation test; the per-item rows go to
``<run>.items.csv``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vlprobe.devices import device_name, resolve_device
from vlprobe.experiments.cache_features import stratum_keys
from vlprobe.probes.ensemble import (
    ensemble_memory,
    iter_mlp_ensemble,
    mlp_dims,
    models_per_chunk,
)
from vlprobe.probes.splits import ItemSplit, control_flips, flip_labels, stratified_item_split
from vlprobe.progress import format_bytes, progress_bar, say
from vlprobe.provenance import sha256_file
from vlprobe.runs.declare import Experiment
from vlprobe.runs.option_groups import MLPOptions, MLPProbeRunOptions
from vlprobe.runs.units import units_of
from vlprobe.runs.writing import RunRows, RunSlot, result_stem
from vlprobe.stats.metrics import bootstrap_indices
from vlprobe.stats.uncertainty import PERMUTATION_TEST, target_control_rows
from vlprobe.validation import InputError, check_file

__all__ = [
    "FeatureBlock",
    "ItemPlan",
    "ProbeScore",
    "item_split",
    "plan_items",
    "read_split_file",
    "score_rows",
    "split_file_input",
    "split_record",
    "train_probes",
    "train_target_control",
    "uncertainty_rows",
]


@dataclass(frozen=True)
class ProbeScore:
    """Accuracy (%) of one trained probe on one split side, overall and per item.

    ``items`` are the item numbers of the side (ascending), ``item_accuracy`` the accuracy (%)
    over each item's examples.
    """

    group: int
    task: str
    seed: int
    split: str
    accuracy: float
    n: int
    items: np.ndarray = field(default_factory=lambda: np.zeros(0, int), repr=False, compare=False)
    item_accuracy: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False, compare=False)


def train_target_control(
    X: np.ndarray,
    labels: np.ndarray,
    example_items: np.ndarray,
    split: ItemSplit,
    seeds: Sequence[int],
    settings: MLPOptions,
    *,
    progress: bool = False,
    desc: str = "mlp",
    memory_budget: int | None = None,
) -> tuple[list[ProbeScore], dict[int, list[int]]]:
    """Train and score target and control probes for every group and seed.

    The probes train in memory-bounded chunks (:func:`~vlprobe.probes.ensemble.iter_mlp_ensemble`);
    each chunk is scored and dropped, so only one chunk's weights are held at a time.

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
    settings : MLPOptions
        The MLP hyperparameters (an experiment config that carries them).
    progress : bool
        Say on stderr what will be trained (probes, chunks, memory) and show a bar with an ETA.
    desc : str
        Name on the progress line (the experiment).
    memory_budget : int, optional
        Bytes of training memory per chunk (default: :func:`~vlprobe.probes.ensemble.models_per_chunk`'s).

    Returns
    -------
    scores : list of ProbeScore
    flips : dict
        Seed -> the items its control flipped.
    """
    G = X.shape[0]
    train = np.flatnonzero(np.isin(example_items, split.train))
    test = np.flatnonzero(np.isin(example_items, split.test))
    flips = {int(s): control_flips(split, int(s)) for s in seeds}
    runs = [(g, task, int(s)) for g in range(G) for task in ("target", "control") for s in seeds]
    y = np.stack([
        labels[g] if task == "target" else flip_labels(labels[g], example_items, flips[s]) for g, task, s in runs
    ])
    sides = [(side, idx) for side, idx in (("train", train), ("test", test)) if len(idx)]
    hits = {side: np.empty((len(runs), len(idx)), dtype=bool) for side, idx in sides}
    dims = mlp_dims(X.shape[2], settings.depth, settings.width)
    rows = min(settings.batch_size, len(train))
    device = resolve_device(settings.device)
    chunk = min(models_per_chunk(dims, rows, device, memory_budget), len(runs))
    if progress:  # how long, before the first probe trains (and for a long run, what is cheaper)
        from vlprobe.experiments.mlp_estimate import estimate_lines

        for line in estimate_lines(desc, G, len(seeds), X.shape[2], len(train), settings, device, memory_budget):
            say(progress, line)
    say(progress, f"{desc}: training {len(runs)} MLP probes ({G} feature group(s) x target/control x {len(seeds)} "
                  f"seed(s)) on {len(train)} rows x {X.shape[2]} features: depth {settings.depth}, width "
                  f"{settings.width}, {settings.epochs} epochs, batch {settings.batch_size}; {chunk} at a time "
                  f"on {device}, about {format_bytes(ensemble_memory(chunk, dims, rows) + X.nbytes)} "
                  "for training")
    with progress_bar(progress, len(runs) * settings.epochs, f"{desc} training", "model-epoch") as bar:
        for sl, ens in iter_mlp_ensemble(
            X[:, train], y[:, train], [s for _, _, s in runs], groups=[g for g, _, _ in runs],
            depth=settings.depth, width=settings.width, lr=settings.lr, epochs=settings.epochs,
            batch_size=settings.batch_size, device=settings.device, memory_budget=memory_budget,
            progress=bar.update,
        ):
            for side, idx in sides:
                hits[side][sl] = ens.predict(X[:, idx]) == y[sl][:, idx]
    scores = []
    for side, idx in sides:
        items, inverse = np.unique(example_items[idx], return_inverse=True)
        per_item = np.bincount(inverse, minlength=len(items))
        for m, (g, task, s) in enumerate(runs):
            item_acc = 100.0 * np.bincount(inverse, weights=hits[side][m], minlength=len(items)) / per_item
            scores.append(ProbeScore(g, task, s, side, float(100 * hits[side][m].mean()), hits[side].shape[1],
                                     items, item_acc))
    return scores, {s: f.tolist() for s, f in flips.items()}


def uncertainty_rows(
    scores: Sequence[ProbeScore], group_fields: Sequence[dict[str, Any]], base: dict[str, Any],
    item_ids: Sequence[str], bootstrap: int, bootstrap_seed: int, permutations: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], set[str]]:
    """Item-bootstrap intervals, selectivity and the permutation test of the accuracy, per group and side.

    The target's and the control's per-item accuracies are first averaged over seeds; the items
    of a side are resampled alike for every group (paired). Also the per-item rows
    (``subset`` = item id, after the group's subset and ``:`` where the group has one, e.g.
    ``text-score:winoground/3``) and the permutation test's methods.

    Parameters
    ----------
    item_ids : sequence of str
        The id of each item number of the scores.
    """
    rows: list[dict[str, Any]] = []
    item_rows: list[dict[str, Any]] = []
    methods: set[str] = set()
    sides = list(dict.fromkeys(sc.split for sc in scores))
    for side in sides:
        mine = [sc for sc in scores if sc.split == side]
        if not mine:
            continue
        items = mine[0].items
        idx = bootstrap_indices(len(items), bootstrap, bootstrap_seed)
        for g in sorted({sc.group for sc in mine}):
            by_task = {t: np.stack([sc.item_accuracy for sc in mine if sc.group == g and sc.task == t])
                       for t in ("target", "control")}
            row = {**base, **group_fields[g], "split": side}
            row.setdefault("subset", "all")
            out, method = target_control_rows(row, "accuracy", by_task["target"], by_task["control"], idx, bootstrap_seed,
                                              n_permutations=permutations, permutation_seed=bootstrap_seed)
            rows += out
            if method:
                methods.add(method)
            # A group's own subset (task-adaptation's mode) prefixes the item: "text-score:winoground/3".
            prefix = "" if row["subset"] in ("", "all") else f"{row['subset']}:"
            for sc in mine:
                if sc.group != g:
                    continue
                item_rows += [{**base, **group_fields[g], "task": sc.task, "seed": sc.seed, "split": side,
                               "subset": prefix + item_ids[i], "metric": "accuracy", "value": float(v), "n": 1}
                              for i, v in zip(sc.items, sc.item_accuracy, strict=True)]
    return rows, item_rows, methods


def score_rows(scores: Sequence[ProbeScore], group_fields: Sequence[dict[str, Any]], base: dict[str, Any]) -> list[dict[str, Any]]:
    """Tidy rows (metric ``accuracy``) of :func:`train_target_control` scores."""
    return [
        {**base, **group_fields[sc.group], "task": sc.task, "seed": sc.seed, "split": sc.split,
         "metric": "accuracy", "value": sc.accuracy, "n": sc.n}
        for sc in scores
    ]


def split_record(
    item_ids: Sequence[str], items: Sequence[int], split: ItemSplit, families: Sequence[str],
    split_file: str | os.PathLike[str] | None, flips: dict[int, list[int]],
) -> dict[str, Any]:
    """The manifest's ``split`` and ``control_flipped_items`` entries, in item ids.

    Parameters
    ----------
    item_ids : sequence of str
        Ids of the cache's items.
    items : sequence of int
        Item rows, numbered as the split numbers them (from :func:`item_split`).
    flips : dict
        Seed -> flipped items (from :func:`train_target_control`).
    """
    return {
        "split": {"train": [item_ids[items[i]] for i in split.train],
                  "test": [item_ids[items[i]] for i in split.test],
                  "seed": split.seed, "stratified_on": list(families), "strata": split.strata,
                  "source": str(split_file) if split_file else "seeded stratified split"},
        "control_flipped_items": {str(s): [item_ids[items[i]] for i in f] for s, f in flips.items()},
    }


def read_split_file(path: str | os.PathLike[str], item_ids: Sequence[str]) -> tuple[list[int], list[int]]:
    """Item rows of a split file: JSON ``{"train": [...], "test": [...]}``.

    Entries are item ids (``winoground/17``) or Winoground ids (``17``), e.g. the paper's own
    300/100 lists. Returns the (train, test) item rows.
    """
    p = check_file(path, "split_file")
    try:
        obj = json.loads(p.read_text(encoding="utf-8"))
        sides = [list(obj["train"]), list(obj["test"])]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise InputError(f'split_file: {p.name} is not JSON of the form {{"train": [ids], "test": [ids]}}') from None
    row = {iid: r for r, iid in enumerate(item_ids)}
    out = []
    for name, ids in zip(("train", "test"), sides, strict=True):
        rows = []
        for x in ids:
            key = f"winoground/{x}" if isinstance(x, int) or (isinstance(x, str) and x.isdigit()) else str(x)
            if key not in row:
                raise InputError(f"split_file: {name} item {x!r} is not in the cache")
            rows.append(row[key])
        out.append(rows)
    if not out[0] or not out[1]:
        raise InputError(f"split_file: {p.name} needs non-empty train and test lists")
    both = set(out[0]) & set(out[1])
    if both:
        raise InputError(f"split_file: item(s) {sorted(item_ids[r] for r in both)[:3]} are on both sides")
    return out[0], out[1]


def split_file_input(path: str | os.PathLike[str] | None) -> dict[str, dict[str, str]]:
    """The manifest's record of a split file (empty without one)."""
    if path is None:
        return {}
    return {"split_file": {"path": str(path), "sha256": sha256_file(path)}}


def item_split(
    index: Any, items: Sequence[int], test_size: int | float, seed: int, stratify: Sequence[str] | None,
    split_file: str | os.PathLike[str] | None = None,
) -> tuple[ItemSplit, list[str], list[int]]:
    """Item split of ``items``, the tag families it was stratified on, and the items it covers.

    The split numbers items by position in the returned list. With ``split_file`` the lists in
    the file are used (items outside them are left out); otherwise a seeded split stratified
    on ``stratify``.

    Parameters
    ----------
    index : CacheIndex
    items : sequence of int
        Item rows that can give examples.
    """
    if split_file is not None:
        train, test = read_split_file(split_file, index.item_ids)
        usable = set(items)
        unusable = [index.item_ids[r] for r in [*train, *test] if r not in usable]
        if unusable:
            raise InputError(f"split_file: item(s) {unusable[:3]} cannot give examples (missing captions or variants)")
        chosen = sorted([*train, *test])
        pos = {r: n for n, r in enumerate(chosen)}
        split = ItemSplit(np.array(sorted(pos[r] for r in train)), np.array(sorted(pos[r] for r in test)), -1,
                          {"split_file": len(chosen)})
        return split, [], chosen
    keys, families = stratum_keys(index, items, stratify)
    return stratified_item_split(keys, test_size=test_size, seed=seed), families, list(items)


@dataclass(frozen=True)
class ItemPlan:
    """The items of one MLP experiment run (see :func:`plan_items`)."""

    items: list[int]
    split: ItemSplit
    families: list[str]
    model: str
    #: The run's name: the label and the settings it changed.
    run: str


#: Settings of the MLP experiments that the rows show (layer, stream, seed, subset columns).
SWEPT = ("layers", "streams", "seeds")


def plan_items(slot: RunSlot, config: Any, index: Any, items: Sequence[int]) -> ItemPlan:
    """Split ``items`` (:func:`item_split` with the config's split fields) for the run of ``slot``.

    ``config`` has the split options; ``slot`` is the results slot
    :meth:`~vlprobe.runs.declare.Experiment.run` claimed before any work.
    """
    split, families, chosen = item_split(
        index, items, config.test_size, config.split_seed, config.stratify, config.split_file
    )
    return ItemPlan(chosen, split, families, slot.label, slot.name)


@dataclass(frozen=True)
class FeatureBlock:
    """Feature groups of the examples that share an input width, trained as one batched model.

    Attributes
    ----------
    X : ndarray, shape (G, N, D)
        Features of the N examples under each of G groups.
    labels : ndarray of {0, 1}, shape (G, N)
    group_fields : sequence of dict
        Tidy columns of each group (``layer``, ``subset``).
    base : dict
        Tidy columns of every row of the block (experiment, model, stream, pooling, probe).
    """

    X: np.ndarray
    labels: np.ndarray
    group_fields: Sequence[dict[str, Any]]
    base: dict[str, Any]


def train_probes(
    experiment: Experiment, config: MLPProbeRunOptions, index: Any, plan: ItemPlan, example_items: np.ndarray,
    blocks: Sequence[FeatureBlock], extra: dict[str, Any],
) -> RunRows:
    """Train target and control probes on every block: the tidy rows, the per-item rows, the
    summary and the manifest's entries, for :meth:`~vlprobe.runs.declare.Experiment.run` to write.

    Parameters
    ----------
    example_items : ndarray of int, shape (N,)
        Item of each example, numbered as ``plan.items``.
    blocks : sequence of FeatureBlock
        One per input width (streams of different widths are trained apart).
    extra : dict
        Experiment-specific manifest entries (the split, flips, seeds, device, config and inputs
        are added).
    """
    seeds = list(range(config.seeds))
    rows: list[dict[str, Any]] = []
    item_rows: list[dict[str, Any]] = []
    methods: set[str] = set()
    flips: dict[int, list[int]] = {}
    item_ids = [index.item_ids[r] for r in plan.items]
    for block in blocks:
        scores, flips = train_target_control(block.X, block.labels, example_items, plan.split, seeds, config,
                                             progress=config.progress, desc=experiment.name)
        rows += score_rows(scores, block.group_fields, block.base)
        derived, block_items, block_methods = uncertainty_rows(
            scores, block.group_fields, block.base, item_ids, config.bootstrap, config.bootstrap_seed,
            config.permutations,
        )
        rows += derived
        item_rows += block_items
        methods |= block_methods
    stem = result_stem(plan.run)
    return RunRows(
        rows, {"cache": index.provenance, **split_file_input(config.split_file)}, seeds=seeds,
        device=device_name(resolve_device(config.device)), item_rows=item_rows, summary=True,
        extra={
            "model": plan.model, **extra,
            **split_record(index.item_ids, plan.items, plan.split, plan.families, config.split_file, flips),
            "units": units_of(rows, item_rows),
            "bootstrap": {"resamples": config.bootstrap, "seed": config.bootstrap_seed, "level": 0.95,
                          "over": "the items of each split side (per item: accuracy over its examples; "
                                  "control per item = mean over control seeds)"},
            "permutation_test": {"test": PERMUTATION_TEST, "permutations": config.permutations,
                                 "seed": config.bootstrap_seed, "method": sorted(methods)},
            "outputs": [f"{stem}.csv", f"{stem}.items.csv", f"{stem}.summary.csv"],
        },
    )
