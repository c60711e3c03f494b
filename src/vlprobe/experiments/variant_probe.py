"""MLP on caption variants: which option paraphrases the reference? (``probe run variant-probe``; §5.3).

An example is a triple (reference, option 1, option 2) of texts of one item: the reference is a
text of caption ``k``'s family (the caption and its variants), one option another text of the same
family and the other option a text of caption ``1 - k``'s family. The label is 0 when option 1
is the paraphrase, 1 when option 2 is; the input is ``concat(state(ref), state(opt1),
state(opt2))`` at one layer. Per item, every (k, order) combination is drawn ``draws`` times from
``numpy.random.default_rng([split_seed, item])`` (fixed examples instead of the paper's unseeded
re-sampling on every access). Items where a caption has no variant cannot give an example and are
left out (the paper's code hangs on them); the manifest lists them.

On a stream of (image, text) pairs the three texts are read conditioned on one image of the item,
drawn with the example. Several streams (``streams``) are probed on the same examples, each on its
own (the ``stream`` column tells them apart).

Per layer and seed an MLP (default: three linear layers, width 1024, Adam lr 5e-5, batch 128,
200 epochs; the paper used 7,500 epochs over re-sampled variants) is trained on the train items of
a seeded, tag-stratified item split, and a control probe on the same examples with the labels of
half of each split side's items flipped. All probes are trained at once as one batched model.

Outputs in ``OUT/variant-probe/``: ``<model>.csv`` (tidy; metric ``accuracy`` in percent, splits
``train`` and ``test``), ``<model>.summary.csv`` and ``manifest.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.experiments.cache_features import (
    cache_label,
    cache_path,
    load_index,
    pooling_notes,
    read_stream,
    require_variants,
    resolve_stream,
)
from vlprobe.experiments.mlp_runs import SWEPT, FeatureBlock, plan_items, train_probes
from vlprobe.progress import say
from vlprobe.runs.charts import Chart
from vlprobe.runs.declare import Experiment, option
from vlprobe.runs.option_groups import (
    CacheInput,
    MLPOptions,
    MLPProbeRunOptions,
    SplitOptions,
    StateOptions,
)
from vlprobe.runs.presets import PRESET_VALUES
from vlprobe.runs.printout import summary_lines
from vlprobe.runs.writing import RunRows, RunSlot
from vlprobe.validation import InputError, check_positive_int

__all__ = ["EXPERIMENT", "VariantProbeConfig", "run_variant_probe", "stream_rows", "variant_examples", "variant_items"]

PROBE = "mlp"


@dataclass(frozen=True, kw_only=True)
class VariantProbeConfig(MLPProbeRunOptions):
    """One run: a cache (with variants) in, ``OUT/variant-probe/`` out.

    Attributes
    ----------
    streams : tuple of str, optional
        Default: ``text`` if present, else the first text or pair stream.
    pooling, layers : str
        A stream without ``pooling`` is read with its default one (``cls``, else ``mean``), said
        on stderr and recorded (``pooling`` column, manifest ``pooling_fallback``).
    seeds : int
    draws : int
        Examples per item and (caption, order) combination (4 combinations).
    test_size, split_seed, stratify, split_file : the item split, as in task adaptation.
    depth, width, lr, epochs, batch_size, device : MLP settings (three layers, lr 5e-5, batch 128).
    progress : bool
        Say on stderr how many probes will train and show a bar with an ETA.
    bootstrap, bootstrap_seed, permutations : int
        Item-bootstrap resamples and their seed (95% intervals of target, control, selectivity)
        and the sign flips of the target-vs-control permutation test (seeded by bootstrap_seed).
    """

    cache: Path = CacheInput.redeclare("cache", help="A vlprobe cache with caption variants (`probe extract --variants`).")
    streams: tuple[str, ...] | None = StateOptions.redeclare(
        "streams", help="Streams of texts or pairs, each probed apart, comma-separated (default: text, else the first such).",
    )
    draws: int = option(4, check=check_positive_int, help="Examples per item and (caption, order).")
    split_seed: int = SplitOptions.redeclare("split_seed", help="Seed of the item split and of the examples.")
    depth: int = MLPOptions.redeclare("depth", 3)
    lr: float = MLPOptions.redeclare("lr", 5e-5)
    batch_size: int = MLPOptions.redeclare("batch_size", 128)


def variant_items(index: Any) -> list[int]:
    """The items that give variant-probe examples: both captions with at least one variant."""
    return [i for i, f in enumerate(index.families) if len(f) >= 2 and len(f[0]) >= 2 and len(f[1]) >= 2]


def variant_examples(
    families: list[list[np.ndarray]], images: list[np.ndarray], items: list[int], draws: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Draw the examples.

    Parameters
    ----------
    families : list of list of ndarray
        ``families[item][k]``: text rows of caption ``k``.
    images : list of ndarray
        Image rows per item.
    items : list of int
        Items to use (each caption with at least two texts).
    draws : int
    seed : int

    Returns
    -------
    texts : ndarray, shape (N, 3)
        Text rows of (reference, option 1, option 2).
    image : ndarray, shape (N,)
        Image row drawn per example.
    labels : ndarray, shape (N,)
        0 when option 1 is the paraphrase, 1 when option 2 is.
    example_items : ndarray, shape (N,)
        Position of the example's item in ``items``.
    """
    texts, image, labels, owner = [], [], [], []
    for n, i in enumerate(items):
        rng = np.random.default_rng([seed, i])
        for k in (0, 1):
            same_fam, other_fam = families[i][k], families[i][1 - k]
            for order in (0, 1):
                for _ in range(draws):
                    ref, same = rng.choice(same_fam, size=2, replace=False)
                    other = rng.choice(other_fam)
                    texts.append((ref, same, other) if order == 0 else (ref, other, same))
                    labels.append(order)
                    image.append(rng.choice(images[i]) if len(images[i]) else -1)
                    owner.append(n)
    return (np.asarray(texts, dtype=np.int64), np.asarray(image, dtype=np.int64),
            np.asarray(labels, dtype=np.int64), np.asarray(owner, dtype=np.int64))


def stream_rows(read: Any, texts: np.ndarray, image: np.ndarray) -> np.ndarray:
    """(N, 3) rows of a stream for the examples' (reference, option 1, option 2) text rows and image."""
    try:
        return np.array([
            [read.lookup[(-1 if read.modality == "text" else int(img), int(t))] for t in triple]
            for img, triple in zip(image, texts, strict=True)
        ])
    except KeyError as exc:
        raise InputError(f"stream {read.name!r} has no row for (image, text) {exc.args[0]} (pair plan?)") from None


def run_variant_probe(config: VariantProbeConfig) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Run the experiment and write its outputs (module docstring; :meth:`Experiment.run`).

    Returns
    -------
    csv_path, manifest_path : Path
    rows : list of dict
    """
    return EXPERIMENT.run(config)


def compute_variant_probe(config: VariantProbeConfig, slot: RunSlot) -> RunRows:
    """Train the probes on every stream and layer: tidy rows, per-item rows and the manifest's entries."""
    from vlprobe.extract.cache.reader import ActivationCache

    with ActivationCache(cache_path(config.cache)) as cache:
        index = load_index(cache)
        require_variants(index, config.cache, "the variant probe")
        names = ([resolve_stream(cache, s, ("text", "pair"), param="streams") for s in config.streams]
                 if config.streams else [resolve_stream(cache, None, ("text", "pair"))])
        reads = [read_stream(cache, s, ("text", "pair"), config.pooling, config.layers, param="streams") for s in names]
    for note in pooling_notes(reads, EXPERIMENT.name):
        say(config.progress, note)
    items = variant_items(index)
    usable = set(items)
    skipped = [iid for i, iid in enumerate(index.item_ids) if i not in usable]
    if len(items) < 2:
        raise InputError(
            f"cache: the variant probe needs at least 2 items whose two captions both have a variant; "
            f"{Path(config.cache).name} has {len(items)}"
        )
    plan = plan_items(slot, config, index, items)
    texts, image, labels, example_items = variant_examples(
        index.families, index.item_images, plan.items, config.draws, config.split_seed
    )
    blocks = []
    for read in reads:
        rows = stream_rows(read, texts, image)
        X = read.states[rows].transpose(2, 0, 1, 3)  # (L, N, 3, H)
        X = np.ascontiguousarray(X.reshape(X.shape[0], X.shape[1], -1))
        base = {"experiment": EXPERIMENT.name, "model": plan.model, "stream": read.name, "pooling": read.pooling,
                "probe": PROBE, "subset": "all"}
        blocks.append(FeatureBlock(X, np.broadcast_to(labels, (X.shape[0], len(labels))),
                                   [{"layer": layer, "kind": read.kind(layer)} for layer in read.layers], base))
    streams = {r.name: {"modality": r.modality, "layers": r.layers, "pooling": r.pooling} for r in reads}
    return train_probes(EXPERIMENT, config, index, plan, example_items, blocks, {
        "streams": streams, "n_examples": len(labels),
        "pooling_fallback": {r.name: {"asked": r.asked_pooling, "used": r.pooling} for r in reads if r.fell_back},
        "skipped_items": skipped,
        "labels": "0 when option 1 is the paraphrase of the reference, 1 when option 2 is; prediction = logit > 0",
    })


def report(config: VariantProbeConfig, result: tuple[Path, Path, list[dict[str, Any]]]) -> list[str]:
    """Test accuracy, target vs control, per stream and layer; then the files written."""
    csv_path, _, rows = result
    return summary_lines(rows, "accuracy", "test", csv_path, side=(f"{csv_path.stem}.items.csv",))


EXPERIMENT = Experiment("variant-probe", 1, VariantProbeConfig, compute_variant_probe, report, label=cache_label,
                        presets=PRESET_VALUES["variant-probe"], swept=SWEPT,
                        chart=Chart("layers", ("accuracy",), chance={"accuracy": 50.0}, split="test"))
