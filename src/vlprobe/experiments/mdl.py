"""Online code length of the probes' labels per layer (``probe run mdl``; Voita & Titov 2020).

How many bits does it take to send a task's labels to someone who holds the states? With the
*online* (prequential) code, the examples go in blocks: the first with the uniform code (one bit
per binary label), every later block with a probe trained on all the blocks before it
(:func:`vlprobe.probes.information.online_code_length`). A layer from which the label is easy to
extract gives a short code from few examples; one that only lets a probe memorise gives about the
uniform code. Unlike a probe's accuracy, the code length also counts how much data the probe
needed, and so separates a layer from the control task better (Voita & Titov 2020,
"Information-Theoretic Probing with Minimum Description Length").

Labels (``labels``): ``variant`` (the variant probe's), ``text-score`` and ``image-score`` (task
adaptation's), read by :mod:`vlprobe.experiments.probe_tasks`. The control task is the
same examples with the labels of a seeded half of the items flipped (the probes' control).

Blocks: the items are put in a seeded order (one per seed, ``default_rng(seed)``); block ends
are Voita & Titov's fractions 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.25, 12.5, 25, 50 and 100 % of the
items, rounded up to whole items (an item's examples are never split between what the probe is
trained on and what it codes), merged where they round to the same item: 400 Winoground items
give ends 1, 2, 4, 7, 13, 25, 50, 100, 200, 400. The manifest records the ends. The probe
(``probe``) is an MLP on standardised features (default: 2 linear layers, width 128, Adam lr 1e-3,
50 epochs, batch 64; the variant label is an XOR no linear probe reads) or a logistic regression
(L2, ``C``); one is trained per block, so the cost is about ``2 x seeds x blocks`` probe fits
per layer.

Outputs in ``OUT/mdl/``: ``<run>.csv`` (the run named by its label and the settings it changed;
tidy; split ``online``; per layer, task = target or control, seed = the order's seed:
``online_code`` and ``uniform_code`` in bits, ``compression`` = uniform / online; one column per
setting), ``<run>.summary.csv`` (target vs control mean/min/max over the seeds) and
``manifest.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vlprobe.experiments.cache_features import cache_label, cache_path, load_index
from vlprobe.experiments.probe_tasks import (
    TASKS,
    InformationProbeOptions,
    VariantDrawOptions,
    config_examples,
    probe_setup,
)
from vlprobe.probes.information import (
    VOITA_FRACTIONS,
    block_boundaries,
    online_code_length,
    probe_record,
)
from vlprobe.probes.splits import flip_labels
from vlprobe.progress import progress_bar, say
from vlprobe.runs.charts import Chart
from vlprobe.runs.declare import Experiment, option
from vlprobe.runs.option_groups import (
    CacheInput,
    ProgressOption,
    ResultsOptions,
    SeedsOption,
    StateOptions,
)
from vlprobe.runs.printout import summary_lines
from vlprobe.runs.units import units_of
from vlprobe.runs.writing import RunRows, RunSlot
from vlprobe.validation import InputError

__all__ = ["EXPERIMENT", "MDLConfig", "control_items", "run_mdl"]


@dataclass(frozen=True, kw_only=True)
class MDLConfig(CacheInput, StateOptions, SeedsOption, VariantDrawOptions, InformationProbeOptions, ProgressOption,
                ResultsOptions):
    """One run: a cache in, ``OUT/mdl/`` out.

    Attributes
    ----------
    labels : str
        ``variant`` (the variant probe's), ``text-score`` or ``image-score`` (task adaptation's).
    streams : tuple of str, optional
        ``variant``: one text or pair stream (default ``text``, else the first); the scores: the
        streams concatenated (default every stream).
    seeds : int
        Item orders (and control flips), seeds 0..seeds-1.
    draws, draw_seed : int
        ``variant``: examples per item and (caption, order), and the seed of the draws.
    probe : str
        ``mlp`` (``depth, width, lr, epochs, batch_size, device``) or ``logistic`` (``C``).
    """

    cache: Path = CacheInput.redeclare("cache", help="A vlprobe cache with caption variants (variant labels) or "
                                                     "Winoground's pairs (text-score, image-score).")
    labels: str = option("variant", choices=TASKS, help="Whose labels: variant (the variant probe's), text-score or "
                                                        "image-score (task adaptation's).")
    streams: tuple[str, ...] | None = StateOptions.redeclare(
        "streams", help="variant: one text or pair stream; the scores: streams concatenated (default: every stream).",
    )
    seeds: int = SeedsOption.redeclare("seeds", 3, help="Item orders and control flips (seeds 0..N-1).")


def control_items(n_items: int, seed: int) -> np.ndarray:
    """The items whose labels the control task flips: ``n_items // 2`` drawn by ``default_rng([seed, 1])``."""
    return np.sort(np.random.default_rng([seed, 1]).permutation(n_items)[: n_items // 2])


def run_mdl(config: MDLConfig) -> tuple[Path, Path, list[dict[str, Any]]]:
    """Run the experiment and write its outputs (module docstring; :meth:`Experiment.run`).

    Returns
    -------
    csv_path, manifest_path : Path
    rows : list of dict
    """
    return EXPERIMENT.run(config)


def compute_mdl(config: MDLConfig, slot: RunSlot) -> RunRows:
    """The online codes of every layer and seed, target and control: tidy rows and the manifest's entries."""
    from vlprobe.extract.cache.reader import ActivationCache

    seeds, make = probe_setup(config)
    with ActivationCache(cache_path(config.cache)) as cache:
        index = load_index(cache)
        model = slot.label
        ex = config_examples(cache, index, config, config.labels)
    n_items = len(ex.items)
    bounds = block_boundaries(n_items)
    base = {"experiment": EXPERIMENT.name, "model": model, "stream": ex.stream, "pooling": ex.pooling, "probe": config.probe,
            "split": "online", "subset": "all" if config.labels == "variant" else config.labels}
    rows: list[dict[str, Any]] = []
    flips = {s: control_items(n_items, s) for s in seeds}
    n_codes = len(ex.layers) * len(seeds) * 2
    say(config.progress, f"{EXPERIMENT.name}: {config.labels} labels of {n_items} items ({len(ex.labels)} examples), stream "
                         f"{ex.stream}: {n_codes} online codes ({len(ex.layers)} layers x {len(seeds)} seed(s) x "
                         f"target + control), {len(bounds) - 2} {config.probe} probe fits each")
    with progress_bar(config.progress, n_codes, EXPERIMENT.name, "code") as bar:
        for g, layer in enumerate(ex.layers):
            X = ex.X[g]
            if not np.isfinite(X).all():
                raise InputError(f"cache: states of layer {layer} hold NaN or infinite values")
            for seed in seeds:
                for task, y in (("target", ex.labels), ("control", flip_labels(ex.labels, ex.example_items, flips[seed]))):
                    code = online_code_length(X, y, ex.example_items, n_classes=2, seed=seed, make_probe=make)
                    row = {**base, "layer": layer, "kind": ex.kinds[g], "task": task, "seed": seed,
                           "n": code.n_examples}
                    rows += [{**row, "metric": "online_code", "value": code.online_bits},
                             {**row, "metric": "uniform_code", "value": code.uniform_bits},
                             {**row, "metric": "compression", "value": code.compression}]
                    bar.update()
    return RunRows(rows, {"cache": index.provenance}, seeds=seeds, summary=True, extra={
        "model": model, "labels": config.labels, "stream": ex.stream, "layers": ex.layers,
        "n_items": n_items, "n_examples": len(ex.labels), "skipped_items": ex.skipped, **ex.extra,
        "blocks": {"fractions": list(VOITA_FRACTIONS), "ends_in_items": bounds[1:].tolist(),
                   "first_block": "uniform code (log2 2 = 1 bit per label)",
                   "order": "items permuted by numpy default_rng(seed); an item's examples stay in one block"},
        "probe": probe_record(config),
        "control": "labels of the items numpy default_rng([seed, 1]) draws (half of them) flipped",
        "control_flipped_items": {str(s): [index.item_ids[ex.items[i]] for i in f] for s, f in flips.items()},
        "units": units_of(rows),
    })


def report(config: MDLConfig, result: tuple[Path, Path, list[dict[str, Any]]]) -> list[str]:
    """Compression (uniform / online code), target vs control, per layer; then the files written."""
    csv_path, _, rows = result
    return summary_lines(rows, "compression", "online", csv_path)


# Version 2: settings-keyed run names and setting columns; the labels option (was task).
EXPERIMENT = Experiment("mdl", 2, MDLConfig, compute_mdl, report, label=cache_label, swept=("streams", "layers", "seeds"),
                        chart=Chart("layers", ("compression", "online_code"), split="online"))
