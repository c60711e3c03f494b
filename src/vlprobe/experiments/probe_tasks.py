"""The labelled examples of the paper's trained probes, for experiments that measure them otherwise.

``variant``: the variant probe's triples (reference, option 1, option 2) of one item's texts,
label = which option paraphrases the reference (:mod:`vlprobe.experiments.variant_probe`);
``text-score`` / ``image-score``: task adaptation's pairs of pair embeddings, label = whether
option 1 is the mismatched pair (:mod:`vlprobe.experiments.task_adaptation`). The online code
length (``mdl``) and conditional probing (``conditional``) read them from here, so the labels are
exactly those the MLP probes are trained on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.experiments.cache_features import CacheIndex, StreamStates, read_stream
from vlprobe.probes.information import PROBE_FAMILIES, ProbeFactory, make_probe_factory
from vlprobe.runs.declare import Options, option
from vlprobe.runs.option_groups import MLPOptions
from vlprobe.validation import (
    InputError,
    check_choice,
    check_positive_float,
    check_positive_int,
    check_seed,
)

__all__ = ["TASKS", "InformationProbeOptions", "TaskExamples", "VariantDrawOptions", "config_examples", "probe_setup",
           "task_examples"]

TASKS = ("variant", "text-score", "image-score")


@dataclass(frozen=True, kw_only=True)
class VariantDrawOptions(Options):
    """How the variant task's examples are drawn."""

    panel = "Examples"
    rank = 25

    draws: int = option(4, check=check_positive_int, help="variant: examples per item and (caption, order).")
    draw_seed: int = option(0, check=check_seed, help="variant: seed of the drawn examples.")


@dataclass(frozen=True, kw_only=True)
class InformationProbeOptions(MLPOptions):
    """The probe whose code length or cross-entropy is measured: a small MLP (default; the variant
    label is an XOR no linear probe reads) or a logistic regression."""

    panel = "Probe"

    probe: str = option("mlp", choices=PROBE_FAMILIES, help="Probe family: mlp or logistic.")
    depth: int = MLPOptions.redeclare("depth", 2)
    width: int = MLPOptions.redeclare("width", 128)
    lr: float = MLPOptions.redeclare("lr", 1e-3)
    epochs: int = MLPOptions.redeclare("epochs", 50)
    batch_size: int = MLPOptions.redeclare("batch_size", 64)
    C: float = option(1.0, check=check_positive_float, help="logistic: inverse L2 strength.")


@dataclass
class TaskExamples:
    """One task's examples at every layer read.

    Attributes
    ----------
    task : str
    X : ndarray of float32, shape (G, N, D)
        Features per layer group.
    labels : ndarray of int, shape (N,)
    example_items : ndarray of int, shape (N,)
        Position of each example's item in ``items``.
    items : list of int
        Cache item numbers used.
    layers : list
        The layer of each group.
    kinds : list of str or None
        The declared kind of each group's layer (``+``-joined across concatenated streams).
    stream : str
        The stream column (streams joined by ``+``).
    skipped : list of str
        Item ids that cannot give an example.
    rows : ndarray of int, shape (N, 3), optional
        ``variant``: the stream rows of (reference, option 1, option 2).
    read : StreamStates, optional
        ``variant``: the stream read.
    pooling : str
        The pooling read (``+``-joined where the streams' differ, as ``stream``).
    extra : dict
        What the manifest records about the examples.
    """

    task: str
    X: np.ndarray
    labels: np.ndarray
    example_items: np.ndarray
    items: list[int]
    layers: list[Any]
    kinds: list[str | None]
    stream: str
    skipped: list[str]
    rows: np.ndarray | None = None
    read: StreamStates | None = None
    pooling: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def task_examples(
    cache: Any, index: CacheIndex, task: str, streams: Sequence[str] | None, pooling: str | None, layers: str,
    *, draws: int = 4, seed: int = 0, items: Sequence[int] | None = None,
) -> TaskExamples:
    """Read one task's examples from an open cache.

    Parameters
    ----------
    cache : ActivationCache
    index : CacheIndex
    task : str
        One of :data:`TASKS`.
    streams : sequence of str, optional
        ``variant``: at most one text or pair stream (default: ``text``, else the first);
        the scores: the streams concatenated (default: every stream).
    pooling : str, optional
        The pooling given (refused where a stream lacks it); None: ``cls``, else each stream's
        default (:func:`~vlprobe.experiments.cache_features.stream_pooling`).
    layers : str
        As the probes read them (per-stream layer specs for the scores).
    draws, seed : int
        ``variant``: draws per (caption, order) and the seed of the draws.
    items : sequence of int, optional
        The items to use, in this order (e.g. an item split's); default every item that can give
        an example.
    """
    from vlprobe.experiments import task_adaptation as ta
    from vlprobe.experiments import variant_probe as vp

    check_choice(task, "task", TASKS)
    name = Path(cache.path).name
    if task == "variant":
        if streams and len(streams) > 1:
            raise InputError(f"streams: the variant task reads one text or pair stream, got {list(streams)}")
        read = read_stream(cache, streams[0] if streams else None, ("text", "pair"), pooling, layers, param="streams")
        items = list(items) if items is not None else vp.variant_items(index)
        if len(items) < 2:
            raise InputError(f"cache: the variant task needs at least 2 items whose two captions both have a "
                             f"variant; {name} has {len(items)}")
        texts, image, labels, example_items = vp.variant_examples(index.families, index.item_images, items, draws, seed)
        rows = vp.stream_rows(read, texts, image)
        X = read.states[rows].transpose(2, 0, 1, 3)  # (L, N, 3, H)
        X = np.ascontiguousarray(X.reshape(X.shape[0], X.shape[1], -1), dtype=np.float32)
        skipped = [iid for i, iid in enumerate(index.item_ids) if i not in set(items)]
        return TaskExamples(task, X, labels, example_items, items, list(read.layers),
                            [read.kind(layer) for layer in read.layers], read.name, skipped, rows, read,
                            read.pooling, {"labels": "0 when option 1 paraphrases the reference, 1 when option 2 does",
                             "draws": draws, "draw_seed": seed})
    chosen = list(streams) if streams else list(cache.streams)
    read_all = {s: read_stream(cache, s, ("text", "image", "pair"), pooling, layers, param="streams") for s in chosen}
    per_stream = {s: read_all[s].layers for s in chosen}
    positions = ta._stream_layers(per_stream)
    items = list(items) if items is not None else ta.pair_items(index)
    if len(items) < 2:
        raise InputError(f"cache: the {task} task needs items with 2 images and 2 captions (Winoground); "
                         f"{name} has {len(items)}")
    mode = task.split("-")[0]
    X, labels, fields = ta.pair_examples(index, read_all, chosen, positions, per_stream, items, (mode,))
    skipped = [iid for i, iid in enumerate(index.item_ids) if i not in set(items)]
    return TaskExamples(task, X, labels[0], np.repeat(np.arange(len(items)), 4), items,
                        [f["layer"] for f in fields], [f["kind"] for f in fields], "+".join(chosen), skipped,
                        pooling=_joined([read_all[s].pooling for s in chosen]),
                        extra={"labels": "1 when option 1 is the mismatched pair",
                               "layer_positions": [{s: p[s] for s in chosen} for p in positions]})


def _joined(poolings: list[str]) -> str:
    """One pooling where the streams agree, else each stream's joined by ``+`` (``cls+mean``)."""
    return poolings[0] if len(set(poolings)) == 1 else "+".join(poolings)


def config_examples(cache: Any, index: CacheIndex, config: Any, task: str, *,
                    items: Sequence[int] | None = None) -> TaskExamples:
    """:func:`task_examples` read as a config says: its ``streams``, ``pooling`` and ``layers``
    (:class:`~vlprobe.runs.option_groups.StateOptions`) and its ``draws`` and ``draw_seed``
    (:class:`VariantDrawOptions`)."""
    return task_examples(cache, index, task, config.streams, config.pooling, config.layers,
                         draws=config.draws, seed=config.draw_seed, items=items)


def probe_setup(config: Any) -> tuple[list[int], ProbeFactory]:
    """A run's seeds (``0..seeds-1``) and the factory of the probe its
    :class:`InformationProbeOptions` declare."""
    return list(range(config.seeds)), make_probe_factory(config.probe, config)
