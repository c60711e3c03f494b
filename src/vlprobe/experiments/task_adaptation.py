"""Task-adapted MLP on fused pair embeddings (``probe run task-adaptation``; paper §3.2).

The embedding of an image-caption pair is the concatenation, over the chosen streams, of the
pair's state in each stream (a text stream gives the caption's row, an image stream the image's,
a pair stream the pair's). Every Winoground item gives four examples per mode; each example is
``concat(embedding(option 1), embedding(option 2))`` and its label is 1 when option 1 is the
mismatched pair:

* ``text`` score (the distractor shares the image): I0C0|I0C1 -> 0, I0C1|I0C0 -> 1,
  I1C0|I1C1 -> 1, I1C1|I1C0 -> 0;
* ``image`` score (the distractor shares the caption): I0C0|I1C0 -> 0, I0C1|I1C1 -> 1,
  I1C0|I0C0 -> 1, I1C1|I0C1 -> 0.

An MLP (default: four linear layers, width 1024, ReLU, Adam lr 1e-4, BCE on logits, batch 200,
200 epochs) is trained per mode, layer and seed on the train items of a seeded split stratified on
tags (300/100 for Winoground's 400 items), and a control probe on the same examples with the labels
of half of each split side's items flipped (per seed). Predictions are ``logit > 0``. All probes of
a run are trained at once as one batched model.

Streams and poolings: by default every stream of the cache, except that with ``pooled`` (the
default, the paper's: the model's own pooled output) only the streams that have one (CLIP: text
and image; LXMERT: ``lang``; UNITER: ``text``), as in the paper. A chosen stream without the
asked pooling is read with its default one (``cls``, else ``mean``; LXMERT ``vision``: ``mean``),
at its last layer when ``pooled`` was asked; a line on stderr says so, the ``pooling`` column
holds each stream's pooling (``cls+mean``) and the manifest ``pooling_fallback``.

Layers: with ``pooled`` there is no layer axis. Otherwise ``layers`` is resolved per stream
(``text=all;image=-1`` style specs work); streams given one layer keep it while the others sweep.
Streams that sweep different numbers of layers are paired by relative depth: the sweep has as
many positions as the longest one, and position ``p`` of ``P`` takes each stream's layer
``round(p * (L_s - 1) / (P - 1))`` of its ``L_s`` swept layers (first with first, last with
last; LXMERT ``lang`` 0..14 with ``vision`` 0..10). The ``layer`` column holds the layer of the
stream with the longest sweep; the manifest lists every stream's layer per position.

Outputs in ``OUT/task-adaptation/``: ``<model>.csv`` (tidy; ``stream`` = the streams joined by
``+``, ``subset`` = ``text-score`` or ``image-score``, metric ``accuracy`` in percent, splits
``train`` and ``test``), ``<model>.summary.csv`` and ``manifest.json`` (with the split's item ids
and every seed's flipped items).
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
)
from vlprobe.experiments.mlp_runs import SWEPT, FeatureBlock, plan_items, train_probes
from vlprobe.progress import say
from vlprobe.runs.charts import Chart
from vlprobe.runs.declare import Experiment, option
from vlprobe.runs.option_groups import (
    CacheInput,
    MLPProbeRunOptions,
    StateOptions,
)
from vlprobe.runs.presets import PRESET_VALUES
from vlprobe.runs.printout import summary_lines
from vlprobe.runs.writing import RunRows, RunSlot
from vlprobe.validation import InputError

__all__ = ["EXPERIMENT", "MODE_EXAMPLES", "TaskAdaptationConfig", "pair_examples", "pair_items", "run_task_adaptation"]

PROBE = "mlp"

#: Per mode, the four examples of an item: ((image, caption) of option 1, of option 2, label).
MODE_EXAMPLES: dict[str, tuple[tuple[tuple[int, int], tuple[int, int], int], ...]] = {
    "text": (((0, 0), (0, 1), 0), ((0, 1), (0, 0), 1), ((1, 0), (1, 1), 1), ((1, 1), (1, 0), 0)),
    "image": (((0, 0), (1, 0), 0), ((0, 1), (1, 1), 1), ((1, 0), (0, 0), 1), ((1, 1), (0, 1), 0)),
}
MODES = ("text", "image", "both")


@dataclass(frozen=True, kw_only=True)
class TaskAdaptationConfig(MLPProbeRunOptions):
    """One run: a cache in, ``OUT/task-adaptation/`` out.

    Attributes
    ----------
    mode : str
        ``text``, ``image`` or ``both``.
    streams : tuple of str, optional
        Streams whose states are concatenated (default: every stream of the cache; with
        ``pooled``, those that have a pooled output).
    pooling, layers : str
        See the module docstring.
    seeds : int
        Seeds 0..seeds-1 (initialisation, order, control flips).
    test_size, split_seed, stratify, split_file
        The item split (:class:`~vlprobe.runs.option_groups.SplitOptions`); ``split_file``
        may hold the paper's 300/100 lists.
    depth, width, lr, epochs, batch_size, device
        The MLP settings (:class:`~vlprobe.runs.option_groups.MLPOptions`); the
        ``quick`` preset (:mod:`vlprobe.runs.presets`) has fewer seeds and epochs and a
        narrower MLP.
    progress : bool
        Say on stderr how many probes will train and show a bar with an ETA.
    bootstrap, bootstrap_seed, permutations : int
        Item-bootstrap resamples and their seed (95% intervals of target, control, selectivity)
        and the sign flips of the target-vs-control permutation test (seeded by bootstrap_seed).
    """

    cache: Path = CacheInput.redeclare("cache", help="A vlprobe cache of Winoground.")
    mode: str = option("both", choices=MODES, help="Examples: text-score, image-score or both.")
    streams: tuple[str, ...] | None = StateOptions.redeclare(
        "streams", help="Streams whose pair embeddings are concatenated, comma-separated (default: every stream; "
                   "with pooled, those that have a pooled output).",
    )
    pooling: str | None = StateOptions.redeclare(
        "pooling", None,
        help="Pooling to read (default: pooled, or a stream's own where it has none, at its last layer, said on "
             "stderr); one given is read from every stream, or refused where a stream lacks it.",
    )
    layers: str = StateOptions.redeclare(
        "layers", help="Layers: all | 0,4,-1 | 2:6 | per stream lang=all;vision=-1 (ignored for pooled).",
    )


def _stream_layers(per_stream: dict[str, list[int | None]]) -> list[dict[str, int | None]]:
    """Layer of each stream per sweep position; sweeps of unequal length paired by relative depth."""
    n = max(len(ls) for ls in per_stream.values())
    if n == 1:
        return [{s: ls[0] for s, ls in per_stream.items()}]
    return [
        {s: ls[round(p * (len(ls) - 1) / (n - 1))] for s, ls in per_stream.items()} for p in range(n)
    ]


def _default_streams(cache: Any, pooling: str) -> list[str]:
    """Every stream; with ``pooled``, those that hold a pooled output (all when none does)."""
    streams = list(cache.streams)
    if pooling == "pooled":
        return [s for s in streams if "pooled" in cache.poolings(s)] or streams
    return streams


def run_task_adaptation(config: TaskAdaptationConfig) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Run the experiment and write its outputs (module docstring; :meth:`Experiment.run`).

    Returns
    -------
    csv_path, manifest_path : Path
    rows : list of dict
    """
    return EXPERIMENT.run(config)


def compute_task_adaptation(config: TaskAdaptationConfig, slot: RunSlot) -> RunRows:
    """Train the probes on every mode and layer: tidy rows, per-item rows and the manifest's entries."""
    from vlprobe.extract.cache.reader import ActivationCache

    modes = ("text", "image") if config.mode == "both" else (config.mode,)
    with ActivationCache(cache_path(config.cache)) as cache:
        streams = list(config.streams) if config.streams else _default_streams(cache, config.pooling or "pooled")
        if not streams:
            raise InputError(f"cache: {Path(config.cache).name} holds no streams")
        index = load_index(cache)
        cache_streams = list(cache.streams)
        read = {
            s: read_stream(cache, s, ("text", "image", "pair"), config.pooling, config.layers, param="streams",
                           preferred="pooled")
            for s in streams
        }
    per_stream = {s: read[s].layers for s in streams}
    positions = _stream_layers(per_stream)
    for note in pooling_notes(list(read.values()), EXPERIMENT.name):
        say(config.progress, note)
    left_out = [s for s in cache_streams if s not in streams] if not config.streams else []
    if left_out:
        say(config.progress, f"{EXPERIMENT.name}: streams {', '.join(streams)} (the ones with a {config.pooling or 'pooled'!r} output); "
                             f"{', '.join(left_out)} left out (name them in --streams to add their default pooling)")

    items = pair_items(index)
    if len(items) < 2:
        raise InputError(
            f"cache: task adaptation needs items with 2 images and 2 captions (Winoground); "
            f"{Path(config.cache).name} has {len(items)}"
        )
    plan = plan_items(slot, config, index, items)
    items = plan.items

    X, labels, group_fields = pair_examples(index, read, streams, positions, per_stream, items, modes)
    example_items = np.repeat(np.arange(len(items)), 4)
    poolings = [read[s].pooling for s in streams]
    base = {"experiment": EXPERIMENT.name, "model": plan.model, "stream": "+".join(streams),
            "pooling": poolings[0] if len(set(poolings)) == 1 else "+".join(poolings), "probe": PROBE}
    block = FeatureBlock(X, labels, group_fields, base)
    return train_probes(EXPERIMENT, config, index, plan, example_items, [block], {
        "streams": streams, "modes": list(modes),
        "pooling": {s: read[s].pooling for s in streams},
        "pooling_fallback": {s: {"asked": r.asked_pooling, "used": r.pooling, "layers": r.layers}
                             for s, r in read.items() if r.fell_back},
        "layer_pairing": "relative depth: position p of P takes layer round(p * (L_s - 1) / (P - 1)) of each "
                         "stream's L_s swept layers; the layer column is the longest sweep's",
        "layer_positions": [{s: pos[s] for s in streams} for pos in positions],
        "labels": "1 when option 1 is the mismatched pair; prediction = logit > 0",
    })


def pair_items(index: Any) -> list[int]:
    """The items that give task-adaptation examples: two images and two captions (Winoground)."""
    return [i for i in range(len(index.item_ids)) if len(index.families[i]) >= 2 and len(index.item_images[i]) >= 2]


def pair_examples(
    index: Any, read: dict[str, Any], streams: list[str], positions: list[dict[str, int | None]],
    per_stream: dict[str, list[int | None]], items: list[int], modes: tuple[str, ...],
) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
    """The examples of every mode and layer position (module docstring).

    Returns
    -------
    X : ndarray of float32, shape (G, 4 * len(items), D)
        One group per (mode, layer position); an item's four examples are consecutive.
    labels : ndarray, shape (G, 4 * len(items))
    group_fields : list of dict
        ``subset`` (``<mode>-score``), ``layer`` and ``kind`` of each group.
    """
    # Pair embeddings E[p, n, j, k] of item items[n], image j, caption k at layer position p.
    P = len(positions)
    blocks = []
    for s in streams:
        modality, lookup = read[s].modality, read[s].lookup
        rows = np.empty((len(items), 2, 2), dtype=np.int64)
        for n, i in enumerate(items):
            for j in (0, 1):
                for k in (0, 1):
                    img, txt = int(index.item_images[i][j]), int(index.families[i][k][0])
                    key = {"text": (-1, txt), "image": (img, -1), "pair": (img, txt)}[modality]
                    if key not in lookup:
                        raise InputError(f"stream {s!r} has no row for image {img} and text {txt} (pair plan?)")
                    rows[n, j, k] = lookup[key]
        st = read[s].states  # (R, Ls, H)
        layer_pos = [per_stream[s].index(pos[s]) for pos in positions]
        blocks.append(np.stack([st[rows, lp] for lp in layer_pos]))  # (P, n_items, 2, 2, H)
    E = np.concatenate(blocks, axis=-1)

    X_groups, label_groups, group_fields = [], [], []
    for mode in modes:
        spec = MODE_EXAMPLES[mode]
        o1 = np.array([e[0] for e in spec])
        o2 = np.array([e[1] for e in spec])
        lab = np.tile(np.array([e[2] for e in spec]), len(items))
        for p in range(P):
            f1 = E[p][:, o1[:, 0], o1[:, 1]]  # (n_items, 4, D)
            f2 = E[p][:, o2[:, 0], o2[:, 1]]
            X_groups.append(np.concatenate([f1, f2], axis=-1).reshape(len(items) * 4, -1))
            label_groups.append(lab)
            group_fields.append({"subset": f"{mode}-score", "layer": _layer_label(positions[p], per_stream),
                                 "kind": _kind_label(positions[p], read)})
    X = np.stack(X_groups).astype(np.float32)
    labels = np.stack(label_groups)
    return X, labels, group_fields


def _kind_label(position: dict[str, int | None], read: dict[str, Any]) -> str | None:
    """The kinds of the streams' layers at one position, ``+``-joined where they differ (``lang+rel``)."""
    kinds = list(dict.fromkeys(k for s, layer in position.items() if (k := read[s].kind(layer)) is not None))
    return "+".join(kinds) if kinds else None


def _layer_label(position: dict[str, int | None], per_stream: dict[str, list[int | None]]) -> int | None:
    """The layer of the stream with the longest sweep (the first such; else of the first stream)."""
    longest = max(per_stream, key=lambda s: len(per_stream[s]))
    return position[longest]


def report(config: TaskAdaptationConfig, result: tuple[Path, Path, list[dict[str, Any]]]) -> list[str]:
    """Test accuracy, target vs control, per mode and layer; then the files written."""
    csv_path, _, rows = result
    return summary_lines(rows, "accuracy", "test", csv_path, side=(f"{csv_path.stem}.items.csv",))


EXPERIMENT = Experiment("task-adaptation", 1, TaskAdaptationConfig, compute_task_adaptation, report, label=cache_label,
                        presets=PRESET_VALUES["task-adaptation"], swept=(*SWEPT, "mode"),
                        chart=Chart("layers", ("accuracy",), subsets=None, chance={"accuracy": 50.0}, split="test"))
